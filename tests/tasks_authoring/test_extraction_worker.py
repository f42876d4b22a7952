"""Extraction runs in a real Celery worker process, enqueued after the upload's commit."""

from __future__ import annotations

import io
import time

import pytest

from tasks_authoring import services
from tests.tasks_authoring.data_helpers import xlsx_bytes

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _upload(version, user, path, data: bytes):
    return services.world_file_upload(version=version, user=user, path=path, uploaded=io.BytesIO(data))


def test_a_real_worker_extracts_an_uploaded_workbook(live_celery_worker, make_user):
    expert = make_user("wes_expert", "expert")
    version = services.task_create(owner=expert, title="Worker test", domain="finance").latest_version
    world_file = _upload(version, expert, "model.xlsx", xlsx_bytes())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        world_file.refresh_from_db()
        if world_file.extraction_status in ("done", "failed"):
            break
        time.sleep(0.3)
    assert world_file.extraction_status == "done", world_file.extraction_error
    assert world_file.preview["sheets"][0]["rows"][3][1]["formula"] == "=B2-B3"
