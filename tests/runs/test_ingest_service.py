"""events_ingest: every event type, exact counts under duplicates and disorder, malformed events, run figures."""

from __future__ import annotations

import pytest

from runs.models import Checkpoint, Rollout, RolloutBody, RunEvent, RunStatus, StepMetric
from runs.services.ingest import events_ingest
from tests.runs.event_builders import event, rollout_payload, task_of

pytestmark = pytest.mark.django_db


def test_it_stores_an_evaluation_run_from_start_to_finish(launch):
    run = launch("eval", max_attempts=2)
    name, content_hash = task_of(run)
    retried = rollout_payload(name, content_hash, outcome="harness_error", sample=1, attempt=1)
    events = [
        event(run, 1, "run_started", {"kind": "eval", "policy": "oracle", "tasks": [name]}),
        event(
            run, 2, "harness_error", {"code": "BUNDLE_INVALID", "task": "tasks/eval/x", "message": "no toml"}
        ),
        event(run, 3, "rollout", rollout_payload(name, content_hash, sample=0)),
        event(run, 4, "rollout", retried),
        event(run, 5, "harness_error", retried),
        event(run, 6, "rollout", rollout_payload(name, content_hash, outcome="failed", sample=1, attempt=2)),
        event(run, 7, "log", {"message": "hello"}),
        event(run, 8, "run_finished", {"rollouts": 2, "valid_mean_reward": 0.5, "pass_at_1": 0.5}),
    ]

    result = events_ingest(run=run, events=events)

    assert result.as_dict() == {"accepted": 8, "duplicates": 0, "rejected": []}
    assert RunEvent.objects.filter(run=run).count() == 8
    rollouts = {r.seq: r for r in Rollout.objects.filter(run=run)}
    assert set(rollouts) == {3, 4, 6}
    assert all(
        r.task_version_id == run.task_versions.get(content_hash=content_hash).version_id
        for r in rollouts.values()
    )
    assert (
        rollouts[4].final is False
        and rollouts[4].error_code == "SANDBOX_START"
        and rollouts[4].reward is None
    )
    assert rollouts[6].final is True and rollouts[6].passed is False and rollouts[6].split == "eval"
    body = RolloutBody.objects.get(rollout=rollouts[3])
    assert len(body.turns) == 2 and body.final_answer == "120"
    assert RunEvent.objects.get(run=run, seq=3).payload == {}  # the body lives in Rollout, not twice
    assert RunEvent.objects.get(run=run, seq=5).payload["code"] == "SANDBOX_START"
    assert RunEvent.objects.get(run=run, seq=2).payload["code"] == "BUNDLE_INVALID"
    summary = StepMetric.objects.get(run=run, split="eval", step=0)
    assert summary.metrics["valid_mean_reward"] == 0.5
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.started_at and run.finished_at
    assert (run.events_received, run.last_seq, run.rollouts_done, run.harness_errors) == (8, 8, 2, 0)
    # Mean reward and Pass@1 over the valid final rollouts: one passed, one failed; the retry is not averaged.
    assert (run.latest_reward, run.latest_pass_at_1, run.harness_error_rate) == (0.5, 0.5, 0.0)


def test_a_training_run_fills_steps_evaluations_and_checkpoints(launch):
    run = launch("train")
    train_task, eval_task = task_of(run, "train"), task_of(run, "eval")
    events = [
        event(run, 1, "run_started", {"kind": "train", "spec": run.spec}),
        event(run, 2, "rollout", rollout_payload(*eval_task, split="eval")),
        event(
            run,
            3,
            "log",
            {"message": "evaluation at step 0", "step": 0, "evaluation": {"eval_pass_at_1": 1.0}},
        ),
        event(run, 4, "rollout", rollout_payload(*train_task, step=1, split="train")),
        event(
            run, 5, "rollout", rollout_payload(*train_task, step=1, sample=1, outcome="failed", split="train")
        ),
        event(run, 6, "step_metrics", {"step": 1, "reward_mean": 0.5, "pass_at_1": 0.5, "policy_loss": 0.1}),
        event(run, 7, "checkpoint", {"step": 1, "path": "/runs/x/checkpoints/step-1"}),
    ]
    events_ingest(run=run, events=events)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert (run.steps_done, run.latest_reward, run.latest_pass_at_1) == (1, 0.5, 0.5)
    assert StepMetric.objects.get(run=run, split="train", step=1).metrics["policy_loss"] == 0.1
    assert StepMetric.objects.get(run=run, split="eval", step=0).metrics == {"eval_pass_at_1": 1.0}
    assert Checkpoint.objects.get(run=run, step=1).path.endswith("step-1")
    assert list(Rollout.objects.filter(run=run).values_list("split", "step")) == [
        ("eval", 0),
        ("train", 1),
        ("train", 1),
    ]

    # Step 3 arrives before step 2: the latest figures stay with the highest step.
    events_ingest(
        run=run,
        events=[
            event(run, 10, "step_metrics", {"step": 3, "reward_mean": 0.9, "pass_at_1": 1.0}),
            event(run, 9, "step_metrics", {"step": 2, "reward_mean": 0.7, "pass_at_1": 0.5}),
            event(run, 11, "run_finished", {"steps": 3, "last": {}}),
        ],
    )
    run.refresh_from_db()
    assert (run.steps_done, run.latest_reward, run.status) == (3, 0.9, RunStatus.SUCCEEDED)
    assert StepMetric.objects.filter(run=run, split="train").count() == 3


def test_a_batch_sent_twice_is_stored_once_and_answered_as_duplicates(launch):
    run = launch()
    name, content_hash = task_of(run)
    batch = [
        event(run, seq, "rollout", rollout_payload(name, content_hash, sample=seq)) for seq in range(1, 11)
    ]
    assert events_ingest(run=run, events=batch).as_dict() == {"accepted": 10, "duplicates": 0, "rejected": []}
    assert events_ingest(run=run, events=batch).as_dict() == {"accepted": 0, "duplicates": 10, "rejected": []}
    overlapping = batch[5:] + [event(run, 11, "log", {"message": "x"}), batch[0], batch[0]]
    assert events_ingest(run=run, events=overlapping).as_dict() == {
        "accepted": 1,
        "duplicates": 7,
        "rejected": [],
    }
    run.refresh_from_db()
    assert (run.events_received, run.rollouts_done, run.last_seq) == (11, 10, 11)
    assert (
        Rollout.objects.filter(run=run).count() == RolloutBody.objects.filter(rollout__run=run).count() == 10
    )


def test_batches_out_of_order_give_exact_counts(launch):
    run = launch()
    name, content_hash = task_of(run)
    events = [
        event(run, seq, "rollout", rollout_payload(name, content_hash, sample=seq)) for seq in range(1, 101)
    ]
    for start in (80, 0, 40, 20, 60, 40):
        events_ingest(run=run, events=list(reversed(events[start : start + 20])))
    run.refresh_from_db()
    assert (run.events_received, run.rollouts_done, run.last_seq) == (100, 100, 100)
    assert sorted(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == list(range(1, 101))


def test_it_rejects_malformed_events_with_their_index_and_keeps_the_valid_ones(launch):
    run = launch()
    name, content_hash = task_of(run)
    bad_reward = rollout_payload(name, content_hash, outcome="harness_error")
    bad_reward["summary"]["reward"] = 0.0
    events = [
        event(run, 1, "run_started", {}),
        "not an event",
        {"run_id": str(run.uuid), "seq": 3, "type": "log"},
        {**event(run, 4, "log"), "run_id": "00000000-0000-0000-0000-000000000000"},
        event(run, 0, "log"),
        event(run, 6, "telemetry"),
        {**event(run, 7, "log"), "payload": [1]},
        event(run, 8, "rollout", bad_reward),
        event(run, 9, "step_metrics", {"reward_mean": 1.0}),
        event(run, 10, "checkpoint", {"step": 1}),
        event(run, 11, "rollout", {**rollout_payload(name, content_hash), "split": "test"}),
        {**event(run, 12, "log"), "seq": "12"},
        event(run, 13, "rollout", rollout_payload(name, content_hash)),
    ]

    result = events_ingest(run=run, events=events)

    reasons = {r["index"]: r["reason"] for r in result.rejected}
    assert result.accepted == 2 and result.duplicates == 0
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert "JSON object" in reasons[1]
    assert "missing field(s): payload, timestamp" in reasons[2]
    assert "is not this run" in reasons[3]
    assert "seq must be a positive integer" in reasons[4] and "seq" in reasons[11]
    assert "unknown type 'telemetry'" in reasons[5]
    assert "payload must be a JSON object" in reasons[6]
    assert reasons[7].startswith("payload.summary") and "no reward" in reasons[7]
    assert "payload.step" in reasons[8]
    assert "payload.path" in reasons[9]
    assert "payload.split" in reasons[10]
    assert sorted(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 13]
    run.refresh_from_db()
    assert run.events_rejected == 11 and run.ingest_rejections[-1]["index"] == 11
    assert run.rollouts_done == 1


def test_harness_errors_count_once_their_retries_are_spent(launch):
    run = launch(max_attempts=2)
    name, content_hash = task_of(run)
    events = [
        event(run, 1, "rollout", rollout_payload(name, content_hash, outcome="harness_error", attempt=1)),
        event(run, 2, "rollout", rollout_payload(name, content_hash, outcome="harness_error", attempt=2)),
        event(run, 3, "rollout", rollout_payload(name, content_hash, sample=1)),
        event(run, 4, "rollout", rollout_payload(name, content_hash, outcome="agent_error", sample=2)),
    ]
    events_ingest(run=run, events=events)
    run.refresh_from_db()
    assert list(Rollout.objects.filter(run=run).values_list("final", flat=True)) == [False, True, True, True]
    assert (run.rollouts_done, run.harness_errors, run.harness_error_rate) == (3, 1, 1 / 3)
    # The harness error is not averaged in as 0: one pass and one agent error.
    assert (run.latest_reward, run.latest_pass_at_1) == (0.5, 0.5)


def test_rollouts_of_a_task_the_run_did_not_use_are_kept_without_a_version(launch):
    run = launch()
    events_ingest(run=run, events=[event(run, 1, "rollout", rollout_payload("practicum/other", "f" * 64))])
    rollout = Rollout.objects.get(run=run)
    assert rollout.task_version_id is None and rollout.task_name == "practicum/other"


@pytest.mark.parametrize("status", [RunStatus.CANCELLING, RunStatus.FAILED])
def test_a_finish_does_not_overrule_a_cancel_or_a_failure(launch, status):
    run = launch()
    run.status = status
    run.save(update_fields=["status"])
    events_ingest(run=run, events=[event(run, 1, "run_finished", {})])
    run.refresh_from_db()
    assert run.status == status and run.events_received == 1


def test_the_first_event_starts_a_queued_run(launch):
    run = launch()
    assert run.status == RunStatus.QUEUED
    events_ingest(run=run, events=[event(run, 3, "log", {"message": "warming up"})])
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.started_at is not None and run.last_event_at is not None


def test_a_batch_costs_the_same_queries_whatever_its_size(launch, django_assert_max_num_queries):
    run = launch()
    name, content_hash = task_of(run)

    def batch(first: int, size: int) -> list:
        return [
            event(run, seq, "rollout", rollout_payload(name, content_hash, sample=seq))
            for seq in range(first, first + size)
        ] + [
            event(run, first + size, "step_metrics", {"step": 1}),
            event(run, first + size + 1, "checkpoint", {"step": 1, "path": "p"}),
        ]

    with django_assert_max_num_queries(16) as small:
        events_ingest(run=run, events=batch(1, 5))
    # 40 rollouts still fit in one INSERT on SQLite, whose statements hold at most 999 parameters.
    with django_assert_max_num_queries(len(small.captured_queries)):
        events_ingest(run=run, events=batch(100, 40))


def test_a_nul_character_in_a_trace_does_not_block_the_run(launch):
    run = launch()
    name, content_hash = task_of(run)
    payload = rollout_payload(name, content_hash, outcome="harness_error", message="bad\x00byte")
    payload["turns"][1]["tool_calls"][0]["result_text"] = "%PDF\x00\x01 binary, and a literal \\u0000"
    result = events_ingest(
        run=run, events=[event(run, 1, "rollout", payload), event(run, 2, "log", {"m": "\x00"})]
    )
    assert result.accepted == 2
    body = RolloutBody.objects.get(rollout__run=run)
    stored = body.turns[1]["tool_calls"][0]["result_text"]
    # PostgreSQL cannot store NUL and keeps U+FFFD instead; the literal backslash-u text is untouched.
    assert stored in (
        "%PDF\x00\x01 binary, and a literal \\u0000",
        "%PDF\ufffd\x01 binary, and a literal \\u0000",
    )
    assert Rollout.objects.get(run=run).message in ("bad\x00byte", "bad\ufffdbyte")
