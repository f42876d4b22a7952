"""Quality pages (docs/quality.md): the index, grader health (judge agreement), signal per task set
and run, the run page's Signal panel and its actions, and a reviewer's verdict on a criterion."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from runs import quality_selectors
from runs.permissions import can_launch_runs
from runs.quality_forms import CriterionReviewForm, SignalFilterForm, ZeroSignalTaskSetForm
from runs.services.labels import can_label_rollout
from runs.services.quality import (
    criterion_review_set,
    task_difficulty_set_from_run,
    task_set_without_zero_signal,
)
from runs.templatetags.quality import criterion_review_context
from runs.views.access import _get_run_for_user, _require_run_reader
from runs.views.traces import _get_trace_for_user
from tasks_authoring.errors import AuthoringError
from tasks_authoring.selectors import task_set_members, task_sets_for


def _errors(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(error.messages)
    return str(error)


@login_required
@require_GET
def quality_index(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    return render(request, "runs/quality/index.html", {})


@login_required
@require_GET
def grader_health(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    form = SignalFilterForm(request.GET)
    _, run_id = form.ids()
    run = _get_run_for_user(request, run_id) if run_id else None
    context = {"run": run, **quality_selectors.grader_health(user=request.user, run=run)}
    return render(request, "runs/quality/grader_health.html", context)


def _run_signal_context(request: HttpRequest, run) -> dict[str, Any]:
    rows = quality_selectors.run_task_signal(run=run, user=request.user)
    return {
        "run": run,
        "signal_rows": rows,
        "zero_rows": [row for row in rows if row["zero_signal"]],
        "summary": quality_selectors.signal_summary(rows),
        "measures": run.kind in quality_selectors.SIGNAL_RUN_KINDS,
        "can_act": can_launch_runs(request.user) and run.kind in quality_selectors.SIGNAL_RUN_KINDS,
        "default_name": f"{run.task_set.name} without zero-signal (run #{run.pk})" if run.task_set else "",
    }


def _sets_overview(user) -> list[dict[str, Any]]:
    """The newest task sets, each with its latest eval or training run and that run's counts."""
    sets = list(task_sets_for(user=user).order_by("-created_at")[: quality_selectors.MAX_SET_RUNS])
    latest: dict[int, Any] = {}
    for run in quality_selectors.signal_runs(user=user).filter(task_set__in=sets):
        latest.setdefault(run.task_set_id, run)
    counts = quality_selectors.runs_signal_counts(runs=list(latest.values()), user=user)
    return [
        {
            "task_set": s,
            "run": latest.get(s.pk),
            "counts": counts[latest[s.pk].pk] if s.pk in latest else None,
        }
        for s in sets
    ]


def _set_context(user, task_set) -> dict[str, Any]:
    """A task set's runs with their counts, and its members' pass rates per model over those runs."""
    runs = list(quality_selectors.signal_runs(user=user, task_set=task_set)[: quality_selectors.MAX_SET_RUNS])
    members = task_set_members(task_set=task_set).order_by("version__task__title")
    versions = [member.version for member in members]
    return {
        "runs": runs,
        "run_counts": quality_selectors.runs_signal_counts(runs=runs, user=user),
        "versions": versions,
        "models": quality_selectors.pass_rates_by_model(user=user, versions=versions, runs=runs),
    }


@login_required
@require_GET
def signal_overview(request: HttpRequest) -> HttpResponse:
    """Task sets with the zero-signal count of their latest run; for a chosen set (`task_set`) each
    run's counts and pass rates per model; for a chosen run (`run`, else the set's latest) its table."""
    _require_run_reader(request)
    task_set_id, run_id = SignalFilterForm(request.GET).ids()
    run = _get_run_for_user(request, run_id) if run_id else None
    task_set_id = task_set_id or (run.task_set_id if run else None)
    task_set = task_sets_for(user=request.user).filter(pk=task_set_id).first() if task_set_id else None
    if task_set_id and task_set is None and run is None:
        raise Http404("No such task set")
    context: dict[str, Any] = {"task_set": task_set, "run": run}
    if task_set is None and run is None:
        context["sets"] = _sets_overview(request.user)
        return render(request, "runs/quality/signal.html", context)
    if task_set is not None:
        context.update(_set_context(request.user, task_set))
        run = run or (context["runs"][0] if context["runs"] else None)
    if run is not None:
        context.update(_run_signal_context(request, run))
    return render(request, "runs/quality/signal.html", context)


@login_required
@require_GET
def run_signal(request: HttpRequest, pk: int) -> HttpResponse:
    """The run page's Signal panel (loaded by htmx once the page is shown)."""
    run = _get_run_for_user(request, pk)
    return render(request, "runs/quality/_run_signal.html", _run_signal_context(request, run))


@login_required
@require_POST
def run_signal_task_set(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    if not can_launch_runs(request.user):
        raise PermissionDenied("Only researchers build task sets")
    form = ZeroSignalTaskSetForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not created: the new task set needs a name.")
        return redirect("runs:run_detail", pk=run.pk)
    try:
        task_set = task_set_without_zero_signal(run=run, user=request.user, name=form.cleaned_data["name"])
    except (ValidationError, AuthoringError) as error:
        messages.error(request, f"Not created: {_errors(error)}")
        return redirect("runs:run_detail", pk=run.pk)
    messages.success(request, f"Created “{task_set.name}” with {task_set.members.count()} tasks.")
    return redirect("tasks_authoring:task_set_detail", pk=task_set.pk)


@login_required
@require_POST
def run_difficulty_reference(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    if not can_launch_runs(request.user):
        raise PermissionDenied("Only researchers set the difficulty reference")
    try:
        result = task_difficulty_set_from_run(run=run, user=request.user)
    except ValidationError as error:
        messages.error(request, f"Not used as the reference: {_errors(error)}")
    else:
        skipped = f"; {result.skipped} without a valid sample kept their band" if result.skipped else ""
        messages.success(
            request, f"Difficulty bands of {result.updated} tasks now come from this run{skipped}."
        )
    return redirect("runs:run_detail", pk=run.pk)


@login_required
@require_POST
def trace_criterion_review(request: HttpRequest, rollout_id: int, criterion_id: str) -> HttpResponse:
    rollout = _get_trace_for_user(request, rollout_id)
    if not can_label_rollout(request.user, rollout):
        raise PermissionDenied(
            "Only reviewers, or the researcher who launched the run, may review its grading"
        )
    form = CriterionReviewForm(request.POST)
    error = ""
    if form.is_valid():
        try:
            criterion_review_set(
                rollout=rollout,
                user=request.user,
                criterion_id=criterion_id,
                reviewer_met=form.cleaned_data["reviewer_met"],
                note=form.cleaned_data["note"],
            )
        except ValidationError as problem:
            error = _errors(problem)
    else:
        error = "; ".join(str(e) for errors in form.errors.values() for e in errors)
    if request.htmx:
        reviews = quality_selectors.criterion_reviews_of(rollout=rollout).get(criterion_id, [])
        context = criterion_review_context(request, rollout, criterion_id, reviews, error=error)
        return render(request, "runs/quality/_criterion_review.html", context, status=400 if error else 200)
    if error:
        messages.error(request, f"Not recorded: {error}")
    else:
        messages.success(request, f"Your verdict on {criterion_id} is recorded.")
    back = request.POST.get("q_return", "")
    return redirect(reverse("runs:trace_detail", args=[rollout.pk]) + (f"?{back}" if back else ""))
