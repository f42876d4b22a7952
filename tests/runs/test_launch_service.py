"""run_launch, launch_preview and run_cancel: what is stored, what is refused, and who may do it."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from runs.models import Run, RunStatus, RunTaskVersion
from runs.services.launch import RunLaunchError, RunSpecInvalid, launch_preview, run_cancel, run_launch
from tasks_authoring.services.task_sets import task_set_create
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db

EVAL_ORACLE = {"agent": "oracle", "evaluation": {"samples_per_task": 2}}
TRAIN_TINY = {
    "model": {"builtin": "tiny-llama"},
    "max_steps": 3,
    "batch": {"prompts_per_step": 2, "samples_per_prompt": 4},
    "evaluation": {"every_steps": 2, "samples_per_task": 1},
    "health_gate": {
        "max_eval_harness_error_rate": None
    },  # these tests are not about the health gate (tests/runs/test_launch_gate.py)
}


@pytest.fixture
def task_set(expert, reviewer, researcher):
    versions = [approve(draft_with_rubric(expert, title=f"Question {i}"), expert, reviewer) for i in range(4)]
    return task_set_create(
        owner=researcher, name="Four questions", versions=versions, eval_fraction=0.5, seed=7
    )


@pytest.fixture
def no_dispatch(monkeypatch):
    """Keep the enqueued dispatch in a list: these tests are about the launch, not about Ray."""
    sent = []
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: sent.append((name, pk)))
    return sent


def test_it_stores_the_validated_spec_and_the_exact_task_versions(
    task_set, researcher, no_dispatch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        run = run_launch(user=researcher, kind="eval", task_set=task_set, split="eval", spec=EVAL_ORACLE)
    assert run.status == RunStatus.QUEUED
    assert run.spec["kind"] == "eval" and run.spec["tasks"]["eval_dir"] == "tasks/eval"
    assert run.spec["evaluation"]["samples_per_task"] == 2
    eval_members = task_set.members.filter(split="eval")
    used = RunTaskVersion.objects.filter(run=run)
    assert {u.version_id for u in used} == {m.version_id for m in eval_members}
    assert all(
        u.content_hash == u.version.content_hash and u.bundle_name.startswith("practicum/") for u in used
    )
    assert run.rollouts_expected == 2 * eval_members.count()
    assert no_dispatch == [("run_dispatch", run.pk)]


def test_a_training_run_counts_steps_and_rollouts_with_its_evaluations(task_set, researcher, no_dispatch):
    preview = launch_preview(kind="train", task_set=task_set, split="train", spec=TRAIN_TINY)
    assert (preview.train_tasks, preview.eval_tasks, preview.steps) == (2, 2, 3)
    # 3 steps × 2 prompts × 4 samples, plus evaluations at the start and after step 2 on 2 eval tasks.
    assert preview.rollouts == 3 * 2 * 4 + 2 * 2
    run = run_launch(user=researcher, kind="train", task_set=task_set, split="train", spec=TRAIN_TINY)
    assert run.steps_total == 3 and run.rollouts_expected == preview.rollouts
    assert (run.spec["tasks"]["train_dir"], run.spec["tasks"]["eval_dir"]) == ("tasks/train", "tasks/eval")


def test_it_lists_every_problem_of_an_invalid_spec_and_stores_nothing(task_set, researcher, no_dispatch):
    bad = {
        "model": {"builtin": "tiny-llama"},
        "batch": {"samples_per_prompt": 1, "mini_batches": 3},
        "sampling": {"temperature": -1},
    }
    with pytest.raises(RunSpecInvalid) as refused:
        run_launch(user=researcher, kind="train", task_set=task_set, split="train", spec=bad)
    locations = {problem.loc for problem in refused.value.problems}
    assert {"sampling.temperature", "batch.samples_per_prompt"} <= locations
    assert Run.objects.count() == 0 and no_dispatch == []


def test_it_refuses_a_split_without_tasks(expert, reviewer, researcher, no_dispatch):
    only = approve(draft_with_rubric(expert), expert, reviewer)
    single = task_set_create(owner=researcher, name="One", versions=[only], eval_fraction=0.0)
    with pytest.raises(RunSpecInvalid, match="no tasks in the eval split"):
        run_launch(user=researcher, kind="eval", task_set=single, split="eval", spec=EVAL_ORACLE)
    run = run_launch(user=researcher, kind="eval", task_set=single, split="all", spec=EVAL_ORACLE)
    assert run.task_versions.count() == 1


def test_it_refuses_an_unknown_kind_by_name(task_set, researcher, no_dispatch):
    with pytest.raises(RunLaunchError, match="unknown run kind 'sweep'"):
        run_launch(user=researcher, kind="sweep", task_set=task_set, split="eval", spec=EVAL_ORACLE)


@pytest.mark.parametrize("persona", ["expert", "reviewer", "outsider"])
def test_only_researchers_launch(task_set, persona, request, no_dispatch):
    with pytest.raises(PermissionDenied):
        run_launch(
            user=request.getfixturevalue(persona),
            kind="eval",
            task_set=task_set,
            split="eval",
            spec=EVAL_ORACLE,
        )


def test_cancelling_a_queued_run_ends_it_at_once(task_set, researcher, no_dispatch):
    run = run_launch(user=researcher, kind="eval", task_set=task_set, split="eval", spec=EVAL_ORACLE)
    run = run_cancel(run=run, user=researcher)
    assert run.status == RunStatus.CANCELLED and "before it started" in run.status_reason
    with pytest.raises(RunLaunchError, match="already ended"):
        run_cancel(run=run, user=researcher)


def test_cancelling_a_submitted_run_asks_the_dispatcher_to_stop_it(
    task_set, researcher, no_dispatch, django_capture_on_commit_callbacks
):
    run = run_launch(user=researcher, kind="eval", task_set=task_set, split="eval", spec=EVAL_ORACLE)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, ray_job_id="practicum-x")
    run.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        run = run_cancel(run=run, user=researcher)
    assert run.status == RunStatus.CANCELLING and run.cancel_requested_at is not None
    assert ("run_stop", run.pk) in no_dispatch


def test_only_the_launcher_or_an_admin_cancels(task_set, researcher, make_user, admin_user, no_dispatch):
    run = run_launch(user=researcher, kind="eval", task_set=task_set, split="eval", spec=EVAL_ORACLE)
    colleague = make_user("cole_colleague", "researcher")
    with pytest.raises(PermissionDenied):
        run_cancel(run=run, user=colleague)
    assert run_cancel(run=run, user=admin_user).status == RunStatus.CANCELLED
