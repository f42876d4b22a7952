"""Reads for the in-run health gate: the evidence of the latest trip, and how often a run was paused.

The engine reports a trip in its `run_finished` (`stopped_by: "health_gate"`, rl_engine/health_gate.py);
ingestion keeps that payload whole in RunEvent, so the evidence needs no table of its own.
"""

from __future__ import annotations

from typing import Any

from .models import Run, RunEvent, RunStatus
from .trace_forms import filters_query


def _gate_events(run: Run):
    return RunEvent.objects.filter(run=run, type="run_finished", payload__stopped_by="health_gate")


def run_gate_trip(*, run: Run) -> dict[str, Any] | None:
    """The evidence of the trip that made the run paused or failed, with `traces_query`: the trace
    list's filter for its harness errors. None when the gate is not why the run stands where it is
    (it was resumed after a pause and then ended otherwise)."""
    if run.status not in (RunStatus.PAUSED, RunStatus.FAILED):
        return None
    event = _gate_events(run).order_by("-seq").values("payload").first()
    if event is None or event["payload"]["health_gate"].get("message") != run.status_reason:
        return None
    gate = dict(event["payload"]["health_gate"])
    filters = {"run": run.pk, "split": "train", "outcome": "harness_error", "final": True}
    for key, name in (("first_step", "step_min"), ("last_step", "step_max")):
        if isinstance(gate.get(key), int):
            filters[name] = gate[key]
    gate["traces_query"] = filters_query(filters)
    return gate


def run_pauses(*, run: Run) -> int:
    """How many times the gate paused the run: each resume is a new Ray job, numbered by it."""
    return _gate_events(run).filter(payload__health_gate__action="pause").count()
