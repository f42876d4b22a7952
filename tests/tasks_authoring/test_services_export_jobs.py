"""Export jobs: queued after the commit, run by the worker's service with progress per task folder."""

from __future__ import annotations

import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from rl_engine.bundle import load_bundle
from tasks_authoring import services
from tasks_authoring.errors import AuthoringError, NotAllowed
from tasks_authoring.models import ExportJob
from tasks_authoring.tasks import export_jobs_expire
from tests.tasks_authoring.web_helpers import approved_task, draft_task

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def test_a_job_for_an_approved_version_is_queued_after_the_commit(
    expert, reviewer, researcher, django_capture_on_commit_callbacks
):
    task = approved_task(expert, reviewer)
    with django_capture_on_commit_callbacks() as callbacks:
        job = services.export_job_create(user=researcher, version=task.latest_version)
    assert len(callbacks) == 1
    assert (job.status, job.done, job.total, job.owner) == ("queued", 0, 1, researcher)
    assert (job.label, job.filename) == ("APAC growth check (version 1)", f"{task.slug}-v1.zip")


def test_running_a_job_stores_the_zip_and_counts_every_folder(expert, reviewer, researcher, tmp_path):
    first = approved_task(expert, reviewer, title="First task")
    second = approved_task(expert, reviewer, title="Second task")
    task_set = services.task_set_create(
        owner=researcher, name="Pair", versions=[first.latest_version, second.latest_version], seed=3
    )
    job = services.export_job_create(user=researcher, task_set=task_set)
    assert (job.total, job.filename) == (2, "task-set-pair.zip")

    job = services.export_job_run(export_job_id=job.pk)
    assert (job.status, job.done, job.total, job.error) == ("done", 2, 2, "")
    assert job.finished_at is not None
    with job.file.open("rb") as handle, zipfile.ZipFile(handle) as archive:
        archive.extractall(tmp_path / "out")
    for task in (first, second):
        assert load_bundle(tmp_path / "out" / task.slug).content_hash == task.latest_version.content_hash
    assert (tmp_path / "out" / "task_set.json").exists()


def test_a_second_delivery_of_the_same_job_does_not_export_again(expert, reviewer, researcher):
    task = approved_task(expert, reviewer)
    job = services.export_job_create(user=researcher, version=task.latest_version)
    first = services.export_job_run(export_job_id=job.pk)
    again = services.export_job_run(export_job_id=job.pk)
    assert again.file.name == first.file.name
    assert services.export_job_run(export_job_id=job.pk + 1000) is None


def test_a_job_left_running_by_a_dead_worker_is_finished_by_the_redelivery(expert, reviewer, researcher):
    task = approved_task(expert, reviewer)
    job = services.export_job_create(user=researcher, version=task.latest_version)
    ExportJob.objects.filter(pk=job.pk).update(status="running", done=0)
    job = services.export_job_run(export_job_id=job.pk)
    assert (job.status, job.done, job.total) == ("done", 1, 1)
    assert job.file.name


def test_a_failing_export_keeps_the_reason(expert, reviewer, researcher, media):
    task = approved_task(expert, reviewer)
    job = services.export_job_create(user=researcher, version=task.latest_version)
    for stored in media.joinpath("blobs").rglob("*"):
        if stored.is_file():
            stored.unlink()  # the world file's bytes are gone from storage
    job = services.export_job_run(export_job_id=job.pk)
    assert job.status == "failed"
    assert job.error.startswith("FileNotFoundError")
    assert not job.file


def test_a_task_set_deleted_before_the_run_fails_with_a_message(expert, reviewer, researcher):
    task = approved_task(expert, reviewer)
    task_set = services.task_set_create(owner=researcher, name="Gone", versions=[task.latest_version], seed=1)
    job = services.export_job_create(user=researcher, task_set=task_set)
    task_set.delete()
    job = services.export_job_run(export_job_id=job.pk)
    assert (job.status, job.error) == ("failed", "what this job exported was deleted before the export ran")


def test_only_approved_versions_are_exported(expert):
    task = draft_task(expert)
    with pytest.raises(AuthoringError, match="only approved versions export; apac-growth-check v1 is draft"):
        services.export_job_create(user=expert, version=task.latest_version)
    assert not ExportJob.objects.exists()


def test_someone_who_cannot_see_the_task_or_the_set_cannot_export_it(expert, reviewer, outsider, researcher):
    task = approved_task(expert, reviewer)
    task_set = services.task_set_create(owner=researcher, name="S", versions=[task.latest_version], seed=1)
    with pytest.raises(NotAllowed):
        services.export_job_create(user=outsider, version=task.latest_version)
    with pytest.raises(NotAllowed, match="only researchers, reviewers and admins export task sets"):
        services.export_job_create(user=expert, task_set=task_set)
    assert not ExportJob.objects.exists()


def _finished(job: ExportJob, *, days_ago: float) -> ExportJob:
    ExportJob.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(days=days_ago))
    job.refresh_from_db()
    return job


def test_files_older_than_the_retention_are_deleted_and_their_jobs_marked_expired(
    expert, reviewer, researcher, settings
):
    settings.EXPORT_RETENTION_DAYS = 7
    task = approved_task(expert, reviewer)
    old = services.export_job_run(
        export_job_id=services.export_job_create(user=researcher, version=task.latest_version).pk
    )
    recent = services.export_job_run(
        export_job_id=services.export_job_create(user=researcher, version=task.latest_version).pk
    )
    old_path, recent_path = Path(old.file.path), Path(recent.file.path)
    _finished(old, days_ago=8)
    _finished(recent, days_ago=6)
    failed = ExportJob.objects.create(
        owner=researcher,
        label="x",
        filename="x.zip",
        status="failed",
        error="boom",
        finished_at=old.finished_at,
    )

    assert export_jobs_expire() == 1

    old.refresh_from_db()
    recent.refresh_from_db()
    assert (old.status, old.file.name) == ("expired", "") and not old_path.exists()
    assert recent.status == "done" and recent_path.exists()
    assert ExportJob.objects.get(pk=failed.pk).status == "failed"
    assert old.is_finished
    assert export_jobs_expire() == 0  # nothing left to expire


def test_a_retention_of_zero_days_keeps_every_file(expert, reviewer, researcher, settings):
    settings.EXPORT_RETENTION_DAYS = 0
    task = approved_task(expert, reviewer)
    job = services.export_job_run(
        export_job_id=services.export_job_create(user=researcher, version=task.latest_version).pk
    )
    _finished(job, days_ago=365)
    assert export_jobs_expire() == 0
    job.refresh_from_db()
    assert job.status == "done" and Path(job.file.path).exists()
