"""Runs end to end on real services: run_launch → Celery (`runs` queue, beat reconciling) → Ray Jobs API →
`python -m rl_engine` → events posted to the web server → ingestion → the run's rows and status."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import psutil
import pytest
from django.utils import timezone

from runs import ray_jobs
from runs.models import FINAL_STATUSES, Rollout, Run, RunEvent, RunStatus, StepMetric
from runs.services import dispatch
from runs.services.launch import run_cancel, run_launch

from .run_helpers import (
    assert_every_event_stored_once,
    describe,
    toy_task_set,
    train_spec,
    wait_for,
    wait_for_status,
    wait_until_final,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def users(expert, reviewer, researcher):
    return {"expert": expert, "reviewer": reviewer, "researcher": researcher}


@pytest.fixture
def toy_set(users):
    return toy_task_set(users, "Toy pair", ["grass", "leaf"])


def launch_eval(researcher, task_set, agent: str, samples: int = 1) -> Run:
    spec = {
        "agent": agent,
        "evaluation": {"samples_per_task": samples},
        "resources": {"sandboxes_per_worker": 2},
    }
    return run_launch(user=researcher, kind="eval", task_set=task_set, split="all", spec=spec)


def finals(run: Run):
    return Rollout.objects.filter(run=run, final=True)


def driver_processes(run: Run) -> list[psutil.Process]:
    """The job's `python -m rl_engine ... --run-id <uuid>` process (the entrypoint Ray started)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "rl_engine" in cmdline and str(run.uuid) in cmdline:
            found.append(process)
    return found


def test_an_oracle_evaluation_grades_and_passes_every_rollout(live_runs_stack, researcher, toy_set):
    run = wait_until_final(launch_eval(researcher, toy_set, "oracle", samples=2), timeout=90)

    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert run.ray_job_id == f"practicum-{run.uuid}"
    rows = list(finals(run).values_list("outcome", "passed", "reward"))
    assert rows == [("graded", True, 1.0)] * 4
    assert run.latest_pass_at_1 == 1.0
    assert_every_event_stored_once(run)


def test_a_null_evaluation_passes_nothing(live_runs_stack, researcher, toy_set):
    run = wait_until_final(launch_eval(researcher, toy_set, "null"), timeout=90)

    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert sorted(finals(run).values_list("outcome", "passed")) == [("graded", False)] * 2
    assert run.latest_pass_at_1 == 0.0


def test_a_broken_task_gives_harness_errors_with_their_code_never_a_zero(live_runs_stack, users, researcher):
    task_set = toy_task_set(users, "Toy with a broken task", ["grass", "leaf"], judged=("leaf",))

    run = wait_until_final(launch_eval(researcher, task_set, "oracle"), timeout=90)

    assert run.status == RunStatus.SUCCEEDED, describe(run)
    broken = finals(run).get(task_name="practicum/colour-of-leaf")
    assert (broken.outcome, broken.error_code, broken.reward) == ("harness_error", "JUDGE", None)
    assert "no judge endpoint" in broken.message
    # Every attempt is kept; the one valid rollout alone makes the mean.
    assert Rollout.objects.filter(run=run, error_code="JUDGE").count() == 3
    assert (run.latest_reward, run.latest_pass_at_1, run.harness_error_rate) == (1.0, 1.0, 0.5)


def test_a_training_run_of_the_toy_set_completes_its_steps(live_runs_stack, researcher, toy_set):
    run = run_launch(user=researcher, kind="train", task_set=toy_set, split="train", spec=train_spec(steps=2))

    run = wait_until_final(run, timeout=150)

    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert run.steps_done == 2
    assert list(StepMetric.objects.filter(run=run, split="train").values_list("step", flat=True)) == [1, 2]
    assert run.checkpoints.filter(step=2).exists()
    assert_every_event_stored_once(run)


def test_cancelling_mid_run_stops_the_ray_job(live_runs_stack, researcher, toy_set):
    run = run_launch(
        user=researcher, kind="train", task_set=toy_set, split="train", spec=train_spec(steps=500)
    )
    wait_for(lambda: Run.objects.get(pk=run.pk).steps_done >= 1, timeout=150, what=lambda: describe(run))

    run_cancel(run=run, user=researcher)

    run = wait_until_final(run, timeout=30)
    assert run.status == RunStatus.CANCELLED, describe(run)
    assert "cancel requested by rhea_researcher" in run.status_reason
    assert ray_jobs.job_info(run.ray_address, run.ray_job_id).status == ray_jobs.STOPPED
    wait_for(lambda: not driver_processes(run), timeout=15, what=lambda: "the driver is still alive")


def test_a_killed_driver_fails_the_run_with_the_reason(live_runs_stack, researcher, toy_set):
    run = run_launch(
        user=researcher, kind="train", task_set=toy_set, split="train", spec=train_spec(steps=500)
    )
    wait_for(lambda: Run.objects.get(pk=run.pk).steps_done >= 1, timeout=150, what=lambda: describe(run))

    drivers = driver_processes(run)
    assert drivers, "the job's driver process was not found"
    for process in drivers:
        os.kill(process.pid, signal.SIGKILL)

    run = wait_until_final(run, timeout=60)
    assert run.status == RunStatus.FAILED, describe(run)
    assert "the driver was killed by signal 9 (SIGKILL" in run.status_reason
    assert "Last lines of the job's log" in run.status_reason


def test_a_worker_killed_mid_run_and_replaced_loses_nothing(live_runs_stack, researcher, toy_set):
    run = run_launch(user=researcher, kind="train", task_set=toy_set, split="train", spec=train_spec(steps=4))
    wait_for_status(run, (RunStatus.RUNNING,), timeout=150)

    live_runs_stack.kill()
    live_runs_stack.start()

    run = wait_until_final(run, timeout=150)
    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert run.steps_done == 4
    assert_every_event_stored_once(run)
    assert finals(run).count() == 4 * 2


def test_a_run_whose_dispatch_message_was_lost_is_dispatched_again(
    live_runs_stack, researcher, toy_set, monkeypatch
):
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)  # the message is lost
    run = launch_eval(researcher, toy_set, "oracle")
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=61))

    run = wait_until_final(run, timeout=90)

    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert finals(run).count() == 2


def test_a_harness_burst_pauses_training_and_resume_runs_the_job_again(live_runs_stack, users, researcher):
    """Every train task needs a judge the run lacks: step 1 is all JUDGE harness errors, so the gate
    pauses the run before its first update; Resume submits a second Ray job that continues with
    `--resume` in the same folder and, the harness still broken, pauses again with its own evidence."""
    task_set = toy_task_set(users, "Toy, judge missing", ["grass", "leaf"], judged=("grass", "leaf"))
    spec = {
        **train_spec(steps=3),
        "max_attempts": 1,
        "health_gate": {"max_eval_harness_error_rate": None, "window_rollouts": 4, "on_trip": "pause"},
    }
    run = run_launch(user=researcher, kind="train", task_set=task_set, split="train", spec=spec)

    run = wait_for_status(run, (RunStatus.PAUSED, *FINAL_STATUSES), timeout=120)
    assert run.status == RunStatus.PAUSED, describe(run)
    assert run.status_reason.startswith("health gate: 2 of the last 2 final rollouts (step 1)")
    assert "JUDGE 2" in run.status_reason and run.steps_done == 0
    assert run.checkpoints.filter(step=0).exists()

    dispatch.run_resume(run=run, user=researcher)
    wait_for(
        lambda: RunEvent.objects.filter(run=run, type="run_finished").count() == 2,
        timeout=120,
        what=lambda: describe(run),
    )
    run = wait_for_status(run, (RunStatus.PAUSED, *FINAL_STATUSES), timeout=30)
    assert run.status == RunStatus.PAUSED and run.ray_job_id == f"practicum-{run.uuid}-resume-1"
    messages = [e.payload["message"] for e in RunEvent.objects.filter(run=run, type="log").order_by("seq")]
    assert "resumed from step_000000" in messages
    assert not StepMetric.objects.filter(run=run).exists()  # no update ever ran on the broken signal
    assert_every_event_stored_once(run)
