"""The trace list over 1,000,000 rollouts and a 200-turn trace in the viewer, on PostgreSQL: server times.

Creates a throwaway database `bench_traces_<pid>` on the server DATABASE_URL names (migrated, dropped
at the end; the named database itself is never touched), loads `--rollouts` summary rows and small
bodies by COPY (40 runs; 5 % harness errors, 10 % agent errors, 0.5 % labelled; a rare word in 0.01 %
of the transcripts), builds the indexes, ANALYZEs, then times the pages in-process through Django's
test client (view, queries and template; no network):

- `/traces/` with one filter set per line, `--repeat` times each (the run, cursor or word varies), p50
  and p95, with the page query's EXPLAIN reduced to the indexes it uses;
- one 200-turn trace: the viewer's first paint, then each page of ten turns loaded on its own.

Targets (issue 7): list p95 ≤ 200 ms; first paint and each per-turn load ≤ 100 ms.
Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/traces.py
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 40
TASKS = 50
CODES = ["TOOL_TIMEOUT", "SANDBOX_START", "TOOL_EXCEPTION", "JUDGE"]
LABELS = ["grader_wrong", "harness_bug", "good", "task_ambiguous", "reward_hacking"]
RARE_WORD = "zephyrine"
CHUNK = 50_000


def _setup_django() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("bench/traces.py measures PostgreSQL: set DATABASE_URL=postgres://...")
    os.environ.setdefault("PRACTICUM_VAR_DIR", tempfile.mkdtemp(prefix="bench-traces-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def _fixtures():
    from django.contrib.auth.models import Group, User

    from runs.models import Run
    from tasks_authoring.models import Domain, Task, TaskSet, TaskVersion

    reviewer = User.objects.create_user("bench_reviewer", password="x")
    reviewer.groups.add(Group.objects.get(name="reviewer"))
    researcher = User.objects.create_user("bench_researcher", password="x")
    researcher.groups.add(Group.objects.get(name="researcher"))
    domain, _ = Domain.objects.get_or_create(slug="finance", defaults={"name": "Finance"})
    versions = []
    for t in range(TASKS):
        task = Task.objects.create(slug=f"task-{t}", title=f"Task {t}", domain=domain, owner=researcher)
        versions.append(
            TaskVersion.objects.create(task=task, number=1, created_by=researcher, content_hash=f"{t:064x}")
        )
    task_set = TaskSet.objects.create(name="bench", owner=researcher, seed=1)
    runs = [
        Run.objects.create(
            name=f"run {r}",
            kind="train",
            task_set=task_set,
            spec={"kind": "train"},
            launched_by=researcher if r % 4 == 0 else reviewer,
            status="succeeded",
        )
        for r in range(RUNS)
    ]
    return reviewer, researcher, versions, runs


def _summary(i: int, run_ids: list[int], version_ids: list[int], per_run: int) -> tuple[dict, dict, dict]:
    from django.utils import timezone

    run_index = i // per_run
    within = i % per_run
    task = (run_index + within) % TASKS
    kind = i % 20
    harness = kind == 0
    agent = kind in (1, 2)
    reward = None if harness else (0.0 if agent else (i % 5) / 4)
    code = CODES[(i // 20) % len(CODES)] if harness else ("TURN_BUDGET" if agent else "")
    message = f"{code.lower()} after {i % 97} s on worker-{i % 13}" if harness else ""
    rare = RARE_WORD if i % 10_000 == 7 else ""
    row = {
        "id": i + 1,
        "run_id": run_ids[run_index],
        "seq": within + 1,
        "split": "eval" if within % 10 == 0 else "train",
        "step": within // 100,
        "task_version_id": version_ids[task],
        "task_name": f"practicum/task-{task}",
        "task_hash": f"{task:064x}",
        "sample": within % 4,
        "attempt": 1,
        "final": True,
        "outcome": "harness_error" if harness else ("agent_error" if agent else "graded"),
        "error_code": code,
        "message": message,
        "reward": reward,
        "passed": None if harness or agent else reward == 1.0,
        "score": None if harness or agent else reward,
        "turns": 2 + i % 20,
        "tokens": 900 * (2 + i % 20),
        "duration_sec": 1.0 + (i % 300) / 10,
        "timings": {"agent": 1.0},
        "policy": "hf:bench",
        "label": LABELS[(i // 200) % len(LABELS)] if i % 200 == 3 else "",
        "created_at": timezone.now(),
    }
    text = f"turn 0: read the quarterly figures of task {task} {rare}\nturn 1: growth in apac of {i % 50} percent {message}"
    body = {
        "rollout_id": i + 1,
        "turns": [{"index": 0, "role": "user", "content": "read the quarterly figures"}],
        "verdicts": [],
        "final_answer": "12.5",
        "output_files": [],
        "error_detail": "",
    }
    return row, body, {"rollout_id": i + 1, "text": text.casefold()}


def _load(count: int, run_ids: list[int], version_ids: list[int]) -> None:
    from django.db import connection, transaction

    from runs.models import Rollout, RolloutBody, RolloutSearchText
    from runs.services.ingest import copy_rows

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('runs_rollout', 'runs_rolloutbody', 'runs_rolloutsearchtext') AND indexname NOT IN (SELECT conname FROM pg_constraint)"
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:  # a bulk load builds its indexes after the rows, as pg_restore does
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
    per_run = -(-count // RUNS)
    started = time.perf_counter()
    for first in range(0, count, CHUNK):
        pairs = [_summary(i, run_ids, version_ids, per_run) for i in range(first, min(count, first + CHUNK))]
        with transaction.atomic(), connection.cursor() as cursor:
            copy_rows(cursor.cursor, Rollout, [row for row, _, _ in pairs])
            copy_rows(cursor.cursor, RolloutBody, [body for _, body, _ in pairs])
            copy_rows(cursor.cursor, RolloutSearchText, [search for _, _, search in pairs])
    loaded = time.perf_counter()
    with connection.cursor() as cursor:
        timings = []
        for name, definition in indexes:
            began = time.perf_counter()
            cursor.execute(definition)
            timings.append((name, time.perf_counter() - began))
        cursor.execute("SELECT setval(pg_get_serial_sequence('runs_rollout', 'id'), %s)", [count])
        # Autovacuum keeps a live table's visibility map set; a freshly loaded one needs this once.
        cursor.execute("VACUUM ANALYZE runs_rollout")
        cursor.execute("VACUUM ANALYZE runs_rolloutbody")
        cursor.execute("VACUUM ANALYZE runs_rolloutsearchtext")
        cursor.execute(
            "SELECT pg_size_pretty(pg_total_relation_size('runs_rollout')), pg_size_pretty(pg_total_relation_size('runs_rolloutbody'))"
        )
        sizes = cursor.fetchone()
    built = time.perf_counter()
    print(
        f"loaded              {count:,} rollouts by COPY in {loaded - started:.0f} s; indexes built in {built - loaded:.0f} s"
    )
    slowest = sorted(timings, key=lambda item: -item[1])[:3]
    print("slowest indexes     " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in slowest))
    print(f"table sizes         rollouts {sizes[0]}, bodies {sizes[1]}")


def _plan(user, query: dict) -> str:
    """The indexes the page query's plan uses (or Seq Scan), from EXPLAIN."""
    from runs.trace_forms import RolloutFilterForm
    from runs.trace_selectors import rollout_page_query, rollouts_filtered

    form = RolloutFilterForm(query)
    direction, cursor = form.cursor()
    rollouts = rollouts_filtered(user=user, filters=form.filters())
    plan = rollout_page_query(rollouts, sort=form.sort_key(), direction=direction, cursor=cursor).explain()
    parts = []
    for kind, backward, index, table in re.findall(
        r"(Index Only Scan|Index Scan|Bitmap Index Scan)( Backward)?(?: using (\w+))? on (\w+)", plan
    ):
        parts.append(f"{kind.lower()}{backward.lower()} {index or table}")
    parts += [f"SEQ SCAN {name}" for name in re.findall(r"Seq Scan on (\w+)", plan)]
    return "; ".join(dict.fromkeys(parts)) or "(no table scan)"


def _time(client, url: str, queries: list[dict], repeat: int) -> list[float]:
    times = []
    for k in range(repeat):
        query = queries[k % len(queries)]
        began = time.perf_counter()
        response = client.get(url, query)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200, (url, query, response.status_code)
    return times


def _p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def _deep_cursor(count: int) -> str:
    return f"{float(count // 2)}~{count // 2}"


def _long_trace(run_id: int, version_id: int) -> int:
    from runs.models import Rollout, RolloutBody, RolloutSearchText
    from runs.search_text import search_text_of

    turns = []
    for t in range(200):
        calls = []
        if t % 2:
            calls = [
                {
                    "id": f"c{t}",
                    "name": "read_spreadsheet",
                    "arguments": {"path": "model.xlsx", "range": "A1:F40"},
                    "result_text": "region,revenue,cost\nAPAC,120,45\n" * 20,
                    "is_error": t % 25 == 0,
                    "duration_ms": 3.0,
                    "repaired": t % 40 == 1,
                }
            ]
        turns.append(
            {
                "index": t,
                "role": "assistant" if t % 2 else "user",
                "content": f"Turn {t}: " + "the quarterly figures show growth " * 12,
                "tool_calls": calls,
                "prompt_tokens": 1000 + t,
                "completion_tokens": 60,
                "duration_ms": 200.0,
                "notes": ["repaired a tool call"] if t % 40 == 1 else [],
            }
        )
    rollout = Rollout.objects.create(
        run_id=run_id,
        seq=10**9,
        step=1,
        task_version_id=version_id,
        task_name="practicum/task-0",
        task_hash="0" * 64,
        outcome="graded",
        reward=0.5,
        score=0.5,
        passed=False,
        turns=200,
        tokens=200_000,
    )
    RolloutBody.objects.create(
        rollout=rollout,
        turns=turns,
        verdicts=[
            {
                "criterion_id": "c1",
                "kind": "llm_judge",
                "met": False,
                "rationale": "No source is cited.",
                "weight": 1.0,
                "required": True,
            }
        ],
        final_answer="12.5",
    )
    RolloutSearchText.objects.create(rollout=rollout, text=search_text_of(turns=turns, final_answer="12.5"))
    return rollout.pk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    _setup_django()
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    original = connection.settings_dict["NAME"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"bench_traces_{os.getpid()}"
    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        print(f"database            PostgreSQL {connection.pg_version // 10000} (throwaway {test_db})")
        reviewer, researcher, versions, runs = _fixtures()
        run_ids, version_ids = [run.pk for run in runs], [v.pk for v in versions]
        _load(args.rollouts, run_ids, version_ids)
        long_id = _long_trace(run_ids[0], version_ids[0])
        rng = random.Random(7)
        some_runs = [str(rng.choice(run_ids)) for _ in range(args.repeat)]
        own_runs = [str(run_ids[r]) for r in range(0, RUNS, 4)]
        cases = [
            ("no filter, newest first", reviewer, [{}]),
            ("one run", reviewer, [{"run": r} for r in some_runs]),
            (
                "one run, harness errors",
                reviewer,
                [{"run": r, "outcome": "harness_error"} for r in some_runs],
            ),
            ("error code, all runs", reviewer, [{"error_code": c} for c in CODES]),
            (
                "run + steps 100-120 + not passed",
                reviewer,
                [{"run": r, "step_min": 100, "step_max": 120, "passed": "no"} for r in some_runs],
            ),
            (
                "run + reward 0.2-0.6, by reward",
                reviewer,
                [{"run": r, "reward_min": 0.2, "reward_max": 0.6, "sort": "-reward"} for r in some_runs],
            ),
            ("label, all runs", reviewer, [{"label": label} for label in LABELS]),
            ("run + labelled", reviewer, [{"run": r, "label": "any"} for r in some_runs]),
            ("task, all runs", reviewer, [{"task": str(versions[t].task_id)} for t in range(0, TASKS, 3)]),
            ("text: rare word, all runs", reviewer, [{"q": RARE_WORD}]),
            ("text: common words, all runs", reviewer, [{"q": "quarterly figures"}]),
            (
                "run + harness + text",
                reviewer,
                [{"run": r, "outcome": "harness_error", "q": "worker-7"} for r in some_runs],
            ),
            (
                "deep keyset page (row 500,000)",
                reviewer,
                [{"after": _deep_cursor(args.rollouts), "sort": "id"}],
            ),
            ("researcher: own runs only", researcher, [{"run": r} for r in own_runs]),
            ("researcher: no filter", researcher, [{}]),
        ]
        client = Client()
        results = []
        print(
            f"\n/traces/ over {args.rollouts:,} rollouts, {args.repeat} requests per line (server time, ms)"
        )
        print(f"{'filters':36} {'p50':>6} {'p95':>6}  plan of the page query")
        for title, user, queries in cases:
            client.force_login(user)
            client.get("/traces/", queries[0])  # warm the plan cache and the pages the first query touches
            times = _time(client, "/traces/", queries, args.repeat)
            results.append(_p(times, 0.95))
            print(f"{title:36} {_p(times, 0.5):6.1f} {_p(times, 0.95):6.1f}  {_plan(user, queries[0])}")
        worst = max(results)
        print(f"worst p95           {worst:.1f} ms (target ≤ 200 ms: {'met' if worst <= 200 else 'NOT met'})")

        client.force_login(reviewer)
        paint = _time(client, f"/traces/{long_id}/", [{}], args.repeat)
        pages = _time(
            client,
            f"/traces/{long_id}/turns/",
            [{"turn": t} for t in range(10, 200, 10)],
            max(args.repeat, 19),
        )
        print("\n200-turn trace (server time, ms)")
        print(f"first paint         p50 {_p(paint, 0.5):.1f}, p95 {_p(paint, 0.95):.1f}")
        print(f"each page of turns  p50 {_p(pages, 0.5):.1f}, p95 {_p(pages, 0.95):.1f} (19 pages of ten)")
        ok = max(_p(paint, 0.95), _p(pages, 0.95)) <= 100
        print(f"target ≤ 100 ms     {'met' if ok else 'NOT met'}")
        print(f"mean list request   {statistics.mean(results):.1f} ms p95 over the lines above")
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)


if __name__ == "__main__":
    main()
