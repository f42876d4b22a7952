"""An export asked for in the browser is written by a real Celery worker process."""

from __future__ import annotations

import time
import zipfile

import pytest

from tasks_authoring import services
from tasks_authoring.models import ExportJob
from tests.tasks_authoring.web_helpers import approved_task

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_real_worker_writes_the_export_and_reports_progress(live_celery_worker, make_user):
    expert = make_user("wes_expert", "expert")
    reviewer = make_user("wren_reviewer", "reviewer")
    task = approved_task(expert, reviewer, title="Worker export")
    job = services.export_job_create(user=expert, version=task.latest_version)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = ExportJob.objects.get(pk=job.pk)
        if job.is_finished:
            break
        time.sleep(0.3)
    assert (job.status, job.done, job.total) == ("done", 1, 1), job.error
    with job.file.open("rb") as handle:
        names = zipfile.ZipFile(handle).namelist()
    assert f"{task.slug}/tests/rubric.json" in names
