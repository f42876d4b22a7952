"""Exports of the filtered trace list (a Celery job with progress and a download), and "make a task set".

Both take the list's filters from the query string, so the trace list links here with its own URL
parameters and what is exported is exactly what the list shows.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseGone
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from runs.models import TraceExport
from runs.permissions import is_admin
from runs.services.task_sets_from_traces import task_set_from_rollouts, task_versions_of_rollouts
from runs.services.trace_exports import (
    CONTENT_TYPES,
    TraceExportError,
    describe_filters,
    rollout_filters,
    trace_export_create,
)
from runs.views.access import _require_run_reader
from tasks_authoring.errors import AuthoringError
from tasks_authoring.models import ExportStatus
from tasks_authoring.services.export_jobs import export_expired_message
from webapp.roles import Role, require_role

EXPORTS_PAGE = 50


def _get_trace_export_for_user(request: HttpRequest, pk: int) -> TraceExport:
    """An export belongs to whoever asked for it; admins may open any. Everyone else gets 404."""
    exports = TraceExport.objects.select_related("owner")
    if not is_admin(request.user):
        exports = exports.filter(owner=request.user)
    return get_object_or_404(exports, pk=pk)


def _filename(export: TraceExport) -> str:
    return export.file.name.rsplit("/", 1)[-1] if export.file else ""


@login_required
@require_POST
def trace_export_new(request: HttpRequest) -> HttpResponse:
    """POST `format`; the filters are the query string (the trace list's own URL parameters)."""
    _require_run_reader(request)
    try:
        export = trace_export_create(
            user=request.user, format=request.POST.get("format", ""), filters=request.GET
        )
    except TraceExportError as error:
        messages.error(request, f"Not exported: {error}.")
        query = request.GET.urlencode()
        return redirect(reverse("runs:trace_list") + (f"?{query}" if query else ""))
    return redirect("runs:trace_export", pk=export.pk)


@login_required
@require_GET
def trace_export_list(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    exports = TraceExport.objects.select_related("owner")
    if not is_admin(request.user):
        exports = exports.filter(owner=request.user)
    page = Paginator(exports.order_by("-created_at", "-pk"), EXPORTS_PAGE).get_page(request.GET.get("page"))
    return render(request, "runs/exports/list.html", {"page": page, "show_owner": is_admin(request.user)})


@login_required
@require_GET
def trace_export_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The export's page; htmx polls its progress partial, and 286 stops the polling once it has finished."""
    export = _get_trace_export_for_user(request, pk)
    context = {
        "export": export,
        "percent": export.percent,
        "finished": export.is_finished,
        "retention_days": settings.EXPORT_RETENTION_DAYS,
        "filename": _filename(export),
    }
    if request.htmx:
        response = render(request, "runs/exports/detail.html#progress", context)
        return HttpResponseStopPolling(response.content) if context["finished"] else response
    return render(request, "runs/exports/detail.html", context)


@login_required
@require_GET
def trace_export_download(request: HttpRequest, pk: int) -> FileResponse:
    export = _get_trace_export_for_user(request, pk)
    if export.status == ExportStatus.EXPIRED:
        return HttpResponseGone(export_expired_message(export))
    if not export.has_file:
        raise Http404("This export has no file")
    return FileResponse(
        export.file.open("rb"),
        as_attachment=True,
        filename=_filename(export),
        content_type=CONTENT_TYPES[export.format],
    )


class MakeTaskSetForm(forms.Form):
    name = forms.CharField(max_length=200)
    eval_fraction = forms.FloatField(min_value=0, max_value=1, initial=0.2, label="Eval fraction")


@login_required
@require_http_methods(["GET", "POST"])
def trace_task_set_new(request: HttpRequest) -> HttpResponse:
    """A task set of the task versions the filtered rollouts ran (researchers; the filters in the query)."""
    require_role(request, Role.RESEARCHER)
    try:
        filters = rollout_filters(request.GET)
    except TraceExportError as error:
        messages.error(request, f"{str(error)[0].upper()}{str(error)[1:]}.")
        filters = None
    versions = task_versions_of_rollouts(user=request.user, filters=filters) if filters is not None else []
    form = MakeTaskSetForm(request.POST or None)
    if request.method == "POST" and filters is not None and form.is_valid():
        try:
            task_set = task_set_from_rollouts(
                user=request.user,
                filters=request.GET,
                name=form.cleaned_data["name"],
                eval_fraction=form.cleaned_data["eval_fraction"],
            )
        except AuthoringError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Task set {task_set.name!r} made of {len(versions)} task versions.")
            return redirect("tasks_authoring:task_set_detail", pk=task_set.pk)
    context = {
        "form": form,
        "versions": versions,
        "described": describe_filters(filters or {}),
        "query": request.GET.urlencode(),
    }
    return render(request, "runs/exports/make_task_set.html", context)
