"""Exports of a filtered rollout list, written by a Celery worker with progress (docs/runs.md).

A TraceExport row records who asked, the format and the list's filters as in the URL; the worker
evaluates the filters again as the owner (so it exports exactly what the owner's list shows at the
time it runs) and streams the rows to a file: summaries are read `EXPORT_CHUNK` at a time through a
database cursor and each chunk's bodies in one more query, so memory stays flat however many
rollouts match. Every line is checked by the engine's own models before it is written, so a file
we hand out always loads in `rl_engine.trace.RolloutRecord` / `rl_engine.atif.AtifTrajectory`.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from django.core.files import File
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from pydantic import ValidationError

from rl_engine.atif import to_atif
from rl_engine.trace import RolloutRecord
from tasks_authoring.models import ExportStatus
from webapp.roles import Role, has_role

from ..models import (
    Rollout,
    RolloutBody,
    Run,
    StepMetric,
    TraceExport,
    TraceExportFormat,
)

logger = logging.getLogger(__name__)

# Rows fetched per database round trip; a chunk's bodies (a few turns each) are the bulk of memory.
EXPORT_CHUNK = 500
# `done` is written every this many rows: often enough for a progress bar, rarely enough to be free.
PROGRESS_EVERY = 1000
_BODY_FIELDS = ("rollout_id", "turns", "verdicts", "final_answer", "output_files", "error_detail")
_FILE_NAMES = {
    TraceExportFormat.ROLLOUTS_JSONL: "rollouts-{pk}.jsonl",
    TraceExportFormat.ATIF: "atif-{pk}.jsonl",
    TraceExportFormat.METRICS_CSV: "metrics-{pk}.csv",
}
CONTENT_TYPES = {
    TraceExportFormat.ROLLOUTS_JSONL: "application/x-ndjson",
    TraceExportFormat.ATIF: "application/x-ndjson",
    TraceExportFormat.METRICS_CSV: "text/csv",
}


class TraceExportError(Exception):
    """Why an export cannot be asked for or written; the message is shown to the user as is."""


class TraceExportNotAllowed(TraceExportError):
    pass


def rollout_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The trace list's filters dict (`RolloutFilterForm.filters()`) of URL parameters (a QueryDict, or
    a dict where passed / final may also be booleans). Unlike the list, which drops a bad value and
    shows its error, an export refuses it: exporting more than was asked for would be worse."""
    from ..trace_forms import FILTER_KEYS, RolloutFilterForm

    if not hasattr(filters, "getlist"):
        filters = {
            key: ("yes" if value else "no") if isinstance(value, bool) else value
            for key, value in filters.items()
            if value is not None
        }
    form = RolloutFilterForm(filters)
    form.is_valid()
    problems = [f"{name}: {' '.join(errors)}" for name, errors in form.errors.items() if name in FILTER_KEYS]
    if problems:
        raise TraceExportError(f"the filters are invalid: {'; '.join(problems)}")
    return form.filters()


def filtered_rollouts(*, user, filters: dict[str, Any]) -> QuerySet[Rollout]:
    """The rollouts `user` sees in the trace list with `filters` (a `rollout_filters` dict), oldest first."""
    from ..trace_selectors import rollouts_filtered, rollouts_sorted

    return rollouts_sorted(rollouts_filtered(user=user, filters=filters), "id")


def describe_filters(filters: Mapping[str, Any]) -> str:
    if not filters:
        return "every rollout you can read"

    def word(value: Any) -> Any:
        # Only real booleans: run=1 must not read "run yes" (1 == True in a dict lookup).
        return ("yes" if value else "no") if isinstance(value, bool) else value

    return ", ".join(f"{name} {word(value)}" for name, value in filters.items())


def _enqueue(export: TraceExport) -> None:
    from ..tasks import trace_export_run as task

    export_pk = export.pk
    transaction.on_commit(lambda: task.delay(export_pk))


@transaction.atomic
def trace_export_create(*, user, format: str, filters: dict[str, Any]) -> TraceExport:
    """Queues an export of the rollouts `user` sees with `filters` (the list's URL parameters)."""
    if not has_role(user, Role.EXPERT, Role.RESEARCHER, Role.REVIEWER):
        raise TraceExportNotAllowed("only experts, researchers, reviewers and admins export traces")
    if format not in TraceExportFormat.values:
        raise TraceExportError(f"format must be one of {', '.join(TraceExportFormat.values)}, got {format!r}")
    cleaned = rollout_filters(filters)
    what = TraceExportFormat(format).label.split(" (")[0]
    export = TraceExport.objects.create(
        owner=user, format=format, filters=cleaned, label=f"{what}: {describe_filters(cleaned)}"[:300]
    )
    _enqueue(export)
    return export


def trace_export_run(*, export: TraceExport) -> TraceExport:
    """Writes the export's file, updating `done`/`total` as it goes; a failure is kept with its reason."""
    # A job still "running" is claimed again: with late acks the broker redelivers a message only
    # when the worker that held it died, and writing the file again is harmless.
    claimed = TraceExport.objects.filter(
        pk=export.pk, status__in=[ExportStatus.QUEUED, ExportStatus.RUNNING]
    ).update(status=ExportStatus.RUNNING, done=0, error="")
    export.refresh_from_db()
    if not claimed:
        return export  # already finished by an earlier delivery of the same message

    def progress(done: int, total: int) -> None:
        TraceExport.objects.filter(pk=export.pk).update(done=done, total=total)

    descriptor, temp_name = tempfile.mkstemp(prefix="practicum-trace-export-")
    os.close(descriptor)
    path = Path(temp_name)
    try:
        rows = filtered_rollouts(user=export.owner, filters=export.filters)
        with path.open("w", encoding="utf-8", newline="") as handle:
            if export.format == TraceExportFormat.METRICS_CSV:
                written = write_metrics_csv(handle, rows=rows, progress=progress)
            else:
                written = write_rollouts_jsonl(
                    handle, rows=rows, atif=export.format == TraceExportFormat.ATIF, progress=progress
                )
        name = _FILE_NAMES[export.format].format(pk=export.pk)
        with path.open("rb") as handle:
            export.file.save(name, File(handle), save=False)
    except Exception as exc:
        # Any failure must end the job, or its page would poll forever; the reason is shown as is.
        reason = str(exc)
        if not isinstance(exc, TraceExportError):
            logger.exception("trace export %s failed", export.pk)
            reason = f"{type(exc).__name__}: {exc}"
        TraceExport.objects.filter(pk=export.pk).update(
            status=ExportStatus.FAILED, error=reason, finished_at=timezone.now()
        )
    else:
        TraceExport.objects.filter(pk=export.pk).update(
            status=ExportStatus.DONE,
            file=export.file.name,
            done=written,
            total=written,
            finished_at=timezone.now(),
        )
    finally:
        path.unlink(missing_ok=True)
    export.refresh_from_db()
    return export


Progress = Callable[[int, int], None]


def _chunks(rows: QuerySet[Rollout]) -> Iterator[list[Rollout]]:
    chunk: list[Rollout] = []
    for rollout in rows.iterator(chunk_size=EXPORT_CHUNK):
        chunk.append(rollout)
        if len(chunk) == EXPORT_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _record(rollout: Rollout, body: dict[str, Any] | None) -> RolloutRecord:
    summary = {
        "task_name": rollout.task_name,
        "task_hash": rollout.task_hash,
        "step": rollout.step,
        "sample": rollout.sample,
        "attempt": rollout.attempt,
        "outcome": rollout.outcome,
        "code": rollout.error_code or None,
        "message": rollout.message,
        "reward": rollout.reward,
        "passed": rollout.passed,
        "score": rollout.score,
        "turns": rollout.turns,
        "tokens": rollout.tokens,
        "timings": rollout.timings,
        "policy": rollout.policy,
    }
    try:
        return RolloutRecord.model_validate({"summary": summary, **(body or {})})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TraceExportError(
            f"rollout {rollout.pk} (run {rollout.run_id}, seq {rollout.seq}) does not fit the trace "
            f"format at {where}: {first['msg']}; nothing was exported"
        ) from None


def write_rollouts_jsonl(handle, *, rows: QuerySet[Rollout], atif: bool, progress: Progress) -> int:
    """One line per rollout: a RolloutRecord (plus run, rollout id, split, final and label) or an ATIF
    trajectory (the same facts in its `extra`). Returns the number of lines."""
    total = rows.count()
    progress(0, total)
    run_uuids: dict[int, str] = {}
    done = 0
    for chunk in _chunks(rows):
        bodies = {
            row["rollout_id"]: row
            for row in RolloutBody.objects.filter(rollout_id__in=[r.pk for r in chunk]).values(*_BODY_FIELDS)
        }
        missing = {r.run_id for r in chunk} - run_uuids.keys()
        if missing:
            run_uuids.update(
                (pk, str(u)) for pk, u in Run.objects.filter(pk__in=missing).values_list("pk", "uuid")
            )
        for rollout in chunk:
            body = bodies.get(rollout.pk)
            if body is not None:
                body = {key: body[key] for key in _BODY_FIELDS[1:]}
            record = _record(rollout, body)
            facts = {
                "run_id": run_uuids[rollout.run_id],
                "run": rollout.run_id,
                "rollout_id": rollout.pk,
                "split": rollout.split,
                "final": rollout.final,
                "label": rollout.label or None,
            }
            if atif:
                trajectory = to_atif(record)
                trajectory["trajectory_id"] = f"{facts['run_id']}/{rollout.pk}"
                trajectory["extra"].update(facts)
                handle.write(json.dumps(trajectory, ensure_ascii=False))
            else:
                # pydantic's own JSON encoder is several times faster than model_dump + json.dumps.
                handle.write(json.dumps(facts)[:-1] + ", " + record.model_dump_json()[1:])
            handle.write("\n")
            done += 1
            if done % PROGRESS_EVERY == 0:
                progress(done, max(total, done))
    progress(done, max(total, done))
    return done


def _flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested figures (e.g. harness errors by code) become one column each: `parent.child`."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        elif not (name == "step" and not prefix):
            flat[name] = value
    return flat


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps(value)
    return value


def write_metrics_csv(handle, *, rows: QuerySet[Rollout], progress: Progress) -> int:
    """The step metrics of every run that has a rollout in `rows`: run, run_name, split, step and one
    column per metric (the union over those runs, sorted). Returns the number of data rows."""
    run_ids = rows.order_by().values("run_id").distinct()
    metrics = StepMetric.objects.filter(run_id__in=run_ids)
    total = metrics.count()
    progress(0, total)
    # A first pass reads only the keys, so the header is known without holding the rows.
    names: set[str] = set()
    for blob in metrics.values_list("metrics", flat=True).iterator(chunk_size=EXPORT_CHUNK):
        names.update(_flatten(blob))
    columns = sorted(names)
    writer = csv.writer(handle)
    writer.writerow(["run", "run_name", "split", "step", *columns])
    run_names = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "name"))
    done = 0
    ordered = metrics.order_by("run_id", "split", "step").values_list("run_id", "split", "step", "metrics")
    for run_id, split, step, blob in ordered.iterator(chunk_size=EXPORT_CHUNK):
        flat = _flatten(blob)
        writer.writerow(
            [run_id, run_names.get(run_id, ""), split, step, *(_cell(flat.get(c)) for c in columns)]
        )
        done += 1
        if done % PROGRESS_EVERY == 0:
            progress(done, max(total, done))
    progress(done, max(total, done))
    return done
