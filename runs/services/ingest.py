"""Ingestion of the engine's events: idempotent on (run, seq), batched, at-least-once safe.

A batch is checked event by event first (envelope, then the payload of its type; a rollout's summary with
the engine's own `RolloutSummary`), so a malformed event is rejected with its index and reason while
the valid ones are kept. The valid ones are then stored in one transaction under the run's row lock:
which seqs are already stored is read under that lock, so a batch delivered twice, or two copies
racing each other, store every event exactly once and answer exact counts. A batch costs a handful
of queries whatever its size (bulk inserts; COPY on PostgreSQL for the rollout rows and bodies,
which is what keeps up with thousands of 20-turn traces a second, bench/ingest.py).

What each event type becomes (rl_engine/events.py, evaluate.py, train.py):
- every event: a RunEvent row (a rollout's payload is not repeated there, it lives in Rollout);
- `rollout`: a Rollout summary row and its RolloutBody, counted into RunTaskStepTally; its search
  text is written by a Celery task once the batch commits (runs/services/search_index.py); `split` from the payload (train runs send
  it), otherwise the run's kind says; `final` is false for a harness error that will be retried;
- `harness_error`: carries the same record as the `rollout` just before it (kept small in
  RunEvent), or, for a bundle that failed to load, `code`, `task` and `message`;
- `step_metrics`: StepMetric (train split); `log` carrying `evaluation`: StepMetric (eval split, the
  step it ran after); `checkpoint`: Checkpoint;
- `run_started`: the run is running; `run_finished`: the run succeeded (unless it is being
  cancelled or already ended), and an evaluation run's summary is stored as eval step 0; one that
  says the health gate stopped the run (`stopped_by: "health_gate"`) makes it `failed` or `paused`
  with the gate's evidence as the reason (docs/quality.md, "Health gate").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

import orjson
from django.db import connection, transaction
from django.db.models import Avg, Case, Count, FloatField, Value, When
from django.db.models.fields import AutoFieldMixin
from django.utils import timezone
from pydantic import ValidationError

from rl_engine.events import EventType
from rl_engine.outcomes import Outcome
from rl_engine.trace import RolloutSummary, TurnRecord

from ..models import (
    Checkpoint,
    MetricSplit,
    Rollout,
    RolloutBody,
    Run,
    RunEvent,
    RunKind,
    RunStatus,
    RunTaskVersion,
    StepMetric,
)
from .search_index import rollout_search_index_enqueue
from .tallies import task_tallies_add
from .validation import validation_events_ingested

EVENT_TYPES = frozenset(get_args(EventType))
KEPT_REJECTIONS = 20  # the run page lists the latest ones; events_rejected counts them all
_MAX_SEQ = 2**63 - 1
_VALID_OUTCOMES = (Outcome.GRADED, Outcome.AGENT_ERROR)
_TURN_ROLES = get_args(TurnRecord.model_fields["role"].annotation)
# The health gate's action → the run's status (rl_engine/health_gate.py).
GATE_STATUSES = {"fail": RunStatus.FAILED, "pause": RunStatus.PAUSED}


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "rejected": self.rejected}


class _Malformed(ValueError):
    """An event that sending again cannot fix; the message is the reason the sender sees."""


@dataclass
class _Event:
    seq: int
    type: str
    payload: dict[str, Any]
    emitted_at: datetime
    summary: RolloutSummary | None = None  # a checked rollout's (also a harness_error's copy of one)


def events_ingest(*, run: Run, events: list) -> IngestResult:
    result = IngestResult()
    if not isinstance(events, list):
        result.rejected.append({"index": 0, "reason": "events must be a list of event objects"})
        _record_rejections(run, result.rejected)
        return result
    parsed: list[_Event] = []
    seen: set[int] = set()
    for index, raw in enumerate(events):
        try:
            event = _parse(raw, run_id=str(run.uuid))
        except _Malformed as error:
            result.rejected.append({"index": index, "reason": str(error)})
            continue
        if event.seq in seen:
            result.duplicates += 1
            continue
        seen.add(event.seq)
        parsed.append(event)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        stored = set(
            RunEvent.objects.filter(run=locked, seq__in=[e.seq for e in parsed]).values_list("seq", flat=True)
        )
        fresh = [event for event in parsed if event.seq not in stored]
        result.duplicates += len(parsed) - len(fresh)
        result.accepted = len(fresh)
        if fresh:
            _store(locked, fresh)
        _update_run(locked, fresh, result.rejected)
        if locked.kind == RunKind.VALIDATE and fresh:
            finished = [e.payload for e in fresh if e.type == "run_finished"]
            validation_events_ingested(run=locked, finished=finished)
    run.refresh_from_db()
    return result


def _record_rejections(run: Run, rejected: list[dict[str, Any]]) -> None:
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        _update_run(locked, [], rejected)


# Checking -----------------------------------------------------------------------------------------


def _parse(raw: Any, *, run_id: str) -> _Event:
    if not isinstance(raw, dict):
        raise _Malformed(f"an event must be a JSON object, got {type(raw).__name__}")
    missing = [key for key in ("run_id", "seq", "type", "payload", "timestamp") if key not in raw]
    if missing:
        raise _Malformed(f"missing field(s): {', '.join(missing)}")
    if str(raw["run_id"]) != run_id:
        raise _Malformed(f"run_id {raw['run_id']!r} is not this run's ({run_id})")
    seq, type_, payload, timestamp = raw["seq"], raw["type"], raw["payload"], raw["timestamp"]
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= _MAX_SEQ:
        raise _Malformed(f"seq must be a positive integer, got {seq!r}")
    if type_ not in EVENT_TYPES:
        raise _Malformed(f"unknown type {type_!r}; expected one of {', '.join(sorted(EVENT_TYPES))}")
    if not isinstance(payload, dict):
        raise _Malformed(f"payload must be a JSON object, got {type(payload).__name__}")
    if not isinstance(timestamp, int | float) or isinstance(timestamp, bool) or not math.isfinite(timestamp):
        raise _Malformed(f"timestamp must be seconds since the epoch, got {timestamp!r}")
    try:
        emitted_at = datetime.fromtimestamp(timestamp, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise _Malformed(f"timestamp {timestamp!r} is out of range") from None
    event = _Event(seq=seq, type=type_, payload=payload, emitted_at=emitted_at)
    check = _PAYLOAD_CHECKS.get(type_)
    if check is not None:
        check(event)
    return event


def _check_rollout(event: _Event) -> None:
    """The summary is checked whole by the engine's own model (its outcome rules decide what may be
    averaged); the body only for its shape, since re-validating every turn of a long trace would cost
    more than storing it and nothing is computed from the turns."""
    payload = event.payload
    split = payload.get("split")
    if split is not None and split not in MetricSplit.values:
        raise _Malformed(f"payload.split must be one of {', '.join(MetricSplit.values)}, got {split!r}")
    if not isinstance(payload.get("summary"), dict):
        raise _Malformed("payload.summary must be a JSON object (a RolloutRecord's summary)")
    try:
        summary = RolloutSummary.model_validate(payload["summary"])
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise _Malformed(f"payload.summary.{where}: {first['msg']}{more}".replace(".:", ":")) from None
    for key in ("turns", "verdicts", "output_files"):
        items = payload.get(key, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise _Malformed(f"payload.{key} must be a list of JSON objects")
    for index, turn in enumerate(payload.get("turns", [])):
        if not isinstance(turn.get("index"), int) or turn.get("role") not in _TURN_ROLES:
            raise _Malformed(
                f"payload.turns.{index} needs an integer index and a role of {', '.join(_TURN_ROLES)}"
            )
    if not isinstance(payload.get("final_answer"), str | None) or not isinstance(
        payload.get("error_detail", ""), str
    ):
        raise _Malformed("payload.final_answer and payload.error_detail must be text")
    event.summary = summary


def _check_harness_error(event: _Event) -> None:
    if "summary" in event.payload:
        _check_rollout(event)
        return
    for key in ("code", "message"):
        if not isinstance(event.payload.get(key), str):
            raise _Malformed(f"payload.{key} must be a string (a harness error names its code and message)")


def _check_step(event: _Event, *, required: bool = True) -> None:
    step = event.payload.get("step")
    if step is None and not required:
        return
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**31:
        raise _Malformed(f"payload.step must be a non-negative integer, got {step!r}")


def _check_log(event: _Event) -> None:
    if "evaluation" not in event.payload:
        return
    if not isinstance(event.payload["evaluation"], dict):
        raise _Malformed("payload.evaluation must be a JSON object of metrics")
    _check_step(event)


def _check_run_finished(event: _Event) -> None:
    if event.payload.get("stopped_by") != "health_gate":
        return
    gate = event.payload.get("health_gate")
    if not isinstance(gate, dict) or gate.get("action") not in GATE_STATUSES:
        raise _Malformed(
            "payload.health_gate must be the gate's evidence, with action one of " + ", ".join(GATE_STATUSES)
        )


def _check_checkpoint(event: _Event) -> None:
    _check_step(event)
    if not isinstance(event.payload.get("path"), str) or not event.payload["path"]:
        raise _Malformed("payload.path must name the checkpoint folder")


_PAYLOAD_CHECKS = {
    "rollout": _check_rollout,
    "harness_error": _check_harness_error,
    "step_metrics": _check_step,
    "log": _check_log,
    "checkpoint": _check_checkpoint,
    "run_finished": _check_run_finished,
}


# Storing ------------------------------------------------------------------------------------------


def _store(run: Run, events: list[_Event]) -> None:
    rows = [
        {
            "run_id": run.pk,
            "seq": e.seq,
            "type": e.type,
            "payload": _stored_payload(e),
            "emitted_at": e.emitted_at,
        }
        for e in events
    ]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            copy_rows(cursor.cursor, RunEvent, rows)
    else:
        RunEvent.objects.bulk_create([RunEvent(**row) for row in rows], batch_size=1000)
    rollouts = [e for e in events if e.type == "rollout"]
    if rollouts:
        _store_rollouts(run, rollouts)
    metrics = {}
    for e in events:
        if e.type == "step_metrics":
            metrics[(MetricSplit.TRAIN, e.payload["step"])] = e.payload
        elif e.type == "log" and "evaluation" in e.payload:
            metrics[(MetricSplit.EVAL, e.payload["step"])] = e.payload["evaluation"]
        elif e.type == "run_finished" and run.kind != RunKind.TRAIN:
            metrics[(MetricSplit.EVAL, 0)] = e.payload
    if metrics:
        # A step reported again (a resumed driver) replaces its metrics rather than failing the batch.
        StepMetric.objects.bulk_create(
            [StepMetric(run=run, split=split, step=step, metrics=m) for (split, step), m in metrics.items()],
            update_conflicts=True,
            unique_fields=["run", "split", "step"],
            update_fields=["metrics"],
        )
    checkpoints = {e.payload["step"]: e for e in events if e.type == "checkpoint"}
    if checkpoints:
        Checkpoint.objects.bulk_create(
            [
                Checkpoint(run=run, step=step, path=e.payload["path"], created_at=e.emitted_at)
                for step, e in checkpoints.items()
            ],
            update_conflicts=True,
            unique_fields=["run", "step"],
            update_fields=["path", "created_at"],
        )


def _stored_payload(event: _Event) -> dict[str, Any]:
    if event.type == "rollout":
        return {}
    if event.summary is not None:  # a harness_error repeating its rollout: keep what the error panel shows
        summary = event.summary
        return {
            "code": summary.code,
            "task": summary.task_name,
            "message": summary.message,
            "step": summary.step,
            "sample": summary.sample,
            "attempt": summary.attempt,
            "split": event.payload.get("split"),
        }
    return event.payload


def _store_rollouts(run: Run, events: list[_Event]) -> None:
    max_attempts = int((run.spec or {}).get("max_attempts") or 1)
    versions = _version_map(run)
    default_split = MetricSplit.TRAIN if run.kind == RunKind.TRAIN else MetricSplit.EVAL
    now = timezone.now()
    rows = []
    for e in events:
        s = e.summary
        rows.append(
            {
                "run_id": run.pk,
                "seq": e.seq,
                "split": e.payload.get("split") or default_split,
                "step": s.step,
                "task_version_id": versions.get((s.task_name, s.task_hash)) or versions.get(s.task_hash),
                "task_name": s.task_name[:200],
                "task_hash": s.task_hash[:64],
                "sample": s.sample,
                "attempt": s.attempt,
                "final": not (s.outcome == Outcome.HARNESS_ERROR and s.attempt < max_attempts),
                "outcome": str(s.outcome),
                "error_code": s.code or "",
                "message": s.message,
                "reward": s.reward,
                "passed": s.passed,
                "score": s.score,
                "turns": s.turns,
                "tokens": s.tokens,
                "duration_sec": float(sum(s.timings.values())),
                "timings": s.timings,
                "policy": s.policy[:200],
                "created_at": now,
            }
        )
    task_tallies_add(run_id=run.pk, rollouts=rows)
    if connection.vendor == "postgresql":
        _copy_rollouts(rows, events)
    else:
        summaries = Rollout.objects.bulk_create([Rollout(**row) for row in rows], batch_size=500)
        RolloutBody.objects.bulk_create(
            [
                RolloutBody(rollout_id=row.pk, **_body(e.payload))
                for row, e in zip(summaries, events, strict=True)
            ],
            batch_size=500,
        )
        for row, summary in zip(rows, summaries, strict=True):
            row["id"] = summary.pk
    rollout_search_index_enqueue([row["id"] for row in rows])


def _body(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "turns": payload.get("turns") or [],
        "verdicts": payload.get("verdicts") or [],
        "final_answer": payload.get("final_answer"),
        "output_files": payload.get("output_files") or [],
        "error_detail": payload.get("error_detail") or "",
    }


def _copy_rollouts(rows: list[dict[str, Any]], events: list[_Event]) -> None:
    """COPY the summaries and bodies: the bodies are most of the bytes, and COPY streams them in one go.

    The summary ids come from the table's own sequence, reserved in one query, so the bodies can
    point at them without a round trip per row.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [Rollout._meta.db_table, len(rows)],
        )
        for row, (row_id,) in zip(rows, cursor.fetchall(), strict=True):
            row["id"] = row_id
        bodies = [{"rollout_id": row["id"], **_body(e.payload)} for row, e in zip(rows, events, strict=True)]
        copy_rows(cursor.cursor, Rollout, rows)  # psycopg 3's own cursor: Django's has no copy()
        copy_rows(cursor.cursor, RolloutBody, bodies)


def copy_rows(cursor, model, rows: list[dict[str, Any]]) -> None:
    """COPY `rows` ({attname: value}) into the model's table; JSON goes as text, dumped here."""
    if not rows:
        return
    statement, layout = copy_layout(model, named=set(rows[0]))
    with cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(
                [
                    default if name is None else _pg_json(row[name]) if is_json else _pg_text(row[name])
                    for name, is_json, default in layout
                ]
            )


# PostgreSQL's text and jsonb cannot hold NUL. A tool that read a binary file can put one in a trace,
# and refusing the batch would block the run's ingestion for good (the engine resends it forever),
# so NUL is stored as U+FFFD, the replacement character.
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _pg_text(value: Any) -> Any:
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def _pg_json(value: Any) -> str:
    text = _dumps(value)
    return _JSON_NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def _dumps(value: Any) -> str:
    """orjson, several times faster on a 20-turn trace; the standard library for what orjson refuses,
    an integer wider than 64 bits. A NaN or infinity inside a trace (a tool's output, say) becomes
    null, which jsonb can hold; the summary's numbers are checked finite before this (RolloutSummary)."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value)


def copy_layout(model, *, named: set[str]) -> tuple[str, list[tuple[str | None, bool, Any]]]:
    """The COPY statement over every column, and per column (attname or None, is JSON, default).

    Every column is written: one the rows do not name gets the model's default (Django's defaults
    are not database defaults), so a field added to the model later cannot break ingestion."""
    # An auto primary key the rows do not name is left to the table's own identity sequence.
    fields = [
        f for f in model._meta.concrete_fields if f.attname in named or not isinstance(f, AutoFieldMixin)
    ]
    blank = model()
    layout = [
        (f.attname, f.get_internal_type() == "JSONField", None)
        if f.attname in named
        else (None, False, f.get_db_prep_save(f.pre_save(blank, add=True), connection))
        for f in fields
    ]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    return f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN", layout


def _version_map(run: Run) -> dict[Any, int]:
    """(bundle name, hash) and hash alone → TaskVersion id: the engine reports both for each rollout."""
    mapping: dict[Any, int] = {}
    for name, content_hash, version_id in RunTaskVersion.objects.filter(run=run).values_list(
        "bundle_name", "content_hash", "version_id"
    ):
        mapping[(name, content_hash)] = version_id
        mapping.setdefault(content_hash, version_id)
    return mapping


# The run's figures --------------------------------------------------------------------------------


def _update_run(run: Run, events: list[_Event], rejected: list[dict[str, Any]]) -> None:
    now = timezone.now()
    fields = set()
    if rejected:
        run.events_rejected += len(rejected)
        stamp = now.isoformat(timespec="seconds")
        run.ingest_rejections = (list(run.ingest_rejections or []) + [{**r, "at": stamp} for r in rejected])[
            -KEPT_REJECTIONS:
        ]
        fields |= {"events_rejected", "ingest_rejections"}
    if events:
        _apply_events(run, events, now)
        fields |= {
            "status",
            "status_reason",
            "started_at",
            "finished_at",
            "last_event_at",
            "last_seq",
            "events_received",
            "steps_done",
            "rollouts_done",
            "harness_errors",
            "harness_error_rate",
            "latest_reward",
            "latest_pass_at_1",
        }
    if fields:
        run.save(update_fields=sorted(fields))


def _apply_events(run: Run, events: list[_Event], now: datetime) -> None:
    if run.status in (RunStatus.QUEUED, RunStatus.STARTING):
        run.status = RunStatus.RUNNING
    if run.started_at is None:
        started = [e.emitted_at for e in events if e.type == "run_started"]
        run.started_at = min(started or [e.emitted_at for e in events])
    run.last_event_at = now
    run.last_seq = max(run.last_seq, *(e.seq for e in events))
    run.events_received += len(events)
    finals = [
        e.summary
        for e in events
        if e.type == "rollout"
        and not (e.summary.outcome == Outcome.HARNESS_ERROR and _retried(run, e.summary.attempt))
    ]
    run.rollouts_done += len(finals)
    run.harness_errors += sum(s.outcome == Outcome.HARNESS_ERROR for s in finals)
    if run.rollouts_done:
        run.harness_error_rate = run.harness_errors / run.rollouts_done
    latest_step = None
    for e in events:
        if e.type == "step_metrics" and e.payload["step"] >= run.steps_done:
            latest_step = (
                e if latest_step is None or e.payload["step"] > latest_step.payload["step"] else latest_step
            )
    if latest_step is not None:
        run.steps_done = latest_step.payload["step"]
        run.latest_reward = _number(latest_step.payload.get("reward_mean"))
        run.latest_pass_at_1 = _number(latest_step.payload.get("pass_at_1"))
    if finals and run.kind != RunKind.TRAIN:
        run.latest_reward, run.latest_pass_at_1 = _valid_means(run)
    finished = [e for e in events if e.type == "run_finished"]
    if finished:
        _finish(run, finished[-1])


def _finish(run: Run, event: _Event) -> None:
    ended = (RunStatus.CANCELLING, RunStatus.CANCELLED)
    if event.payload.get("stopped_by") == "health_gate":
        # The gate's own account replaces a reconciler's "exit code 3": it names the evidence.
        if run.status not in (*ended, RunStatus.SUCCEEDED):
            gate = event.payload["health_gate"]
            run.status = GATE_STATUSES[gate["action"]]
            run.status_reason = str(gate.get("message") or "the health gate stopped the run")
            run.finished_at = event.emitted_at
        return
    if run.status not in (*ended, RunStatus.FAILED, RunStatus.PAUSED):
        run.status = RunStatus.SUCCEEDED
        run.finished_at = run.finished_at or event.emitted_at


def _retried(run: Run, attempt: int) -> bool:
    return attempt < int((run.spec or {}).get("max_attempts") or 1)


def _valid_means(run: Run) -> tuple[float | None, float | None]:
    """Mean reward and Pass@1 over the valid final rollouts: a harness error is never averaged in as 0."""
    figures = Rollout.objects.filter(run=run, final=True, outcome__in=_VALID_OUTCOMES).aggregate(
        mean_reward=Avg("reward"),
        pass_at_1=Avg(
            Case(When(passed=True, then=Value(1.0)), default=Value(0.0), output_field=FloatField())
        ),
        valid=Count("pk"),
    )
    if not figures["valid"]:
        return None, None
    return figures["mean_reward"], figures["pass_at_1"]


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
