"""runs.services.dispatch called directly: the job folder, idempotent submission, cancel before submit, the
reconciler's verdicts on lost and unreachable jobs, the log tail, and the validate kind on a real Ray head."""

from __future__ import annotations

import json
import time
import tomllib

import pytest

from runs import ray_jobs
from runs.models import Rollout, RunStatus
from runs.services import dispatch
from runs.services.launch import run_cancel, run_launch
from webapp.testing.services import free_port

from .run_helpers import describe, toy_task_set, wait_for

pytestmark = [pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture(autouse=True)
def no_celery(monkeypatch):
    """These tests call the dispatcher themselves."""
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)


@pytest.fixture
def toy_set(expert, reviewer, researcher):
    users = {"expert": expert, "reviewer": reviewer, "researcher": researcher}
    return toy_task_set(users, "Toy pair", ["grass", "leaf"])


@pytest.fixture
def ray_settings(settings, live_ray_head, live_server):
    settings.RAY_ADDRESS = live_ray_head
    settings.PRACTICUM_PUBLIC_URL = live_server.url
    return settings


def launch(researcher, task_set, kind="eval", **spec):
    spec = {"agent": "oracle", **spec} if kind == "eval" else spec
    return run_launch(user=researcher, kind=kind, task_set=task_set, split="all", spec=spec)


def reconcile_until_final(run, *, timeout: float):
    def ended() -> bool:
        dispatch.runs_reconcile()
        run.refresh_from_db()
        return not run.is_active

    wait_for(ended, timeout=timeout, what=lambda: describe(run))
    return run


def test_the_job_folder_holds_each_version_by_split_and_the_spec(researcher, toy_set):
    train_set = run_launch(
        user=researcher,
        kind="train",
        task_set=toy_set,
        split="train",
        spec={
            "model": {"builtin": "tiny-llama"},
            "batch": {"prompts_per_step": 1, "samples_per_prompt": 2},
            "health_gate": {"max_eval_harness_error_rate": None},
        },
    )

    job = dispatch.run_job_export(run=train_set)

    assert sorted(p.relative_to(job).as_posix() for p in job.glob("tasks/*/*")) == [
        "tasks/eval/colour-of-grass",
        "tasks/train/colour-of-leaf",
    ]
    for use in train_set.task_versions.select_related("version__task"):
        toml = tomllib.loads((job / "tasks" / use.split / use.version.task.slug / "task.toml").read_text())
        assert toml["practicum"]["content_hash"] == use.content_hash
    assert json.loads((job / "spec.json").read_text()) == train_set.spec
    assert (train_set.spec["tasks"]["train_dir"], train_set.spec["tasks"]["eval_dir"]) == (
        "tasks/train",
        "tasks/eval",
    )


def test_submitting_twice_makes_one_ray_job_and_the_reconciler_sees_it_succeed(
    ray_settings, researcher, toy_set
):
    run = launch(researcher, toy_set)

    dispatch.run_submit(run=run)
    dispatch.run_submit(run=run)

    run.refresh_from_db()
    assert run.status in (RunStatus.STARTING, RunStatus.RUNNING)
    assert (run.ray_job_id, run.ray_address) == (f"practicum-{run.uuid}", ray_settings.RAY_ADDRESS)
    from ray.job_submission import JobSubmissionClient

    jobs = [j for j in JobSubmissionClient(run.ray_address).list_jobs() if j.submission_id == run.ray_job_id]
    assert len(jobs) == 1
    assert (
        f"--events-url {ray_settings.PRACTICUM_PUBLIC_URL}/api/runs/{run.uuid}/events" in jobs[0].entrypoint
    )
    run = reconcile_until_final(run, timeout=90)
    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert f"run {run.uuid}" in dispatch.run_logs_tail(run=run)


def test_a_run_cancelled_while_queued_is_never_submitted(ray_settings, researcher, toy_set):
    run = launch(researcher, toy_set)
    run_cancel(run=run, user=researcher)

    dispatch.run_submit(run=run)

    run.refresh_from_db()
    assert (run.status, run.ray_job_id) == (RunStatus.CANCELLED, "")
    assert ray_jobs.job_info(ray_settings.RAY_ADDRESS, f"practicum-{run.uuid}") is None


def test_a_submission_to_an_unreachable_cluster_fails_the_run_with_the_reason(settings, researcher, toy_set):
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"
    settings.RAY_SUBMIT_PATIENCE_SECONDS = 3  # asked again once, then given up
    run = launch(researcher, toy_set)

    run = dispatch.run_submit(run=run)

    assert run.status == RunStatus.FAILED
    assert f"could not submit the run to Ray at {settings.RAY_ADDRESS}" in run.status_reason


def test_a_run_without_a_ray_address_fails_naming_the_setting(settings, researcher, toy_set):
    settings.RAY_ADDRESS = ""

    run = dispatch.run_submit(run=launch(researcher, toy_set))

    assert run.status == RunStatus.FAILED
    assert "RAY_ADDRESS is not set" in run.status_reason


@pytest.mark.parametrize("reachable", [True, False], ids=["unknown-job", "unreachable-cluster"])
def test_a_run_that_ray_lost_is_failed_once_the_grace_has_passed(
    settings, live_ray_head, researcher, toy_set, reachable
):
    settings.RUN_LOST_AFTER_SECONDS = 1
    run = launch(researcher, toy_set)
    address = live_ray_head if reachable else f"http://127.0.0.1:{free_port()}"
    type(run).objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, ray_job_id=f"practicum-{run.uuid}", ray_address=address
    )

    dispatch.runs_reconcile()
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # within the grace: maybe a blip
    time.sleep(1.2)
    dispatch.runs_reconcile()

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    expected = "does not know the job" if reachable else "did not answer"
    assert expected in run.status_reason
    assert "logs are unavailable" in dispatch.run_logs_tail(run=run)


def test_the_log_tail_says_when_the_run_was_never_submitted(researcher, toy_set):
    assert dispatch.run_logs_tail(run=launch(researcher, toy_set)) == (
        "No logs yet: the run has not been submitted to Ray."
    )


def test_a_validation_run_passes_each_task_with_the_oracle_and_fails_it_with_null(
    ray_settings, researcher, toy_set
):
    run = run_launch(user=researcher, kind="validate", task_set=toy_set, split="all", spec={})
    dispatch.run_submit(run=run)

    run = reconcile_until_final(run, timeout=90)

    assert run.status == RunStatus.SUCCEEDED, describe(run)
    by_policy = {
        policy: sorted(Rollout.objects.filter(run=run, policy=policy).values_list("passed", flat=True))
        for policy in ("oracle", "null")
    }
    assert by_policy == {"oracle": [True, True], "null": [False, False]}
    summary = run.step_metrics.get(split="eval", step=0).metrics
    assert summary["kind"] == "validate" and summary["findings"] == []


def test_a_job_folder_too_big_to_upload_runs_in_place_from_runs_dir(
    ray_settings, researcher, toy_set, monkeypatch
):
    monkeypatch.setattr(dispatch, "UPLOAD_MAX_BYTES", 0)
    run = launch(researcher, toy_set)

    dispatch.run_submit(run=run)

    run = reconcile_until_final(run, timeout=90)
    assert run.status == RunStatus.SUCCEEDED, describe(run)
    assert f"cd {dispatch.run_folder(run) / 'job'} && " in dispatch.run_logs_tail(run=run)


def test_a_cancel_whose_job_ray_never_got_ends_the_run_at_once(live_ray_head, researcher, toy_set):
    run = launch(researcher, toy_set)
    type(run).objects.filter(pk=run.pk).update(
        status=RunStatus.STARTING, ray_job_id=f"practicum-{run.uuid}", ray_address=live_ray_head
    )
    run_cancel(run=run, user=researcher)

    dispatch.runs_reconcile()

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.status_reason == "cancel requested by rhea_researcher"


def test_a_head_that_is_still_starting_is_asked_again(settings, researcher, toy_set, monkeypatch):
    """A fresh Ray head answers 500 "No available agent to submit job" for a few seconds."""
    settings.RAY_ADDRESS = "http://127.0.0.1:8265"
    settings.RAY_SUBMIT_PATIENCE_SECONDS = 10
    answers = [ray_jobs.RayUnavailable("No available agent to submit job, please try again later.")]
    submitted = []

    def submit(address, **job):
        if answers:
            raise answers.pop()
        submitted.append(job["submission_id"])
        return True

    monkeypatch.setattr(ray_jobs, "job_submit", submit)
    monkeypatch.setattr(ray_jobs, "job_info", lambda address, job_id: None)
    monkeypatch.setattr(dispatch, "SUBMIT_RETRY_SECONDS", 0.01)
    run = dispatch.run_submit(run=launch(researcher, toy_set))
    assert run.status == RunStatus.STARTING and submitted == [run.ray_job_id]
