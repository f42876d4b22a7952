"""Export of 100,000 rollouts from PostgreSQL: wall time, rows per second and peak memory, streamed.

Creates a throwaway database `bench_trace_export_<pid>` on the server DATABASE_URL names (migrated,
dropped at the end; the named database itself is never touched), COPYs `--rollouts` rollouts
(summary + body with `--turns` turns and tool calls, the search text the trace list matches) into
it, then runs `trace_export_run` (the Celery task's service) for JSONL and ATIF over a filter that
matches 10,000 of them and over all of them. Each export runs in a fresh child process, which reports
its resident memory before the export and its peak (ru_maxrss) after it: when the export streams,
the peak does not grow with the number of rollouts (issue 7: "streamed, not held whole").
Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/trace_export.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ROWS_PER_STEP = 1000


def _setup_django() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("bench/trace_export.py measures PostgreSQL: set DATABASE_URL=postgres://...")
    os.environ.setdefault("PRACTICUM_VAR_DIR", tempfile.mkdtemp(prefix="bench-trace-export-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _body(turns: int) -> dict:
    from rl_engine.trace import ToolCallRecord, TurnRecord

    return {
        "turns": [
            TurnRecord(
                index=t,
                role="assistant" if t % 2 else "user",
                content=f"Turn {t}: " + "the quarterly figures show growth in APAC of 12.5 percent " * 4,
                tool_calls=[
                    ToolCallRecord(
                        id=f"call-{t}",
                        name="read_spreadsheet",
                        arguments={"path": "model.xlsx", "sheet": "Q3", "range": "A1:F40"},
                        result_text="region,revenue,cost,margin\nAPAC,120,45,0.625\n" * 6,
                        duration_ms=3.2,
                    )
                ]
                if t % 2
                else [],
                prompt_tokens=800,
                completion_tokens=100,
            ).model_dump(mode="json")
            for t in range(turns)
        ],
        "verdicts": [
            {"criterion_id": "c1", "kind": "number_close", "met": True, "rationale": None, "weight": 1.0, "required": True}
        ],
        "final_answer": "APAC grew 12.5%; the target was not met.",
        "output_files": [],
        "error_detail": "",
    }  # fmt: skip


def _fill(rollouts: int, turns: int):
    """A reviewer, a run and `rollouts` graded rollouts with bodies, by COPY; returns the reviewer's id."""
    from django.contrib.auth.models import Group, User
    from django.db import connection, transaction

    from runs.models import Rollout, RolloutBody, RolloutSearchText, Run
    from runs.search_text import search_text_of
    from runs.services.ingest import copy_layout
    from tasks_authoring.models import TaskSet

    reviewer = User.objects.create_user(username="bench-reviewer")
    reviewer.groups.add(Group.objects.get(name="reviewer"))
    task_set = TaskSet.objects.create(name="bench", owner=reviewer, seed=1)
    run = Run.objects.create(name="bench", kind="eval", task_set=task_set, spec={}, launched_by=reviewer)
    body = _body(turns)
    body_json = {
        key: json.dumps(value) for key, value in body.items() if key in ("turns", "verdicts", "output_files")
    }
    search = search_text_of(turns=body["turns"], final_answer=body["final_answer"])
    stamp = datetime.now(tz=UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [Rollout._meta.db_table, rollouts],
        )
        ids = [row_id for (row_id,) in cursor.fetchall()]
    summary_names = {
        "id", "run_id", "seq", "split", "step", "task_name", "task_hash", "sample", "attempt", "final",
        "outcome", "reward", "passed", "score", "turns", "tokens", "duration_sec", "timings", "policy",
        "created_at",
    }  # fmt: skip
    summary_sql, summary_layout = copy_layout(Rollout, named=summary_names)
    body_names = {
        "rollout_id",
        "turns",
        "verdicts",
        "final_answer",
        "output_files",
        "error_detail",
    }
    body_sql, body_layout = copy_layout(RolloutBody, named=body_names)
    search_sql, _ = copy_layout(RolloutSearchText, named={"rollout_id", "text"})
    timings = json.dumps({"agent": 4.1, "grade": 0.2})
    with transaction.atomic(), connection.cursor() as cursor:
        with cursor.cursor.copy(summary_sql) as copy:
            for i, pk in enumerate(ids):
                reward = (i % 5) / 4
                row = {
                    "id": pk, "run_id": run.pk, "seq": i + 1, "split": "eval", "step": i // ROWS_PER_STEP,
                    "task_name": f"practicum/task-{i % 50}", "task_hash": f"{i % 50:064x}", "sample": i % 8,
                    "attempt": 1, "final": True, "outcome": "graded", "reward": reward, "passed": i % 5 == 4,
                    "score": reward, "turns": turns, "tokens": 900 * turns, "duration_sec": 4.3,
                    "timings": timings, "policy": "hf:bench", "created_at": stamp,
                }  # fmt: skip
                copy.write_row(
                    [default if name is None else row[name] for name, _, default in summary_layout]
                )
        with cursor.cursor.copy(body_sql) as copy:
            for pk in ids:
                row = {**body, **body_json, "rollout_id": pk}
                copy.write_row([default if name is None else row[name] for name, _, default in body_layout])
        with cursor.cursor.copy(search_sql) as copy:
            for pk in ids:
                copy.write_row([pk, search])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_rollout; ANALYZE runs_rolloutbody")
    return reviewer.pk


def _child(owner: int, format: str, filters: dict) -> None:
    """One export in this fresh process: prints its figures as JSON."""
    _setup_django()
    from runs.models import TraceExport
    from runs.services.trace_exports import trace_export_run

    export = TraceExport.objects.create(owner_id=owner, format=format, filters=filters, label="bench")
    before = _rss_mib()
    began = time.perf_counter()
    export = trace_export_run(export=export)
    seconds = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert export.status == "done", export.error
    size = export.file.size
    export.file.delete(save=False)
    print(
        json.dumps(
            {"rows": export.done, "seconds": seconds, "rss_before": before, "peak": peak, "bytes": size}
        )
    )


def _measure(database_url: str, owner: int, format: str, filters: dict) -> dict:
    env = dict(os.environ, DATABASE_URL=database_url)
    argv = [sys.executable, __file__, "--child", json.dumps([owner, format, filters])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"the {format} export failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000, help="rollouts matched by the small filter")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*json.loads(args.child))
        return
    _setup_django()
    from django.db import connection

    original = connection.settings_dict["NAME"]
    name = f"bench_trace_export_{os.getpid()}"
    connection.settings_dict.setdefault("TEST", {})["NAME"] = name
    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        began = time.perf_counter()
        owner = _fill(args.rollouts, args.turns)
        print(f"database          PostgreSQL {connection.pg_version // 10000} (throwaway {test_db})")
        print(
            f"rollouts          {args.rollouts:,} × {args.turns} turns, COPY'd in {time.perf_counter() - began:.1f} s"
        )
        url = urlsplit(os.environ["DATABASE_URL"])
        database_url = urlunsplit(url._replace(path=f"/{test_db}"))
        small = {"step_max": args.small // ROWS_PER_STEP - 1}
        print(
            f"\n{'format':<7} {'rollouts':>9} {'wall s':>8} {'rows/s':>8} {'file MiB':>9} {'RSS before':>11} {'peak RSS':>9}"
        )
        for format in ("jsonl", "atif"):
            for filters in (small, {}):
                figures = _measure(database_url, owner, format, filters)
                print(
                    f"{format:<7} {figures['rows']:>9,} {figures['seconds']:>8.1f} "
                    f"{figures['rows'] / figures['seconds']:>8,.0f} {figures['bytes'] / 2**20:>9.1f} "
                    f"{figures['rss_before']:>8.0f} MiB {figures['peak']:>5.0f} MiB"
                )
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)


if __name__ == "__main__":
    main()
