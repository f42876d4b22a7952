"""Export an approved version or a task set as a zip of Harbor task folders; import such a zip."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from tasks_authoring import services
from tasks_authoring.forms import ImportForm
from tasks_authoring.models import VersionState
from tasks_authoring.views.access import _get_task_for_user, _get_task_set_for_user, _get_version
from tasks_authoring.views.tasks import _version_number
from webapp.roles import Role, require_role


def _zip_response(zip_path: Path | str, filename: str) -> FileResponse:
    return FileResponse(
        open(zip_path, "rb"), as_attachment=True, filename=filename, content_type="application/zip"
    )


@login_required
@require_GET
def version_export(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, _version_number(request))
    if version.state != VersionState.APPROVED:
        raise PermissionDenied("Only approved versions export")
    zip_path = services.bundle_export(versions=[version])
    return _zip_response(zip_path, f"{task.slug}-v{version.number}.zip")


@login_required
@require_GET
def task_set_export(request: HttpRequest, pk: int) -> HttpResponse:
    task_set = _get_task_set_for_user(request, pk)
    zip_path = services.task_set_export(task_set=task_set)
    return _zip_response(zip_path, f"task-set-{task_set.pk}.zip")


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
