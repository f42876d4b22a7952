"""The run page's and the compare page's charts, as JSON for static/js/runs.js (uPlot).

Metric names are those of rl_engine/train.py `step()` (training steps) and `evaluate()` (the eval
split's `eval_*` metrics); a chart whose metrics the run never reported is left out and named.
"""

from __future__ import annotations

import math
from typing import Any

# (chart id, title, y-axis unit, [(metric key, series label)]); "%" charts are rates in 0..1.
TRAIN_CHARTS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("reward", "Valid mean reward", "", [("reward_mean", "reward (valid rollouts)")]),
    ("pass", "Pass@1 and mean score", "%", [("pass_at_1", "Pass@1"), ("score_mean", "mean score")]),
    ("agent_errors", "Agent error rate", "%", [("agent_error_rate", "agent errors")]),
    (
        "masked",
        "Masked groups",
        "",
        [("masked_groups", "masked groups"), ("zero_variance_groups", "zero-variance groups")],
    ),
    ("length", "Response length (tokens)", "", [("response_tokens_mean", "tokens per response")]),
    ("turns", "Turns per rollout", "", [("turns_mean", "turns")]),
    ("loss", "Policy loss", "", [("policy_loss", "policy loss")]),
    ("kl", "KL to the reference", "", [("kl", "KL")]),
    ("entropy", "Entropy", "", [("entropy", "entropy")]),
    ("clip", "Clip ratio", "%", [("clip_ratio", "clipped tokens")]),
    ("grad_norm", "Grad norm", "", [("grad_norm", "grad norm")]),
    ("lr", "Learning rate", "", [("lr", "lr")]),
    (
        "time",
        "Step time split (s)",
        "s",
        [
            ("time_generate_sec", "generate (per rollout)"),
            ("time_grade_sec", "grade (per rollout)"),
            ("time_train_sec", "train"),
            ("time_rollout_sec", "all rollouts"),
        ],
    ),
]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # Four significant digits are more than a 400-px chart shows, and keep the polled JSON small.
    return float(f"{value:.4g}") if math.isfinite(value) else None


def _chart(chart_id: str, title: str, unit: str, steps: list[int], series: list[dict]) -> dict:
    return {"id": chart_id, "title": title, "unit": unit, "x": steps, "series": series}


def _has_values(series: list[dict]) -> bool:
    return any(value is not None for item in series for value in item["values"])


def train_charts(rows: list[tuple[int, dict]], *, rollouts_per_step: int) -> tuple[list[dict], list[str]]:
    """(charts, titles of the charts without data) from the train split's (step, metrics) rows."""
    steps = [step for step, _ in rows]
    charts, missing = [], []
    for chart_id, title, unit, keys in TRAIN_CHARTS:
        series = [{"label": label, "values": [_number(m.get(key)) for _, m in rows]} for key, label in keys]
        series = [item for item in series if any(value is not None for value in item["values"])]
        if series:
            charts.append(_chart(chart_id, title, unit, steps, series))
        else:
            missing.append(title)
    # Harness errors per code are counts of final rollouts per step; the rate is over the step's rollouts.
    codes = sorted({code for _, m in rows for code in (m.get("harness_errors_by_code") or {})})
    series = [{"label": "all codes", "values": [_number(m.get("harness_error_rate")) for _, m in rows]}]
    for code in codes:
        values = []
        for _, metrics in rows:
            count = (metrics.get("harness_errors_by_code") or {}).get(code, 0)
            values.append(count / rollouts_per_step if rollouts_per_step else None)
        series.append({"label": code, "values": values})
    if _has_values(series):
        charts.insert(2, _chart("harness", "Harness error rate by code", "%", steps, series))
    else:
        missing.append("Harness error rate by code")
    tools = _tool_series(rows)
    if tools:
        charts.insert(4, _chart("tools", "Tool-call success by tool", "%", steps, tools))
    else:
        missing.append("Tool-call success by tool")
    return charts, missing


def _tool_series(rows: list[tuple[int, dict]]) -> list[dict]:
    """Per-tool success rate when the metrics carry `tool_calls_by_tool` ({tool: {calls, errors}})."""
    tools = sorted({tool for _, m in rows for tool in (m.get("tool_calls_by_tool") or {})})
    series = []
    for tool in tools:
        values = []
        for _, metrics in rows:
            entry = (metrics.get("tool_calls_by_tool") or {}).get(tool) or {}
            calls = entry.get("calls") or 0
            values.append((calls - (entry.get("errors") or 0)) / calls if calls else None)
        series.append({"label": tool, "values": values})
    return series


def eval_ks(rows: list[tuple[int, dict]]) -> list[int]:
    ks = set()
    for _, metrics in rows:
        for key in metrics:
            if key.startswith("eval_pass_at_") and key.removeprefix("eval_pass_at_").isdigit():
                ks.add(int(key.removeprefix("eval_pass_at_")))
    return sorted(ks)


def eval_charts(rows: list[tuple[int, dict]]) -> list[dict]:
    """The eval split's curves over training steps: Pass@k, valid mean reward, harness error rate."""
    if len(rows) < 1:
        return []
    steps = [step for step, _ in rows]
    charts = []
    passes = [
        {"label": f"Pass@{k}", "values": [_number(m.get(f"eval_pass_at_{k}")) for _, m in rows]}
        for k in eval_ks(rows)
    ]
    if _has_values(passes):
        charts.append(_chart("eval_pass", "Eval: Pass@k", "%", steps, passes))
    for chart_id, title, unit, key in (
        ("eval_reward", "Eval: valid mean reward", "", "eval_reward_mean"),
        ("eval_harness", "Eval: harness error rate", "%", "eval_harness_error_rate"),
    ):
        series = [{"label": title.removeprefix("Eval: "), "values": [_number(m.get(key)) for _, m in rows]}]
        if _has_values(series):
            charts.append(_chart(chart_id, title, unit, steps, series))
    return charts


def harness_over_steps(panel: dict) -> dict | None:
    """The harness-error panel's chart: counts per code per bucket of steps (every attempt)."""
    rows = panel["over_steps"]
    if not rows:
        return None
    width = panel["bucket_width"]
    # Every bucket from the first step on, so a burst of errors shows where in the run it happened.
    buckets = list(range(0, max([panel["last_bucket"], *(row["bucket"] for row in rows)]) + 1))
    codes = sorted({row["error_code"] for row in rows})
    counts = {(row["error_code"], row["bucket"]): row["count"] for row in rows}
    series = [{"label": code, "values": [counts.get((code, b), 0) for b in buckets]} for code in codes]
    title = "Harness errors over steps" + (f" (per {width} steps)" if width > 1 else "")
    return {**_chart("harness_counts", title, "", [b * width for b in buckets], series), "bars": True}


def overlay(
    chart_id: str, title: str, unit: str, per_run: list[tuple[str, list[tuple[int, dict]]]], key: str
) -> dict | None:
    """One metric of several runs on a shared step axis (a run without that step has a gap)."""
    steps = sorted({step for _, rows in per_run for step, _ in rows})
    if not steps:
        return None
    series = []
    for label, rows in per_run:
        by_step = {step: _number(metrics.get(key)) for step, metrics in rows}
        series.append({"label": label, "values": [by_step.get(step) for step in steps]})
    if not _has_values(series):
        return None
    return _chart(chart_id, title, unit, steps, series)
