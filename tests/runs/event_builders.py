"""Engine events as the engine sends them (rl_engine.trace records dumped to JSON), for ingest tests."""

from __future__ import annotations

import time
from typing import Any

from rl_engine.trace import RolloutRecord, RolloutSummary, ToolCallRecord, TurnRecord

OUTCOME_FIELDS = {
    "graded": {"reward": 1.0, "score": 1.0, "passed": True},
    "failed": {"reward": 0.0, "score": 0.0, "passed": False},
    "agent_error": {"code": "TURN_BUDGET", "reward": 0.0},
    "harness_error": {"code": "SANDBOX_START", "message": "bwrap failed"},
    "cancelled": {},
}


def rollout_payload(
    task_name: str,
    task_hash: str,
    *,
    outcome: str = "graded",
    step: int = 0,
    sample: int = 0,
    attempt: int = 1,
    turns: int = 2,
    split: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A rollout event's payload: a RolloutRecord dump (+ split); outcome "failed" is graded, not passed."""
    summary = RolloutSummary(
        task_name=task_name,
        task_hash=task_hash,
        step=step,
        sample=sample,
        attempt=attempt,
        outcome="graded" if outcome == "failed" else outcome,
        turns=turns,
        tokens=100 * turns,
        timings={"agent": 1.5, "grade": 0.5},
        policy="oracle",
        **{**OUTCOME_FIELDS[outcome], **fields},
    )
    record = RolloutRecord(
        summary=summary,
        turns=[
            TurnRecord(
                index=i,
                role="assistant" if i % 2 else "user",
                content=f"turn {i} " + "words " * 40,
                tool_calls=[
                    ToolCallRecord(
                        id=f"c{i}", name="read_text", arguments={"path": "a.txt"}, result_text="x" * 200
                    )
                ]
                if i % 2
                else [],
            )
            for i in range(turns)
        ],
        final_answer="120" if outcome in ("graded", "failed") else None,
        error_detail="Traceback: ..." if outcome == "harness_error" else "",
    )
    payload = record.model_dump(mode="json")
    if split is not None:
        payload["split"] = split
    return payload


def event(run, seq: int, type: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "run_id": str(run.uuid),
        "seq": seq,
        "type": type,
        "payload": payload or {},
        "timestamp": time.time(),
    }


def task_of(run, split: str = "eval") -> tuple[str, str]:
    """(bundle name, content hash) of one of the run's task versions, as the engine reports them."""
    used = run.task_versions.filter(split=split).first()
    return used.bundle_name, used.content_hash
