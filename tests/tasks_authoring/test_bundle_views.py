import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tasks_authoring import services
from tasks_authoring.models import Task
from tests.tasks_authoring.web_helpers import approved_task

pytestmark = pytest.mark.django_db


def _download(response) -> bytes:
    return b"".join(response.streaming_content)


def test_an_approved_version_exports_as_a_zip_and_imports_back_with_the_same_hash(client, expert, reviewer):
    task = approved_task(expert, reviewer)
    client.force_login(expert)
    response = client.get(reverse("tasks_authoring:version_export", args=[task.pk]))
    assert response["Content-Type"] == "application/zip"
    assert f"{task.slug}-v1.zip" in response["Content-Disposition"]
    archive = _download(response)
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
    response = client.get(reverse("tasks_authoring:task_set_export", args=[task_set.pk]))
    assert zipfile.ZipFile(io.BytesIO(_download(response))).namelist()
