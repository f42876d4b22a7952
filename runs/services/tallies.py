"""Per (run, split, task, step) counts over final rollouts (RunTaskStepTally), kept as rollouts arrive.

Ingestion adds each batch's final rollouts with one upsert that increments the counts, inside the
transaction that holds the run's row lock, so concurrent batches of one run cannot lose an increment
and a batch that is rolled back takes its increments with it. `task_tallies_rebuild` recounts a run
from its rollouts, for rows written without ingestion (the benchmark's COPY).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Max, Q, Sum

from rl_engine.outcomes import Outcome

from ..models import Rollout, Run, RunTaskStepTally

_COUNTS = ("rollouts", "valid", "passed", "harness_errors", "agent_errors", "reward_sum", "rewarded")
_VALID = (str(Outcome.GRADED), str(Outcome.AGENT_ERROR))
# The Rollout columns a tally is counted from.
TALLIED_FIELDS = ("final", "split", "task_name", "step", "task_version_id", "outcome", "passed", "reward")
# SQLite caps the parameters of one statement (32,766 since 3.32); 12 per row.
_ROWS_PER_STATEMENT = 1000


def task_tallies_add(*, run_id: int, rollouts: Iterable[dict[str, Any]]) -> None:
    """Count `rollouts` (Rollout column values, as ingestion builds them) into the run's tallies."""
    tallies: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in rollouts:
        if not row["final"]:
            continue
        key = (row["split"], row["task_name"], row["step"])
        tally = tallies.setdefault(key, dict.fromkeys(_COUNTS, 0) | {"task_version_id": None})
        tally["rollouts"] += 1
        tally["valid"] += row["outcome"] in _VALID
        tally["passed"] += row["passed"] is True
        tally["harness_errors"] += row["outcome"] == Outcome.HARNESS_ERROR
        tally["agent_errors"] += row["outcome"] == Outcome.AGENT_ERROR
        if row["reward"] is not None:
            tally["reward_sum"] += row["reward"]
            tally["rewarded"] += 1
        tally["task_version_id"] = tally["task_version_id"] or row["task_version_id"]
    if not tallies:
        return
    rows = [
        (run_id, split, task_name, step, tally["task_version_id"], *(tally[name] for name in _COUNTS))
        for (split, task_name, step), tally in tallies.items()
    ]
    table = connection.ops.quote_name(RunTaskStepTally._meta.db_table)
    columns = ("run_id", "split", "task_name", "step", "task_version_id", *_COUNTS)
    increments = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in _COUNTS)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            chunk = rows[start : start + _ROWS_PER_STATEMENT]
            placeholders = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES {placeholders} "
                f"ON CONFLICT (run_id, split, task_name, step) DO UPDATE SET {increments}, "
                f"task_version_id = COALESCE({table}.task_version_id, excluded.task_version_id)",
                [value for row in chunk for value in row],
            )


@transaction.atomic
def task_tallies_rebuild(*, run: Run) -> int:
    """Recount the run's tallies from its final rollouts; returns how many tally rows it has."""
    RunTaskStepTally.objects.filter(run=run).delete()
    groups = (
        Rollout.objects.filter(run=run, final=True)
        .values("split", "task_name", "step")
        .annotate(
            rollouts=Count("pk"),
            valid=Count("pk", filter=Q(outcome__in=_VALID)),
            passed_count=Count("pk", filter=Q(passed=True)),
            harness_errors=Count("pk", filter=Q(outcome=Outcome.HARNESS_ERROR)),
            agent_errors=Count("pk", filter=Q(outcome=Outcome.AGENT_ERROR)),
            reward_sum=Sum("reward", default=0.0),
            rewarded=Count("reward"),
            version_id=Max("task_version_id"),
        )
        .order_by()
    )
    tallies = [
        RunTaskStepTally(
            run=run,
            split=group["split"],
            task_name=group["task_name"],
            step=group["step"],
            task_version_id=group["version_id"],
            passed=group["passed_count"],
            **{name: group[name] for name in _COUNTS if name != "passed"},
        )
        for group in groups
    ]
    RunTaskStepTally.objects.bulk_create(tallies, batch_size=2000)
    return len(tallies)
