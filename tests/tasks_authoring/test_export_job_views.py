"""The export job page: asked for with a POST, its progress partial polled by htmx, the zip downloaded."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tasks_authoring import services
from tasks_authoring.models import ExportJob
from tests.tasks_authoring.web_helpers import approved_task, draft_task

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def _page(job) -> str:
    return reverse("tasks_authoring:export_job", args=[job.pk])


def _download(job) -> str:
    return reverse("tasks_authoring:export_job_download", args=[job.pk])


@pytest.fixture
def job(expert, reviewer, researcher):
    task = approved_task(expert, reviewer)
    return services.export_job_create(user=researcher, version=task.latest_version)


def test_exporting_from_the_task_page_queues_a_job_and_opens_its_page(
    client, expert, reviewer, django_capture_on_commit_callbacks
):
    task = approved_task(expert, reviewer)
    client.force_login(expert)
    detail = client.get(reverse("tasks_authoring:task_detail", args=[task.pk])).content.decode()
    assert 'action="{}"'.format(reverse("tasks_authoring:version_export", args=[task.pk])) in detail
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(
            reverse("tasks_authoring:version_export", args=[task.pk]), {"v": "1"}, follow=True
        )
    job = ExportJob.objects.get()
    assert len(callbacks) == 1
    assert response.redirect_chain == [(_page(job), 302)]
    html = response.content.decode()
    assert "Waiting for a worker" in html
    assert 'hx-trigger="every 2s"' in html


def test_a_draft_is_not_exported_and_the_page_says_why(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:version_export", args=[task.pk]), follow=True)
    assert (
        "Not exported: only approved versions export; apac-growth-check v1 is draft."
        in response.content.decode()
    )
    assert not ExportJob.objects.exists()


def test_the_task_set_page_exports_through_a_job(client, expert, reviewer, researcher):
    task = approved_task(expert, reviewer)
    task_set = services.task_set_create(owner=researcher, name="S", versions=[task.latest_version], seed=1)
    client.force_login(researcher)
    response = client.post(reverse("tasks_authoring:task_set_export", args=[task_set.pk]))
    job = ExportJob.objects.get()
    assert response["Location"] == _page(job)
    assert (job.task_set, job.total, job.label) == (task_set, 1, "task set S")


def test_the_progress_partial_keeps_polling_while_the_job_runs(client, researcher, job):
    client.force_login(researcher)
    ExportJob.objects.filter(pk=job.pk).update(status="running", done=0, total=3)
    response = client.get(_page(job), **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="export-progress"')
    assert "Writing task folders: 0 of 3." in html
    assert 'hx-trigger="every 2s"' in html


def test_the_partial_stops_polling_with_286_and_offers_the_download_when_done(client, researcher, job):
    services.export_job_run(export_job_id=job.pk)
    client.force_login(researcher)
    response = client.get(_page(job), **HTMX)
    assert response.status_code == 286
    html = response.content.decode()
    assert "hx-trigger" not in html
    assert f'href="{_download(job)}"' in html
    assert f"Download {job.filename}" in html


def test_a_failed_job_shows_the_reason_and_stops_polling(client, researcher, job):
    ExportJob.objects.filter(pk=job.pk).update(status="failed", error="the disk is full")
    client.force_login(researcher)
    response = client.get(_page(job), **HTMX)
    assert response.status_code == 286
    assert "Reason: the disk is full" in response.content.decode()
    assert client.get(_download(job)).status_code == 404


def test_the_download_streams_the_zip(client, researcher, job):
    services.export_job_run(export_job_id=job.pk)
    client.force_login(researcher)
    response = client.get(_download(job))
    assert response.status_code == 200
    assert response.streaming
    assert b"".join(response.streaming_content)[:2] == b"PK"
    assert 'attachment; filename="apac-growth-check-v1.zip"' == response["Content-Disposition"]


def test_an_unfinished_job_has_nothing_to_download(client, researcher, job):
    client.force_login(researcher)
    assert client.get(_download(job)).status_code == 404


def test_only_the_owner_and_admins_open_a_job(client, job, expert, reviewer, admin_user, make_user):
    services.export_job_run(export_job_id=job.pk)
    other_researcher = make_user("rob_researcher", "researcher")
    for stranger in (expert, reviewer, other_researcher):
        client.force_login(stranger)
        assert client.get(_page(job)).status_code == 404
        assert client.get(_download(job)).status_code == 404
    client.force_login(admin_user)
    assert client.get(_page(job)).status_code == 200
    assert client.get(_download(job)).status_code == 200


def test_an_expired_export_says_so_stops_polling_and_its_download_is_gone(client, job, researcher, settings):
    settings.EXPORT_RETENTION_DAYS = 7
    ExportJob.objects.filter(pk=job.pk).update(status="expired", finished_at="2026-11-01T10:00:00Z")
    client.force_login(researcher)

    page = client.get(_page(job)).content.decode()
    assert "The file was deleted: exports are kept 7 days" in page and "every 2s" not in page
    assert client.get(_page(job), **HTMX).status_code == 286
    response = client.get(_download(job))
    assert response.status_code == 410
    assert b"was deleted: files are kept 7 days (EXPORT_RETENTION_DAYS)" in response.content
