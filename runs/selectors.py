"""Reads for the runs pages and the API. Every query starts from the runs the user may read."""

from __future__ import annotations

from django.db import connection
from django.db.models import F, Func, IntegerField, QuerySet
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404

from .models import Rollout, RolloutBody, Run, StepMetric
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
