"""Run page server time and query count with 1,000 steps × 30 metrics and 200,000 rollouts.

Seeds a throwaway database (PostgreSQL `bench_run_page_<pid>` on the server DATABASE_URL names,
dropped at the end, rows written with COPY; otherwise SQLite in a temporary folder, bulk inserts),
then requests the run page and its live partial (what the page polls every 3 s) through Django's
whole request stack and prints p50/p95 server time and queries per request. Target: p95 ≤ 150 ms.
Run: [DATABASE_URL=postgres://postgres@127.0.0.1:5432/test] .venv/bin/python bench/run_page.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CODES = ["TOOL_TIMEOUT", "SANDBOX_START", "JUDGE", "TOOL_SERVER_CRASH"]
AGENT_CODES = ["TURN_BUDGET", "UNPARSEABLE"]


def _setup_django() -> bool:
    """Django on a throwaway database; True when it is PostgreSQL."""
    postgres = os.environ.get("DATABASE_URL", "").startswith("postgres")
    var_dir = tempfile.mkdtemp(prefix="bench-run-page-")
    os.environ["PRACTICUM_VAR_DIR"] = var_dir
    if not postgres:
        os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()
    return postgres


def _metrics(step: int, rng: random.Random) -> dict:
    """30 metrics as rl_engine/train.py `step()` reports them."""
    reward = min(1.0, 0.2 + step / 1400 + rng.uniform(-0.05, 0.05))
    harness = {code: rng.randint(0, 2) for code in CODES[: rng.randint(0, 3)]}
    return {
        "step": step,
        "reward_mean": reward,
        "pass_at_1": reward * 0.9,
        "score_mean": reward,
        "harness_error_rate": sum(harness.values()) / 200,
        "harness_errors_by_code": harness,
        "agent_error_rate": rng.uniform(0, 0.1),
        "agent_errors_by_code": {"TURN_BUDGET": rng.randint(0, 5)},
        "turns_mean": rng.uniform(3, 8),
        "response_tokens_mean": rng.uniform(200, 400),
        "samples_trained": 200,
        "masked_groups": rng.randint(0, 2),
        "masked_samples": rng.randint(0, 16),
        "zero_variance_groups": rng.randint(0, 5),
        "entropy": 2.0 - step / 1000,
        "clip_ratio": rng.uniform(0, 0.05),
        "kl": rng.uniform(0, 0.02),
        "ratio_mean": 1.0,
        "policy_loss": rng.uniform(-0.1, 0.1),
        "grad_norm": rng.uniform(0.1, 1.0),
        "lr": 1e-6,
        "tokens": 60000.0,
        "optimizer_steps": 1.0,
        "time_rollout_sec": rng.uniform(20, 40),
        "time_generate_sec": rng.uniform(5, 10),
        "time_grade_sec": rng.uniform(0.1, 1),
        "time_train_sec": rng.uniform(5, 10),
        "data_cursor": step * 25,
        "ratio_max": 1.2,
        "tokens_per_sec": 2000.0,
    }


def _rollout_rows(run_id: int, versions: list, steps: int, per_step: int, rng: random.Random):
    """(column values) of every rollout: ~2% harness errors (retried, the last attempt final), ~5% agent errors."""
    seq = 0
    now = datetime.now(UTC).isoformat()
    for step in range(1, steps + 1):
        for index in range(per_step):
            version = versions[(step * per_step + index) // 8 % len(versions)]
            draw = rng.random()
            seq += 1
            if draw < 0.02:
                outcome, code, reward, passed, score = "harness_error", rng.choice(CODES), None, None, None
            elif draw < 0.07:
                outcome, code, reward, passed, score = "agent_error", rng.choice(AGENT_CODES), 0.0, None, None
            else:
                passed = rng.random() < 0.2 + step / 1400
                outcome, code, reward, score = "graded", "", float(passed), float(passed)
            yield (
                run_id, seq, "train", step, version.pk, f"practicum/{version.task.slug}", version.content_hash,
                index % 8, 1, True, outcome, code, "", reward, passed, score, 6, 3000, 12.0,
                '{"agent": 10.0, "grade": 0.5}', "hf:tiny", now, "",
            )  # fmt: skip


COLUMNS = (
    "run_id", "seq", "split", "step", "task_version_id", "task_name", "task_hash", "sample", "attempt", "final",
    "outcome", "error_code", "message", "reward", "passed", "score", "turns", "tokens", "duration_sec", "timings",
    "policy", "created_at", "label",
)  # fmt: skip


def _insert_rollouts(rows, postgres: bool) -> None:
    from django.db import connection, transaction

    from runs.models import Rollout

    if postgres:
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.copy(f"COPY runs_rollout ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        return
    batch = []
    fields = [name.removesuffix("_id") if name in ("run_id", "task_version_id") else name for name in COLUMNS]
    with transaction.atomic():
        for row in rows:
            values = dict(zip(fields, row, strict=True))
            values["run_id"], values["task_version_id"] = values.pop("run"), values.pop("task_version")
            values["timings"] = json.loads(values["timings"])
            values.pop("created_at")
            batch.append(Rollout(**values))
            if len(batch) == 5000:
                Rollout.objects.bulk_create(batch)
                batch = []
        Rollout.objects.bulk_create(batch)


def _seed(steps: int, per_step: int, task_count: int) -> dict:
    from django.contrib.auth.models import Group, User
    from django.db import transaction
    from django.utils import timezone

    from runs.models import Checkpoint, Run, RunEvent, RunTaskVersion, StepMetric
    from runs.services.tallies import task_tallies_rebuild
    from tasks_authoring.models import Domain, Task, TaskSet, TaskSetMember, TaskVersion

    rng = random.Random(7)
    started = time.perf_counter()
    researcher = User.objects.create(username="rhea", password="md5$bench$" + "0" * 22)
    researcher.groups.add(Group.objects.get(name="researcher"))
    domain = Domain.objects.first()
    with transaction.atomic():
        tasks = Task.objects.bulk_create(
            Task(slug=f"task-{n}", title=f"Task {n}", domain=domain, owner=researcher, status="approved")
            for n in range(task_count)
        )
        versions = TaskVersion.objects.bulk_create(
            TaskVersion(
                task=t, number=1, state="approved", created_by=researcher, content_hash=uuid.uuid4().hex * 2
            )
            for t in tasks
        )
        task_set = TaskSet.objects.create(name="Bench set", owner=researcher, seed=1)
        TaskSetMember.objects.bulk_create(
            TaskSetMember(task_set=task_set, version=v, split="eval" if i % 5 == 0 else "train")
            for i, v in enumerate(versions)
        )
        spec = {"kind": "train", "batch": {"prompts_per_step": per_step // 8, "samples_per_prompt": 8}}
        spec["evaluation"] = {"every_steps": 50, "pass_at_k": [1, 4], "samples_per_task": 4}
        run = Run.objects.create(
            name="Bench run", kind="train", status="running", task_set=task_set, split="train", spec=spec,
            launched_by=researcher, steps_total=steps, steps_done=steps, rollouts_expected=steps * per_step,
            rollouts_done=steps * per_step, latest_reward=0.9, latest_pass_at_1=0.8, harness_error_rate=0.02,
            started_at=timezone.now(),
        )  # fmt: skip
        RunTaskVersion.objects.bulk_create(
            RunTaskVersion(
                run=run, version=v, split="train", content_hash=v.content_hash, bundle_name=v.task.slug
            )
            for v in versions
        )
        StepMetric.objects.bulk_create(
            [
                StepMetric(run=run, split="train", step=s, metrics=_metrics(s, rng))
                for s in range(1, steps + 1)
            ]
            + [
                StepMetric(
                    run=run,
                    split="eval",
                    step=s,
                    metrics={
                        "eval_reward_mean": s / steps,
                        "eval_pass_at_1": s / steps,
                        "eval_pass_at_4": 1.0,
                    },
                )
                for s in range(0, steps + 1, 50)
            ],
            batch_size=500,
        )
        now = timezone.now()
        RunEvent.objects.bulk_create(
            RunEvent(
                run=run, seq=10_000_000 + i, type="log", payload={"message": f"log line {i}"}, emitted_at=now
            )
            for i in range(500)
        )
        Checkpoint.objects.bulk_create(
            Checkpoint(run=run, step=s, path=f"/ckpt/step-{s}", created_at=now)
            for s in range(100, steps + 1, 100)
        )
    _insert_rollouts(_rollout_rows(run.pk, versions, steps, per_step, rng), postgres=_is_postgres())
    # Ingestion keeps the per-task tallies as rollouts arrive; rows written by COPY are recounted once.
    task_tallies_rebuild(run=run)
    return {"run": run, "user": researcher, "seconds": time.perf_counter() - started}


def _is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def _measure(
    client, url: str, repeats: int, headers: dict, *, cold: bool
) -> tuple[list[float], list[int], int]:
    """Server times; `cold` clears the cache before each request, so the per-task table is computed every time."""
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url, headers=headers)  # warm caches (templates, session, roles)
    times, queries = [], []
    for _ in range(repeats):
        if cold:
            cache.clear()
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url, headers=headers)
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        queries.append(len(captured))
    return times, queries, len(response.content)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rollouts-per-step", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    postgres = _setup_django()
    from django.db import connection
    from django.test import Client

    test_db = None
    if postgres:
        connection.settings_dict.setdefault("TEST", {})["NAME"] = f"bench_run_page_{os.getpid()}"
        test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    else:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    try:
        seeded = _seed(args.steps, args.rollouts_per_step, args.tasks)
        # Planner statistics, as autovacuum keeps them on PostgreSQL; without them SQLite picks the
        # (run, error_code) index for the harness panel and reads every rollout of the run.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        run = seeded["run"]
        database = f"PostgreSQL (throwaway {test_db})" if postgres else "SQLite (temporary folder)"
        print(f"database   {database}")
        print(
            f"seeded     {args.steps:,} steps × 30 metrics, {args.steps * args.rollouts_per_step:,} rollouts, "
            f"{args.tasks} tasks in {seeded['seconds']:.1f} s"
        )
        client = Client()
        client.force_login(seeded["user"])
        url = f"/runs/{run.pk}/"
        print(f"{'request':<36} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'KiB':>6}")
        cases = [
            ("run page, cold", {}, True),
            ("live partial, cold", {"HX-Request": "true"}, True),
            ("live partial, per-task table cached", {"HX-Request": "true"}, False),
        ]
        for label, headers, cold in cases:
            times, queries, size = _measure(client, url, args.repeats, headers, cold=cold)
            print(
                f"{label:<36} {statistics.median(times):8.1f} {_percentile(times, 0.95):8.1f} "
                f"{'/'.join(map(str, sorted(set(queries)))):>8} {size / 1024:6.0f}"
            )
        print("target: p95 ≤ 150 ms (cold: the cache is cleared before each request)")
    finally:
        if postgres:
            connection.creation.destroy_test_db(test_db, verbosity=0)


if __name__ == "__main__":
    main()
