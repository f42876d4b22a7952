"""Ingestion of rollouts with 20-turn traces into PostgreSQL: rollouts per second, beside a COPY ceiling.

Creates a throwaway database `bench_ingest_<pid>` on the server DATABASE_URL names (migrated,
dropped at the end; the named database itself is never touched), then:

- through `events_ingest`: rollout events (RolloutRecord dumps with 20 turns and tool calls, as the
  engine sends them) in batches of `--batch`, each batch one call (checks, row lock, dedup, inserts,
  per-task tallies, run figures, the search-index task enqueued) and one commit;
- the ceiling: the same rows (RunEvent, Rollout, RolloutBody) written by raw COPY into the same
  tables, serialised beforehand, one COPY of each table per batch and one commit per batch;
- off the ingest path: the search-index task's work (runs/services/search_index.py) over the
  ingested rollouts, batch by batch, as the Celery worker does it after each commit.

Targets (issue 6): ≥ 2,000 rollouts/s and ≥ 0.5 × the ceiling. Bounded by `--rollouts` (3,000).
Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/ingest.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _setup_django() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("bench/ingest.py measures PostgreSQL: set DATABASE_URL=postgres://...")
    os.environ.setdefault("PRACTICUM_VAR_DIR", tempfile.mkdtemp(prefix="bench-ingest-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def _payload(i: int, turns: int) -> dict:
    from rl_engine.trace import RolloutRecord, RolloutSummary, ToolCallRecord, TurnRecord

    outcome = "harness_error" if i % 20 == 0 else "graded"
    fields = (
        {"code": "TOOL_TIMEOUT", "message": "read_pdf did not answer in 30 s"}
        if outcome == "harness_error"
        else {"reward": (i % 5) / 4, "score": (i % 5) / 4, "passed": i % 5 == 4}
    )
    summary = RolloutSummary(
        task_name=f"practicum/task-{i % 50}",
        task_hash=f"{i % 50:064x}",
        step=i // 400,
        sample=i % 8,
        outcome=outcome,
        turns=turns,
        tokens=900 * turns,
        timings={"sandbox_start": 0.02, "generate": 4.1, "tools": 0.3, "grade": 0.2},
        policy="hf:smollm2-135m-instruct",
        **fields,
    )
    record = RolloutRecord(
        summary=summary,
        turns=[
            TurnRecord(
                index=t,
                role="assistant" if t % 2 else "user",
                content=f"Turn {t}: " + "the quarterly figures show growth in APAC of 12.5 percent " * 6,
                tool_calls=[
                    ToolCallRecord(
                        id=f"call-{t}",
                        name="read_spreadsheet",
                        arguments={"path": "model.xlsx", "sheet": "Q3", "range": "A1:F40"},
                        result_text="region,revenue,cost,margin\nAPAC,120,45,0.625\n" * 12,
                        duration_ms=3.2,
                    )
                ]
                if t % 2
                else [],
                prompt_tokens=800,
                completion_tokens=100,
                duration_ms=210.0,
            )
            for t in range(turns)
        ],
        verdicts=[
            {
                "criterion_id": "c1",
                "kind": "number_close",
                "met": True,
                "rationale": None,
                "weight": 1.0,
                "required": True,
            },
            {
                "criterion_id": "c2",
                "kind": "llm_judge",
                "met": False,
                "rationale": "no",
                "weight": 1.0,
                "required": True,
            },
        ]
        if outcome == "graded"
        else [],
        final_answer="APAC grew 12.5%; the target was not met." if outcome == "graded" else None,
        error_detail="Traceback (most recent call last): ... TimeoutError" if outcome != "graded" else "",
    )
    return {**record.model_dump(mode="json"), "split": "train"}


def _make_run(name: str):
    from django.contrib.auth.models import User

    from runs.models import Run
    from tasks_authoring.models import TaskSet

    owner, _ = User.objects.get_or_create(username="bench")
    task_set, _ = TaskSet.objects.get_or_create(name="bench", defaults={"owner": owner, "seed": 1})
    spec = {"kind": "train", "max_attempts": 3}
    return Run.objects.create(name=name, kind="train", task_set=task_set, spec=spec, launched_by=owner)


def _events(run, payloads: list[dict], first_seq: int) -> list[dict]:
    now = time.time()
    return [
        {"run_id": str(run.uuid), "seq": first_seq + i, "type": "rollout", "payload": p, "timestamp": now}
        for i, p in enumerate(payloads)
    ]


def _through_ingest(run, payload_text: list[str], batch: int) -> Iterator[float]:
    """Seconds per batch through events_ingest."""
    from runs.services.ingest import events_ingest

    for start in range(0, len(payload_text), batch):
        # Fresh dicts per batch, as the endpoint's json.loads hands them over (parsing not timed).
        events = _events(run, [json.loads(text) for text in payload_text[start : start + batch]], start + 1)
        began = time.perf_counter()
        result = events_ingest(run=run, events=events)
        elapsed = time.perf_counter() - began
        assert result.accepted == len(events) and not result.rejected, result.rejected[:1]
        yield elapsed


def _search_index(run, batch: int) -> float:
    from runs.models import Rollout
    from runs.services.search_index import rollout_search_index

    ids = list(Rollout.objects.filter(run=run).order_by("pk").values_list("pk", flat=True))
    began = time.perf_counter()
    for start in range(0, len(ids), batch):
        assert rollout_search_index(rollout_ids=ids[start : start + batch]) == len(ids[start : start + batch])
    return time.perf_counter() - began


def _copy_ceiling(payload_text: list[str], batch: int) -> Iterator[float]:
    """Seconds per batch of the same three tables' rows, fully serialised beforehand, written by COPY:
    the database's cost alone."""
    from django.db import connection, transaction

    from runs.models import Rollout, RolloutBody, RunEvent
    from runs.services.ingest import _body, copy_layout

    run = _make_run("COPY ceiling")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [Rollout._meta.db_table, len(payload_text)],
        )
        ids = [row_id for (row_id,) in cursor.fetchall()]
    stamp = datetime.now(tz=UTC)
    rows: dict = {RunEvent: [], Rollout: [], RolloutBody: []}
    for i, text in enumerate(payload_text):
        payload = json.loads(text)
        s = payload["summary"]
        rows[RunEvent].append(
            {
                "run_id": run.pk,
                "seq": i + 1,
                "type": "rollout",
                "payload": {},
                "emitted_at": stamp,
                "received_at": stamp,
            }
        )
        rows[Rollout].append(
            {
                "id": ids[i], "run_id": run.pk, "seq": i + 1, "split": "train", "step": s["step"],
                "task_version_id": None, "task_name": s["task_name"], "task_hash": s["task_hash"],
                "sample": s["sample"], "attempt": s["attempt"], "final": True, "outcome": s["outcome"],
                "error_code": s["code"] or "", "message": s["message"], "reward": s["reward"],
                "passed": s["passed"], "score": s["score"], "turns": s["turns"], "tokens": s["tokens"],
                "duration_sec": 4.62, "timings": s["timings"], "policy": s["policy"], "created_at": stamp,
            }
        )  # fmt: skip
        rows[RolloutBody].append({"rollout_id": ids[i], **_body(payload)})
    tables = []
    for model, dicts in rows.items():
        statement, layout = copy_layout(model, named=set(dicts[0]))
        serialised = [
            [
                default if name is None else json.dumps(row[name]) if is_json else row[name]
                for name, is_json, default in layout
            ]
            for row in dicts
        ]
        tables.append((statement, serialised))
    for start in range(0, len(payload_text), batch):
        began = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            for statement, serialised in tables:
                with cursor.cursor.copy(statement) as copy:
                    for row in serialised[start : start + batch]:
                        copy.write_row(row)
        yield time.perf_counter() - began


def _measure(payload_text: list[str], batch: int) -> None:
    """Ceiling and ingestion batch by batch in turn, so both see the same machine at the same time."""
    run = _make_run("through events_ingest")
    ceiling_times, per_batch = [], []
    for ceiling_time, ingest_time in zip(
        _copy_ceiling(payload_text, batch), _through_ingest(run, payload_text, batch), strict=True
    ):
        ceiling_times.append(ceiling_time)
        per_batch.append(ingest_time)
    run.refresh_from_db()
    assert run.rollouts_done + sum(1 for t in payload_text if '"harness_error"' in t) >= len(payload_text)
    indexing = _search_index(run, batch)
    ceiling, ingest = sum(ceiling_times), sum(per_batch)
    ceiling_rate, ingest_rate = len(payload_text) / ceiling, len(payload_text) / ingest
    per_batch.sort()
    p50, p95 = per_batch[len(per_batch) // 2], per_batch[int(len(per_batch) * 0.95)]
    ratio = ingest_rate / ceiling_rate
    print(f"  COPY ceiling      {ceiling_rate:8.0f} rollouts/s")
    print(
        f"  events_ingest     {ingest_rate:8.0f} rollouts/s   (target ≥ 2,000/s: {_met(ingest_rate >= 2000)})"
    )
    print(f"  ratio to ceiling  {ratio:8.2f}            (target ≥ 0.5: {_met(ratio >= 0.5)})")
    print(f"  per batch         p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms")
    print(
        f"  search index      {len(payload_text) / indexing:8.0f} rollouts/s   (the Celery task, after each commit)"
    )


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    _setup_django()
    from django.db import connection

    original = connection.settings_dict["NAME"]
    # Its own name, so it can never clobber a test database that pytest is using at the same time.
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"bench_ingest_{os.getpid()}"
    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        payload_text = [json.dumps(_payload(i, args.turns)) for i in range(args.rollouts)]
        size = statistics.mean(len(text) for text in payload_text)
        print(f"database            PostgreSQL {connection.pg_version // 10000} (throwaway {test_db})")
        print(f"rollouts            {args.rollouts} × {args.turns} turns, {size / 1024:.1f} KiB each as JSON")
        print(f"batch               {args.batch} rollout events per events_ingest call")
        _measure(payload_text, args.batch)
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)


if __name__ == "__main__":
    main()
