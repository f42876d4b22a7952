"""The run page (a live partial polled every 3 s until the run ends), cancel, driver logs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from rl_engine.metrics import pass_at_k
from runs import selectors
from runs.health_gate_selectors import run_gate_trip
from runs.models import RunKind, RunStatus
from runs.permissions import can_cancel_run
from runs.services.dispatch import run_logs_tail
from runs.services.launch import RunLaunchError
from runs.services.launch import run_cancel as run_cancel_service
from runs.views import charts
from runs.views.access import _get_rollout_for_user, _get_run_for_user
from webapp.roles import Role, has_role

# htmx stops polling on this status: the run has ended and the page will not change any more.
STOP_POLLING = 286
TASK_SORTS = ("task", "pass", "reward", "trend", "errors")
# A live run's per-task table may be this many seconds old (it is the page's costly query).
TASK_TABLE_MAX_AGE = 15


def _sorted_tasks(rows: list[dict], sort: str) -> list[dict]:
    column = sort.lstrip("-")
    key = {"task": "task_name", "pass": "pass_rate", "reward": "mean_reward", "trend": "trend"}.get(
        column, "harness_errors"
    )
    present = [row for row in rows if row[key] is not None]
    absent = [row for row in rows if row[key] is None]
    return sorted(present, key=lambda row: row[key], reverse=sort.startswith("-")) + absent


def _totals(rows: list[dict], ks: list[int]) -> dict[str, Any]:
    """Headline figures over the final rollouts: valid mean reward, Pass@1 and Pass@k, error rates."""
    rollouts = sum(row["rollouts"] for row in rows)
    valid = sum(row["valid"] for row in rows)
    reward_sum = sum(row["mean_reward"] * row["valid"] for row in rows if row["mean_reward"] is not None)
    pass_at = {}
    for k in ks:
        estimates = [pass_at_k(r["valid"], r["passed_count"], k) for r in rows if r["valid"] >= k]
        pass_at[k] = sum(estimates) / len(estimates) if estimates else None
    return {
        "rollouts": rollouts,
        "valid": valid,
        "mean_reward": reward_sum / valid if valid else None,
        "pass_at_1": sum(row["passed_count"] for row in rows) / valid if valid else None,
        "pass_at": pass_at,
        "harness_errors": sum(row["harness_errors"] for row in rows),
        "harness_error_rate": sum(row["harness_errors"] for row in rows) / rollouts if rollouts else None,
        "agent_error_rate": sum(row["agent_errors"] for row in rows) / rollouts if rollouts else None,
    }


def _live_context(request: HttpRequest, run) -> dict[str, Any]:
    spec = run.spec or {}
    batch = spec.get("batch") or {}
    ks = sorted({1, *((spec.get("evaluation") or {}).get("pass_at_k") or [1])})
    chart_list, missing = [], []
    if run.kind == RunKind.TRAIN:
        train_rows = selectors.step_metric_rows(run=run, split="train")
        if train_rows:
            per_step = int(batch.get("prompts_per_step") or 0) * int(batch.get("samples_per_prompt") or 0)
            chart_list, missing = charts.train_charts(train_rows, rollouts_per_step=per_step)
        chart_list += charts.eval_charts(selectors.step_metric_rows(run=run, split="eval"))
    task_rows, computed_at = selectors.run_task_results_recent(
        run=run, max_age=TASK_TABLE_MAX_AGE if run.is_active else 0
    )
    sort = request.GET.get("tsort", "task")
    sort = sort if sort.lstrip("-") in TASK_SORTS else "task"
    eval_rows = [row for row in task_rows if row["split"] == "eval"]
    harness = selectors.run_harness_errors(run=run)
    # Counts over steps say something only when there are steps; the panel shows it beside its table.
    harness_chart = charts.harness_over_steps(harness) if run.kind == RunKind.TRAIN else None
    return {
        "run": run,
        "grid_charts": chart_list,
        "harness_chart": harness_chart,
        "charts": {"charts": [*chart_list, *([harness_chart] if harness_chart else [])]},
        "missing_charts": missing,
        "tasks": _sorted_tasks(task_rows, sort),
        "task_sort": sort,
        "tasks_computed_at": datetime.fromtimestamp(computed_at, tz=UTC),
        "show_split": len({row["split"] for row in task_rows}) > 1,
        "totals": _totals(task_rows, ks),
        "eval_totals": _totals(eval_rows, ks) if run.kind == RunKind.TRAIN and eval_rows else None,
        "harness": harness,
        "logs": selectors.run_log_events(run=run),
        "checkpoints": list(run.checkpoints.order_by("-step")[:20]),
        "can_cancel": (run.is_active or run.status == RunStatus.PAUSED)
        and run.status != RunStatus.CANCELLING
        and can_cancel_run(request.user, run),
        "can_resume": run.status == RunStatus.PAUSED and can_cancel_run(request.user, run),
        "gate_trip": run_gate_trip(run=run),
        "poll": run.is_active,
    }


@login_required
@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    context = _live_context(request, run)
    if request.htmx and not request.htmx.boosted:
        response = render(request, "runs/run_detail.html#live", context)
        if not run.is_active:
            response.status_code = STOP_POLLING
        return response
    context.update(
        spec_pretty=json.dumps(run.spec, indent=2),
        versions=run.task_versions.select_related("version__task").order_by("split", "bundle_name"),
        can_launch=has_role(request.user, Role.RESEARCHER),
    )
    return render(request, "runs/run_detail.html", context)


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    if not can_cancel_run(request.user, run):
        raise PermissionDenied("Only the researcher who launched the run, or an admin, may cancel it")
    was_paused = run.status == RunStatus.PAUSED
    try:
        run = run_cancel_service(run=run, user=request.user)
    except RunLaunchError as error:
        messages.error(request, f"Not cancelled: {error}.")
    else:
        if run.status == RunStatus.CANCELLED:
            messages.success(
                request, "Cancelled while paused." if was_paused else "Cancelled before it started."
            )
        else:
            messages.success(request, "Cancelling: the run's Ray work is being stopped.")
    return redirect("runs:run_detail", pk=run.pk)


@login_required
@require_GET
def run_driver_logs(request: HttpRequest, pk: int) -> HttpResponse:
    """The tail of the driver's own output, asked of the dispatcher when the reader opens it."""
    run = _get_run_for_user(request, pk)
    # run_logs_tail answers "unavailable because …" itself when Ray is down or has forgotten the job.
    text = run_logs_tail(run=run)
    return render(request, "runs/run_detail.html#driver-logs", {"run": run, "driver_logs": text})


@login_required
@require_GET
def rollout_detail(request: HttpRequest, pk: int, rollout_id: int) -> HttpResponse:
    """Old links to a run's rollout open the trace viewer, filtered to the run so prev / next stay in it."""
    run, rollout = _get_rollout_for_user(request, pk, rollout_id)
    return redirect(f"{reverse('runs:trace_detail', args=[rollout.pk])}?run={run.pk}")
