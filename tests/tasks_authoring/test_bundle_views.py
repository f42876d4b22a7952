import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tasks_authoring import services
from tasks_authoring.models import ExportJob, Task
from tests.tasks_authoring.web_helpers import approved_task

pytestmark = pytest.mark.django_db


def _download(response) -> bytes:
    return b"".join(response.streaming_content)


def _export_through_a_job(client, url: str, data: dict | None = None) -> bytes:
    """Asks for the export, runs the job as the worker would, and downloads the zip."""
    response = client.post(url, data or {})
    job = ExportJob.objects.get()
    assert response["Location"] == reverse("tasks_authoring:export_job", args=[job.pk])
    services.export_job_run(export_job_id=job.pk)
    response = client.get(reverse("tasks_authoring:export_job_download", args=[job.pk]))
    assert response["Content-Type"] == "application/zip"
    assert job.filename in response["Content-Disposition"]
    return _download(response)


def test_an_approved_version_exports_as_a_zip_and_imports_back_with_the_same_hash(client, expert, reviewer):
    task = approved_task(expert, reviewer)
    client.force_login(expert)
    archive = _export_through_a_job(
        client, reverse("tasks_authoring:version_export", args=[task.pk]), {"v": 1}
    )
    names = zipfile.ZipFile(io.BytesIO(archive)).namelist()
    assert any(name.endswith("tests/rubric.json") for name in names)

    Task.objects.filter(pk=task.pk).update(slug="original")  # so the import does not collide on the slug
    response = client.post(
        reverse("tasks_authoring:import"), {"archive": SimpleUploadedFile("export.zip", archive)}
    )
    report = response.context["report"]
    assert [line.status for line in report.lines] in (["imported"], ["unchanged"])
    assert report.lines[0].content_hash == task.latest_version.content_hash
    assert "1 imported" in response.content.decode() or "unchanged" in response.content.decode()


def test_an_invalid_zip_is_refused_with_the_reason(client, expert):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("bad-task/task.toml", "not = [valid")
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:import"), {"archive": SimpleUploadedFile("bad.zip", buffer.getvalue())}
    )
    report = response.context["report"]
    assert report.refused and report.refused[0].reason
    assert "refused" in response.content.decode()
    assert not Task.objects.exists()


def test_a_file_that_is_not_a_zip_is_refused_by_the_form(client, expert):
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:import"), {"archive": SimpleUploadedFile("x.txt", b"hi")})
    assert "x.txt is not a .zip file" in response.content.decode()


def test_a_task_set_exports_as_one_zip(client, expert, reviewer, researcher):
    task = approved_task(expert, reviewer)
    task_set = services.task_set_create(owner=researcher, name="S", versions=[task.latest_version], seed=1)
    client.force_login(researcher)
    archive = _export_through_a_job(client, reverse("tasks_authoring:task_set_export", args=[task_set.pk]))
    assert "task_set.json" in zipfile.ZipFile(io.BytesIO(archive)).namelist()
