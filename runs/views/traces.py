"""The reviewer's pages: the rollout list (filters in the URL), the trace viewer (turns loaded per page,
prev / next inside the filter), labels, and the harness-errors pages (per run and across runs)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from runs import harness_selectors, trace_selectors
from runs.models import LabelKind, Rollout, Run
from runs.services.labels import can_label_rollout, rollout_label_set
from runs.trace_forms import HarnessWindowForm, LabelForm, RolloutFilterForm, filters_query
from runs.views.access import _get_run_for_user, _require_run_reader
from tasks_authoring.models import Task, TaskVersion
from webapp.roles import Role, has_role

TURNS_PAGE = trace_selectors.TURNS_PAGE


def _get_trace_for_user(request: HttpRequest, rollout_id: int) -> Rollout:
    """The rollout, or 404 when it does not exist or is hidden from the user (another team's task)."""
    _require_run_reader(request)
    visible = trace_selectors.rollouts_visible_to(user=request.user)
    return get_object_or_404(visible.select_related("run", "task_version__task"), pk=rollout_id)


def _filter_context(form: RolloutFilterForm, filters: dict[str, Any]) -> dict[str, Any]:
    """What the active run / task / version filters point at, for the chips above the list."""
    chips = []
    if "run" in filters:
        run = Run.objects.filter(pk=filters["run"]).only("name").first()
        chips.append(("run", f"Run: {run.name if run else filters['run']}"))
    if "task" in filters:
        task = Task.objects.filter(pk=filters["task"]).only("title").first()
        chips.append(("task", f"Task: {task.title if task else filters['task']}"))
    if "version" in filters:
        version = TaskVersion.objects.filter(pk=filters["version"]).select_related("task").first()
        chips.append(("version", f"Version: {version if version else filters['version']}"))
    return {
        "chips": [
            (label, "?" + filters_query({k: v for k, v in filters.items() if k != key}, sort=form.sort_key()))
            for key, label in chips
        ],
    }


@login_required
@require_GET
def trace_list(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    form = RolloutFilterForm(request.GET)
    filters, sort = form.filters(), form.sort_key()
    direction, cursor = form.cursor()
    rollouts = trace_selectors.rollouts_filtered(user=request.user, filters=filters)
    page = trace_selectors.rollout_page(
        rollouts.select_related("run", "task_version__task"), sort=sort, direction=direction, cursor=cursor
    )
    query = filters_query(filters, sort=sort)
    context = {
        "form": form,
        "filters": filters,
        "filtered": bool(filters),
        "page": page,
        "query": query,
        "can_make_task_set": has_role(request.user, Role.RESEARCHER),
        "next_query": filters_query(filters, sort=sort, after=page.next_cursor),
        "prev_query": filters_query(filters, sort=sort, before=page.prev_cursor),
        **_filter_context(form, filters),
    }
    if request.htmx and not request.htmx.boosted:
        return render(request, "runs/traces/trace_list.html#results", context)
    return render(request, "runs/traces/trace_list.html", context)


def _turns_context(rollout: Rollout, start: int, query: str) -> dict[str, Any]:
    turns, turn_count = trace_selectors.rollout_turn_slice(
        rollout=rollout, start=start, stop=start + TURNS_PAGE
    )
    stop = start + len(turns)
    return {
        "turns": turns,
        "turn_count": turn_count,
        "start": start,
        "next_start": stop if stop < turn_count else None,
        "prev_start": max(0, start - TURNS_PAGE) if start > 0 else None,
        "query": query,
    }


def _start(request: HttpRequest) -> int:
    raw = request.GET.get("turn", "0")
    return min(int(raw), 10**6) if raw.isdigit() else 0


def _label_context(request: HttpRequest, rollout: Rollout, form: LabelForm | None = None) -> dict[str, Any]:
    return {
        "rollout": rollout,
        "label_name": LabelKind(rollout.label).label if rollout.label else "",
        "label_history": list(rollout.labels.select_related("author")[:50]),
        "can_label": can_label_rollout(request.user, rollout),
        "label_form": form or LabelForm(initial={"label": rollout.label}),
        "return_query": request.POST.get("q_return", request.GET.urlencode())
        if request.method == "POST"
        else request.GET.urlencode(),
    }


@login_required
@require_GET
def trace_detail(request: HttpRequest, rollout_id: int) -> HttpResponse:
    rollout = _get_trace_for_user(request, rollout_id)
    form = RolloutFilterForm(request.GET)
    filters, sort = form.filters(), form.sort_key()
    query = filters_query(filters, sort=sort)
    filtered = trace_selectors.rollouts_filtered(user=request.user, filters=filters)
    prev_id, next_id = trace_selectors.rollout_neighbours(filtered, sort=sort, rollout=rollout)
    meta = trace_selectors.rollout_body_meta(rollout=rollout)
    version = rollout.task_version
    context = {
        "run": rollout.run,
        "rollout": rollout,
        "filters": filters,
        "query": query,
        "prev_id": prev_id,
        "next_id": next_id,
        "body": meta,
        "rubric": trace_selectors.rollout_rubric(rollout=rollout, verdicts=meta["verdicts"]),
        "world_files": list(version.world_files.select_related("blob").order_by("path")) if version else [],
        **_turns_context(rollout, _start(request), query),
        **_label_context(request, rollout),
    }
    return render(request, "runs/traces/trace_detail.html", context)


@login_required
@require_GET
def trace_turns(request: HttpRequest, rollout_id: int) -> HttpResponse:
    """A page of turns (`?turn=N`: turns N to N+9), swapped in under the ones already shown."""
    rollout = _get_trace_for_user(request, rollout_id)
    form = RolloutFilterForm(request.GET)  # carried along so a page opened without htmx keeps the filter
    query = filters_query(form.filters(), sort=form.sort_key())
    context = {"rollout": rollout, **_turns_context(rollout, _start(request), query)}
    return render(request, "runs/traces/trace_detail.html#turns", context)


@login_required
@require_POST
def trace_label(request: HttpRequest, rollout_id: int) -> HttpResponse:
    rollout = _get_trace_for_user(request, rollout_id)
    if not can_label_rollout(request.user, rollout):
        raise PermissionDenied("Only reviewers, or the researcher who launched the run, may label its traces")
    form = LabelForm(request.POST)
    if form.is_valid():
        try:
            rollout_label_set(
                rollout=rollout,
                user=request.user,
                label=form.cleaned_data["label"],
                note=form.cleaned_data["note"],
            )
        except ValidationError as error:
            form.add_error(None, error)
    if request.htmx:
        return render(
            request,
            "runs/traces/trace_detail.html#labels",
            _label_context(request, rollout, form if form.errors else None),
        )
    if form.errors:
        messages.error(
            request, "Not labelled: " + "; ".join(str(e) for errors in form.errors.values() for e in errors)
        )
    else:
        messages.success(
            request,
            f"Labelled {LabelKind(rollout.label).label.lower()}." if rollout.label else "Label cleared.",
        )
    back = request.POST.get("q_return", "")
    return redirect(reverse("runs:trace_detail", args=[rollout.pk]) + (f"?{back}" if back else ""))


def _harness_context(errors, *, base_filters: dict[str, Any]) -> dict[str, Any]:
    overview = harness_selectors.harness_errors_overview(errors=errors)
    for code in overview["codes"]:
        code["query"] = filters_query(
            {**base_filters, "outcome": "harness_error", "error_code": code["error_code"]}
        )
    for task in overview["tasks"]:
        extra = {"version": task["task_version_id"]} if task["task_version_id"] else {}
        task["query"] = filters_query(
            {**base_filters, **extra, "outcome": "harness_error", "error_code": task["error_code"]}
        )
    for group in overview["groups"]:
        search = {"q": group["search"]} if group["search"] else {}
        group["query"] = filters_query(
            {**base_filters, "outcome": "harness_error", "error_code": group["code"], **search}
        )
    chart = overview["over_time"]
    return {
        "overview": overview,
        "chart": {"id": "harness-time", **chart} if chart else None,
        "list_query": filters_query({**base_filters, "outcome": "harness_error"}),
    }


@login_required
@require_GET
def run_harness_errors(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    errors = trace_selectors.rollouts_filtered(
        user=request.user, filters={"run": run.pk, "outcome": "harness_error"}
    )
    context = {
        "run": run,
        "window": None,
        "bundle_failures": harness_selectors.bundle_failures(run=run),
        **_harness_context(errors, base_filters={"run": run.pk}),
    }
    return render(request, "runs/traces/harness_errors.html", context)


@login_required
@require_GET
def harness_errors(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    form = HarnessWindowForm(request.GET)
    days = form.window_days()
    errors = trace_selectors.rollouts_filtered(user=request.user, filters={"outcome": "harness_error"})
    if days:
        errors = errors.filter(created_at__gte=timezone.now() - timedelta(days=days))
    context = {
        "run": None,
        "window": form,
        "days": days,
        "bundle_failures": [],
        **_harness_context(errors, base_filters={}),
    }
    return render(request, "runs/traces/harness_errors.html", context)
