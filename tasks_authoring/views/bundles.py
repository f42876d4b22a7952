"""Export an approved version or a task set (a Celery job with progress and a download); import a zip."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseGone
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from tasks_authoring import services
from tasks_authoring.errors import AuthoringError
from tasks_authoring.forms import ImportForm
from tasks_authoring.models import ExportStatus
from tasks_authoring.services.export_jobs import export_expired_message
from tasks_authoring.views.access import (
    _get_export_job_for_user,
    _get_task_for_user,
    _get_task_set_for_user,
    _get_version,
)
from webapp.roles import Role, require_role


def _version_from_post(request: HttpRequest) -> int | None:
    raw = request.POST.get("v", "")
    return int(raw) if raw.isdigit() else None


@login_required
@require_POST
def version_export(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, _version_from_post(request))
    try:
        job = services.export_job_create(user=request.user, version=version)
    except AuthoringError as error:
        messages.error(request, f"Not exported: {error}.")
        return redirect(f"{reverse('tasks_authoring:task_detail', args=[task.pk])}?v={version.number}")
    return redirect("tasks_authoring:export_job", pk=job.pk)


@login_required
@require_POST
def task_set_export(request: HttpRequest, pk: int) -> HttpResponse:
    task_set = _get_task_set_for_user(request, pk)
    try:
        job = services.export_job_create(user=request.user, task_set=task_set)
    except AuthoringError as error:
        messages.error(request, f"Not exported: {error}.")
        return redirect("tasks_authoring:task_set_detail", pk=task_set.pk)
    return redirect("tasks_authoring:export_job", pk=job.pk)


@login_required
@require_GET
def export_job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The job's page; htmx polls its progress partial, and 286 stops the polling once it has finished."""
    job = _get_export_job_for_user(request, pk)
    context = {"job": job, "retention_days": settings.EXPORT_RETENTION_DAYS}
    if request.htmx:
        response = render(request, "tasks_authoring/export_job.html#progress", context)
        return HttpResponseStopPolling(response.content) if job.is_finished else response
    return render(request, "tasks_authoring/export_job.html", context)


@login_required
@require_GET
def export_job_download(request: HttpRequest, pk: int) -> FileResponse:
    job = _get_export_job_for_user(request, pk)
    if job.status == ExportStatus.EXPIRED:
        return HttpResponseGone(export_expired_message(job))
    if not job.has_file:
        raise Http404("This export has no file")
    return FileResponse(
        job.file.open("rb"), as_attachment=True, filename=job.filename, content_type="application/zip"
    )


@login_required
@require_http_methods(["GET", "POST"])
def bundle_import(request: HttpRequest) -> HttpResponse:
    require_role(request, Role.EXPERT)
    form = ImportForm(request.POST or None, request.FILES or None)
    report = None
    if request.method == "POST" and form.is_valid():
        archive = form.cleaned_data["archive"]
        with tempfile.TemporaryDirectory(prefix="practicum-import-") as folder:
            zip_path = Path(folder) / "upload.zip"
            with open(zip_path, "wb") as out:
                for chunk in archive.chunks():
                    out.write(chunk)
            report = services.bundle_import(user=request.user, zip_path=zip_path)
    return render(request, "tasks_authoring/import.html", {"form": form, "report": report})
