"""Compare 2–8 runs: overlaid curves, a pinned baseline, a per-task diff and the spec fields that differ."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs import selectors
from runs.forms import CompareForm, default_spec, merge
from runs.models import Run
from runs.views import charts
from runs.views.access import _get_run_for_user, _require_run_reader

MIN_RUNS, MAX_RUNS = 2, 8
# A per-task change smaller than this (in pass rate, or mean reward without a pass rate) is "same".
CHANGE_THRESHOLD = 0.005
COMPARED_CURVES = [
    ("reward", "Valid mean reward", "", "train", "reward_mean"),
    ("pass", "Pass@1", "%", "train", "pass_at_1"),
    ("harness", "Harness error rate", "%", "train", "harness_error_rate"),
    ("loss", "Policy loss", "", "train", "policy_loss"),
    ("eval_pass", "Eval: Pass@1", "%", "eval", "eval_pass_at_1"),
    ("eval_reward", "Eval: valid mean reward", "", "eval", "eval_reward_mean"),
]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def spec_diff(runs: list[Run]) -> list[dict[str, Any]]:
    """The spec fields whose values are not the same in every run (task folders left out)."""
    # Defaults filled in first, so a spec stored without a default field does not differ from one with it.
    specs = [merge(default_spec(run.kind), run.spec or {}) for run in runs]
    flats = [_flatten({k: v for k, v in spec.items() if k != "tasks"}) for spec in specs]
    keys = sorted({key for flat in flats for key in flat})
    missing = object()
    rows = []
    for key in keys:
        values = [flat.get(key, missing) for flat in flats]
        if any(value != values[0] for value in values[1:]):
            shown = ["(absent)" if value is missing else json.dumps(value) for value in values]
            rows.append({"key": key, "values": shown})
    return rows


def _change(base: dict | None, other: dict | None) -> tuple[str, float | None]:
    if base is None or other is None:
        return "missing", None
    metric = (
        "pass_rate" if base["pass_rate"] is not None and other["pass_rate"] is not None else "mean_reward"
    )
    if base[metric] is None or other[metric] is None:
        return "missing", None
    delta = other[metric] - base[metric]
    if delta > CHANGE_THRESHOLD:
        return "improved", delta
    if delta < -CHANGE_THRESHOLD:
        return "regressed", delta
    return "same", delta


def task_diff(runs: list[Run], baseline: Run) -> tuple[list[dict], dict[int, dict[str, int]]]:
    """Per task: each run's figures and its change against the baseline; and the counts per run."""
    table = selectors.runs_task_results(runs=runs)
    counts = {run.pk: {"improved": 0, "regressed": 0, "same": 0, "missing": 0} for run in runs}
    rows = []
    for task_name in sorted(table):
        per_run = table[task_name]
        base = per_run.get(baseline.pk)
        cells = []
        for run in runs:
            figures = per_run.get(run.pk)
            change, delta = ("baseline", None) if run.pk == baseline.pk else _change(base, figures)
            if run.pk != baseline.pk:
                counts[run.pk][change] += 1
            cells.append({"run": run, "figures": figures, "change": change, "delta": delta})
        changes = {cell["change"] for cell in cells}
        rows.append({"task_name": task_name, "cells": cells, "changes": changes})
    # Regressions first: they are what a researcher comparing runs looks for.
    rows.sort(
        key=lambda row: (
            "regressed" not in row["changes"],
            "improved" not in row["changes"],
            row["task_name"],
        )
    )
    return rows, counts


@login_required
@require_GET
def run_compare(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    ids = CompareForm.run_ids(request.GET)
    if not MIN_RUNS <= len(ids) <= MAX_RUNS:
        context = {
            "problem": f"Pick {MIN_RUNS} to {MAX_RUNS} runs to compare (you picked {len(ids)}).",
            "runs": [],
        }
        return render(request, "runs/run_compare.html", context, status=400)
    runs = [_get_run_for_user(request, pk) for pk in ids]
    form = CompareForm(request.GET)
    form.is_valid()
    baseline_id = form.cleaned_data.get("baseline") if hasattr(form, "cleaned_data") else None
    baseline = next((run for run in runs if run.pk == baseline_id), runs[0])
    per_split = {
        split: [(f"#{run.pk} {run.name}", selectors.step_metric_rows(run=run, split=split)) for run in runs]
        for split in ("train", "eval")
    }
    curves = [
        chart
        for chart_id, title, unit, split, key in COMPARED_CURVES
        if (chart := charts.overlay(chart_id, title, unit, per_split[split], key)) is not None
    ]
    rows, counts = task_diff(runs, baseline)
    show = request.GET.get("show", "")
    if show in ("improved", "regressed"):
        rows = [row for row in rows if show in row["changes"]]
    context = {
        "runs": runs,
        "baseline": baseline,
        "ids": ",".join(str(pk) for pk in ids),
        "charts": {"charts": curves},
        "task_rows": rows,
        "counts": [(run, counts[run.pk]) for run in runs],
        "show": show,
        "spec_rows": spec_diff(runs),
    }
    return render(request, "runs/run_compare.html", context)
