"""Reads for the runs pages and the API. Every query starts from the runs the user may read."""

from __future__ import annotations

import time

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, F, Func, IntegerField, Max, Min, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce, Mod
from django.shortcuts import get_object_or_404

from .harness_selectors import bundle_failures
from .models import (
    ACTIVE_STATUSES,
    Rollout,
    RolloutBody,
    Run,
    RunEvent,
    RunTaskStepTally,
    RunTaskVersion,
    StepMetric,
)
from .permissions import visible_runs_q


def runs_for_user(*, user) -> QuerySet[Run]:
    visible = visible_runs_q(user)
    runs = Run.objects.select_related("task_set", "launched_by")
    return runs if visible is None else runs.filter(visible)


def run_visible_to(*, user, pk: int) -> Run:
    """The run, or 404 when it does not exist or the user may not read it (the two look the same)."""
    return get_object_or_404(runs_for_user(user=user), pk=pk)


# Reads for the REST API (runs/api.py) ------------------------------------------------------------

ROLLOUT_ORDERS = {
    "seq": ("seq",),
    "step": ("step", "seq"),
    "-step": ("-step", "-seq"),
    "reward": ("reward", "seq"),
    "-reward": ("-reward", "seq"),
}
ROLLOUT_FILTERS = ("split", "step", "outcome", "error_code", "task_version", "passed", "final", "sample")


def rollouts_for_run(*, run: Run, filters: dict | None = None, order: str = "seq"):
    """A run's rollout summaries, filtered on indexed columns only (None means "any")."""
    filters = filters or {}
    lookups = {key: filters[key] for key in ROLLOUT_FILTERS if filters.get(key) is not None}
    if "task_version" in lookups:
        lookups["task_version_id"] = lookups.pop("task_version")
    if filters.get("step_min") is not None:
        lookups["step__gte"] = filters["step_min"]
    if filters.get("step_max") is not None:
        lookups["step__lte"] = filters["step_max"]
    return Rollout.objects.filter(run=run, **lookups).order_by(*ROLLOUT_ORDERS.get(order, ("seq",)))


def rollout_of_run(*, run: Run, pk: int):
    from .models import Rollout

    return get_object_or_404(Rollout.objects.select_related("task_version__task"), run=run, pk=pk)


def rollout_body_parts(*, rollout, start: int = 0, stop: int = 20) -> dict:
    """A rollout's verdicts, answer and error detail, its number of turns and turns[start:stop] only.

    Turns are taken out of the stored list by index in the database, so a long transcript is never
    loaded whole to show a page of it.
    """
    annotations = {f"turn_{i}": KeyTransform(str(i), "turns") for i in range(start, max(start, stop))}
    row = (
        RolloutBody.objects.filter(rollout=rollout)
        .annotate(turn_count=Coalesce(_json_array_length("turns"), 0), **annotations)
        .values("verdicts", "final_answer", "output_files", "error_detail", "turn_count", *annotations)
        .first()
    )
    if row is None:  # a rollout stored without a body has nothing more to show
        return {
            "verdicts": [],
            "final_answer": None,
            "output_files": [],
            "error_detail": "",
            "turn_count": 0,
            "turns": [],
        }
    turns = [row.pop(name) for name in annotations]
    row["turns"] = [turn for turn in turns if turn is not None]
    return row


def metric_series(*, run: Run, split: str = "train", names: list[str] | None = None) -> dict:
    """{"steps": [...], "series": {name: [value per step, None where absent]}} of numeric metrics."""
    rows = list(
        StepMetric.objects.filter(run=run, split=split).order_by("step").values_list("step", "metrics")
    )
    if names is None:
        names = sorted(
            {
                key
                for _, metrics in rows
                for key, value in metrics.items()
                if isinstance(value, int | float) and not isinstance(value, bool) and key != "step"
            }
        )
    series = {name: [] for name in names}
    for _, metrics in rows:
        for name in names:
            value = metrics.get(name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            series[name].append(value if number and value == value else None)
    return {"steps": [step for step, _ in rows], "series": series}


def _json_array_length(field: str) -> Func:
    function = "JSONB_ARRAY_LENGTH" if connection.vendor == "postgresql" else "JSON_ARRAY_LENGTH"
    return Func(F(field), function=function, output_field=IntegerField())


# Reads for the dashboards (runs/views) ----------------------------------------------------------

# The run list's sorts: key → order_by; reversed keys start with "-". Missing figures sort last.
RUN_SORTS: dict[str, tuple] = {
    "created": (F("created_at").asc(),),
    "-created": (F("created_at").desc(),),
    "name": (F("name").asc(),),
    "-name": (F("name").desc(),),
    "status": (F("status").asc(),),
    "-status": (F("status").desc(),),
    "reward": (F("latest_reward").asc(nulls_last=True),),
    "-reward": (F("latest_reward").desc(nulls_last=True),),
    "pass": (F("latest_pass_at_1").asc(nulls_last=True),),
    "-pass": (F("latest_pass_at_1").desc(nulls_last=True),),
    "errors": (F("harness_error_rate").asc(nulls_last=True),),
    "-errors": (F("harness_error_rate").desc(nulls_last=True),),
}
VALID_OUTCOMES = ("graded", "agent_error")
HARNESS_ERROR = "harness_error"
# Chart series are sampled down to this many steps on the server: enough for a 400-px-wide chart.
MAX_CHART_POINTS = 250


def runs_for_list(*, user, filters: dict) -> QuerySet[Run]:
    """The run list: the user's visible runs filtered on indexed columns and sorted (figures kept by ingestion)."""
    runs = runs_for_user(user=user)
    if filters.get("status"):
        runs = runs.filter(status=filters["status"])
    if filters.get("kind"):
        runs = runs.filter(kind=filters["kind"])
    if filters.get("task_set"):
        runs = runs.filter(task_set_id=filters["task_set"])
    if filters.get("mine"):
        runs = runs.filter(launched_by=user)
    return runs.order_by(*RUN_SORTS.get(filters.get("sort") or "-created", RUN_SORTS["-created"]), "-pk")


def step_metric_rows(*, run: Run, split: str, max_points: int = MAX_CHART_POINTS) -> list[tuple[int, dict]]:
    """(step, metrics) rows of one split, every k-th step (and the last) when there are more than max_points.

    Sampling happens in SQL so a 1,000-step run sends a few hundred rows, not every metrics blob.
    """
    rows = StepMetric.objects.filter(run=run, split=split)
    bounds = rows.aggregate(count=Count("pk"), last=Max("step"))
    if not bounds["count"]:
        return []
    stride = -(-bounds["count"] // max_points)
    if stride > 1:
        rows = rows.annotate(step_mod=Mod("step", stride)).filter(Q(step_mod=0) | Q(step=bounds["last"]))
    return list(rows.order_by("step").values_list("step", "metrics"))


# What the per-task tables show ← the RunTaskStepTally column summed for it.
_TALLY_FIGURES = {
    "rollouts": "rollouts",
    "valid": "valid",
    "passed_count": "passed",
    "harness_errors": "harness_errors",
    "agent_errors": "agent_errors",
}


def _tally_sums(**extra) -> dict:
    """Aggregates over tally rows, named apart from the columns they sum (Django refuses the clash)."""
    sums = {f"total_{column}": Sum(column) for column in (*_TALLY_FIGURES.values(), "reward_sum", "rewarded")}
    return sums | extra


def _with_rates(row: dict) -> dict:
    """The figures, the pass rate over valid rollouts and the mean reward over rewarded ones (a harness
    error has no reward: never averaged in as 0)."""
    for figure, column in _TALLY_FIGURES.items():
        row[figure] = row.pop(f"total_{column}") or 0
    rewarded, reward_sum = row.pop("total_rewarded"), row.pop("total_reward_sum")
    row["pass_rate"] = row["passed_count"] / row["valid"] if row["valid"] else None
    row["mean_reward"] = reward_sum / rewarded if rewarded else None
    return row


def run_task_results(*, run: Run) -> list[dict]:
    """Per (split, task) over the run's final rollouts: counts, pass rate, valid mean reward, trend.

    One grouped query over the run's tallies (runs/services/tallies.py), not its rollouts. The trend
    is the valid mean reward over the last quarter of the steps minus that over the first quarter
    (training runs only).
    """
    last_step = run.steps_done or run.steps_total
    quarter = max(1, last_step // 4)
    extra = {"version_id": Max("task_version_id")}
    if run.kind == "train" and last_step >= 2:
        early = Q(step__lte=quarter, split="train")
        late = Q(step__gt=last_step - quarter, split="train")
        extra |= {
            "early_sum": Sum("reward_sum", filter=early),
            "early_count": Sum("rewarded", filter=early),
            "late_sum": Sum("reward_sum", filter=late),
            "late_count": Sum("rewarded", filter=late),
        }
    rows = list(
        RunTaskStepTally.objects.filter(run=run)
        .values("split", "task_name")
        .annotate(**_tally_sums(**extra))
        .order_by("split", "task_name")
    )
    for row in rows:
        _with_rates(row)
        early = _mean(row.pop("early_sum", None), row.pop("early_count", None))
        late = _mean(row.pop("late_sum", None), row.pop("late_count", None))
        row["trend"] = late - early if early is not None and late is not None else None
    return rows


def _mean(total: float | None, count: int | None) -> float | None:
    return total / count if count else None


def run_task_results_recent(*, run: Run, max_age: float) -> tuple[list[dict], float]:
    """run_task_results, computed again only when the run's rollouts changed and the last result is
    older than `max_age` seconds (ended runs: only when they changed). Returns (rows, computed at).

    A live run's page polls every 3 s and needs its per-task table less often; the grouped sum over
    the tallies is the costliest query of the partial (≈ 10 ms for a 1,000-step run, bench/run_page.py).
    """
    key = f"runs:task-results:{run.uuid}"
    stamp = (run.status, run.rollouts_done, run.last_seq)
    cached = cache.get(key)
    now = time.time()
    if cached is not None and (cached[0] == stamp or now - cached[1] < max_age):
        return cached[2], cached[1]
    rows = run_task_results(run=run)
    cache.set(key, (stamp, now, rows), timeout=3600)
    return rows, now


def run_harness_errors(*, run: Run, buckets: int = 60, examples: int = 3) -> dict:
    """Harness errors by code (every attempt counts: each is evidence), over steps, with example rollouts."""
    errors = Rollout.objects.filter(run=run, outcome=HARNESS_ERROR)
    codes = list(
        errors.values("error_code")
        .annotate(
            count=Count("pk"),
            final_count=Count("pk", filter=Q(final=True)),
            first=Min("step"),
            last=Max("step"),
        )
        .order_by("-count", "error_code")
    )
    last_step = max([code["last"] for code in codes] + [run.steps_done], default=0)
    width = max(1, -(-(last_step + 1) // buckets))
    over_steps = (
        errors.annotate(bucket=F("step") / width)
        .values("error_code", "bucket")
        .annotate(count=Count("pk"))
        .order_by("bucket")
    )
    for code in codes:
        code["examples"] = list(
            errors.filter(error_code=code["error_code"])
            .order_by("-seq")
            .values("pk", "step", "task_name", "sample", "attempt", "message")[:examples]
        )
    return {
        "codes": codes,
        "over_steps": list(over_steps),
        "bucket_width": width,
        "last_bucket": last_step // width,
        "bundle_failures": bundle_failures(run=run),
    }


def run_log_events(*, run: Run, limit: int = 50) -> list[dict]:
    rows = (
        RunEvent.objects.filter(run=run, type="log").order_by("-seq").values("seq", "emitted_at", "payload")
    )
    return list(rows[:limit])[::-1]


def runs_task_results(*, runs: list[Run]) -> dict[str, dict[int, dict]]:
    """task name → run id → figures over final rollouts, for comparing runs (one grouped query)."""
    rows = (
        RunTaskStepTally.objects.filter(run__in=runs).values("run_id", "task_name").annotate(**_tally_sums())
    )
    table: dict[str, dict[int, dict]] = {}
    for row in rows:
        table.setdefault(row["task_name"], {})[row["run_id"]] = _with_rates(row)
    return table


def task_run_results(*, user, task, limit: int = 50) -> list[dict]:
    """How each run the user may read did on `task` (any of its versions), newest run first."""
    runs = list(
        runs_for_user(user=user)
        .filter(task_versions__version__task=task)
        .distinct()
        .order_by("-created_at")[:limit]
    )
    if not runs:
        return []
    figures = {
        row["run_id"]: _with_rates(row)
        for row in RunTaskStepTally.objects.filter(run__in=runs, task_version__task=task)
        .values("run_id")
        .annotate(**_tally_sums())
    }
    versions: dict[int, list[int]] = {}
    for run_id, number in RunTaskVersion.objects.filter(run__in=runs, version__task=task).values_list(
        "run_id", "version__number"
    ):
        versions.setdefault(run_id, []).append(number)
    results = []
    for run in runs:
        row = figures.get(
            run.pk,
            {
                "rollouts": 0,
                "valid": 0,
                "passed_count": 0,
                "harness_errors": 0,
                "mean_reward": None,
                "pass_rate": None,
            },
        )
        results.append({"run": run, "versions": sorted(versions.get(run.pk, [])), **row})
    return results


def runs_for_home(*, user, limit: int = 5) -> dict:
    """The home page's "your runs": what is still going, then what ended last."""
    mine = Run.objects.filter(launched_by=user).select_related("task_set")
    active = list(mine.filter(status__in=ACTIVE_STATUSES).order_by("-created_at")[:limit])
    ended = list(
        mine.exclude(status__in=ACTIVE_STATUSES).order_by("-created_at")[: max(0, limit - len(active))]
    )
    return {"active": active, "ended": ended, "count": mine.count()}


HOME_COUNT_CAP = 1000
# Labels that say something is wrong with a trace; "good" is not a flag.
FLAG_LABELS = ("grader_wrong", "harness_bug", "task_ambiguous", "reward_hacking")


def flagged_traces_for_home(*, user, limit: int = 5) -> dict:
    """The home page's "flagged traces": the newest traces labelled as a problem, and how many
    harness errors in the runs the user reads nobody has labelled yet."""
    from .trace_selectors import rollouts_visible_to

    visible = rollouts_visible_to(user=user)
    flagged = visible.filter(label__in=FLAG_LABELS).select_related("run").order_by("-id")
    # Counted up to a cap: the home page must stay fast when millions of rollouts are readable.
    unlabelled = visible.filter(outcome=HARNESS_ERROR, label="").values("pk")[: HOME_COUNT_CAP + 1]
    return {
        "flagged": list(flagged[:limit]),
        "unlabelled_harness_errors": len(unlabelled),
        "count_cap": HOME_COUNT_CAP,
    }
