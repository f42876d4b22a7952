"""Export jobs: queued after the commit, run by the worker's service with progress per task folder."""

from __future__ import annotations

import zipfile

import pytest

from rl_engine.bundle import load_bundle
from tasks_authoring import services
from tasks_authoring.errors import AuthoringError, NotAllowed
from tasks_authoring.models import ExportJob
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
