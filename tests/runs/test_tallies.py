"""RunTaskStepTally: kept by ingestion, exact under duplicates and retries, equal to a recount from rollouts."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from runs.models import Rollout, RunTaskStepTally
from runs.selectors import run_task_results, runs_task_results
from runs.services.ingest import events_ingest
from runs.services.tallies import task_tallies_rebuild
from tests.runs.event_builders import event, rollout_payload, task_of

pytestmark = pytest.mark.django_db

BACKFILL = importlib.import_module("runs.migrations.0007_rollout_task_tallies").BACKFILL


def _tallies(run) -> list[tuple]:
    return sorted(
        RunTaskStepTally.objects.filter(run=run).values_list(
            "split",
            "task_name",
            "step",
            "task_version_id",
            "rollouts",
            "valid",
            "passed",
            "harness_errors",
            "agent_errors",
            "reward_sum",
            "rewarded",
        )
    )


def _training_events(run) -> list[dict]:
    """Two steps of one task: passes, a failure, an agent error, a retried harness error and a final one."""
    name, content_hash = task_of(run, split="train")

    def rollout(seq: int, step: int, outcome: str, *, sample: int, attempt: int = 1, **fields) -> dict:
        payload = rollout_payload(
            name,
            content_hash,
            outcome=outcome,
            step=step,
            sample=sample,
            attempt=attempt,
            split="train",
            **fields,
        )
        return event(run, seq, "rollout", payload)

    return [
        rollout(1, 1, "graded", sample=0),
        rollout(2, 1, "failed", sample=1),
        rollout(3, 1, "harness_error", sample=2, attempt=1),  # retried: not final, not counted
        rollout(4, 1, "graded", sample=2, attempt=2, reward=0.5, score=0.5, passed=False),
        rollout(5, 2, "agent_error", sample=0),
        rollout(6, 2, "harness_error", sample=1, attempt=2),  # the last attempt: final, no reward
        rollout(7, 2, "graded", sample=2),
    ]


def test_ingestion_counts_final_rollouts_per_task_and_step(launch):
    run = launch("train", max_attempts=2)
    name, _ = task_of(run, split="train")
    version_id = run.task_versions.get(bundle_name=name).version_id

    events_ingest(run=run, events=_training_events(run))

    assert _tallies(run) == [
        ("train", name, 1, version_id, 3, 3, 1, 0, 0, 1.5, 3),
        ("train", name, 2, version_id, 3, 2, 1, 1, 1, 1.0, 2),
    ]


def test_a_batch_delivered_twice_or_split_differently_counts_each_rollout_once(launch):
    run = launch("train", max_attempts=2)
    events = _training_events(run)

    events_ingest(run=run, events=events[:4])
    events_ingest(run=run, events=events[2:])  # overlaps the first batch
    events_ingest(run=run, events=events)  # the whole of it again
    once = _tallies(run)

    assert sum(row[4] for row in once) == Rollout.objects.filter(run=run, final=True).count() == 6
    task_tallies_rebuild(run=run)
    assert _tallies(run) == once


def test_the_migration_backfill_counts_what_ingestion_counts(launch):
    run = launch("train", max_attempts=2)
    events_ingest(run=run, events=_training_events(run))
    counted = _tallies(run)
    RunTaskStepTally.objects.all().delete()

    with connection.cursor() as cursor:
        cursor.execute(BACKFILL)

    assert _tallies(run) == counted


def test_the_per_task_table_reads_the_tallies(launch):
    run = launch("train", max_attempts=2)
    events_ingest(run=run, events=_training_events(run))
    run.refresh_from_db()
    run.steps_done = 2
    run.save(update_fields=["steps_done"])

    (row,) = run_task_results(run=run)

    assert row["rollouts"] == 6 and row["valid"] == 5 and row["harness_errors"] == 1
    assert row["agent_errors"] == 1 and row["passed_count"] == 2
    assert row["pass_rate"] == pytest.approx(2 / 5)
    assert row["mean_reward"] == pytest.approx(2.5 / 5)  # the harness error is not averaged in as 0
    assert row["trend"] == pytest.approx(1.0 / 2 - 1.5 / 3)  # step 2's mean minus step 1's
    compared = runs_task_results(runs=[run])
    assert compared[row["task_name"]][run.pk]["mean_reward"] == pytest.approx(0.5)
