"""runs.demo: the toy task set goes through import and review once; the demo runs are launched once; the
fault drill's harness errors are found in the trace list and keep its set from being trained on."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.demo import (
    DEMO_EVAL_RUN,
    DEMO_TRAIN_RUN,
    DRILL_EVAL_RUN,
    DRILL_TASK_SET,
    TOY_TASK_SET,
    demo_runs_ensure,
    toy_task_set_ensure,
)
from runs.models import Run, RunStatus
from runs.services.launch import RunGateRefused, run_launch
from tasks_authoring.demo import DEMO_TASK_SET
from tasks_authoring.models import TaskSet, VersionState
from tasks_authoring.services.task_sets import task_set_create
from tests.runs.factories import add_rollout
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db


@pytest.fixture
def users(expert, reviewer, researcher):
    return {"expert": expert, "reviewer": reviewer, "researcher": researcher}


@pytest.fixture
def enqueued(monkeypatch):
    calls = []
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: calls.append((name, pk)))
    return calls


def test_the_toy_set_holds_six_approved_tasks_split_four_and_two_and_is_made_once(users):
    toy = toy_task_set_ensure(**users)

    assert toy_task_set_ensure(**users) == toy
    members = list(toy.members.select_related("version__task"))
    assert sorted(m.version.task.slug for m in members) == [
        "colour-of-frog",
        "colour-of-grass",
        "colour-of-leaf",
        "colour-of-lime",
        "colour-of-moss",
        "colour-of-pea",
    ]
    assert {m.version.state for m in members} == {VersionState.APPROVED}
    assert sorted(m.split for m in members) == ["eval", "eval", "train", "train", "train", "train"]
    assert {m.version.task.owner for m in members} == {users["expert"]}


def test_the_demo_runs_are_launched_once_with_the_oracle_and_the_judge(
    users, enqueued, django_capture_on_commit_callbacks
):
    toy = toy_task_set_ensure(**users)
    task_set_create(
        owner=users["researcher"], name=DEMO_TASK_SET, versions=[m.version for m in toy.members.all()]
    )

    with django_capture_on_commit_callbacks(execute=True):
        launched = demo_runs_ensure(researcher=users["researcher"], judge_url="http://127.0.0.1:9999/v1")

    assert [run.name for run in launched] == [DEMO_EVAL_RUN, DEMO_TRAIN_RUN, DRILL_EVAL_RUN]
    evaluation, training, _drill = launched
    assert (evaluation.kind, evaluation.spec["agent"], evaluation.split) == ("eval", "oracle", "all")
    assert evaluation.spec["judge"]["base_url"] == "http://127.0.0.1:9999/v1"
    assert (training.kind, training.task_set.name, training.steps_total) == ("train", TOY_TASK_SET, 12)
    assert {run.status for run in launched} == {RunStatus.QUEUED}
    assert enqueued == [("run_dispatch", run.pk) for run in launched]
    assert demo_runs_ensure(researcher=users["researcher"]) == []
    assert Run.objects.exclude(kind="validate").count() == 3


@pytest.fixture
def demo_sets(users):
    """The toy set and a knowledge-work set whose tasks, like the demo's, enable every tool."""
    toy = toy_task_set_ensure(**users)
    expert, reviewer = users["expert"], users["reviewer"]
    versions = [approve(draft_with_rubric(expert, title=f"Memo {i}"), expert, reviewer) for i in range(2)]
    knowledge = task_set_create(
        owner=users["researcher"], name=DEMO_TASK_SET, versions=versions, eval_fraction=0.5, seed=3
    )
    return knowledge, toy


def _eval_versions(task_set: TaskSet) -> set:
    return {member.version for member in task_set.members.filter(split="eval")}


def test_the_drill_runs_the_oracle_with_read_pdf_hidden_on_both_sets_eval_splits_once(
    users, demo_sets, enqueued
):
    knowledge, toy = demo_sets

    launched = demo_runs_ensure(researcher=users["researcher"])

    drill = launched[-1]
    assert (drill.name, drill.kind, drill.split, drill.task_set.name) == (
        DRILL_EVAL_RUN,
        "eval",
        "all",
        DRILL_TASK_SET,
    )
    assert (drill.spec["agent"], drill.spec["faults"]) == ("oracle", ["hide:read_pdf"])
    drill_versions = {member.version for member in drill.task_set.members.all()}
    assert drill_versions == _eval_versions(knowledge) | _eval_versions(toy)
    enables_pdf = {version.tools is None or "read_pdf" in version.tools for version in drill_versions}
    assert enables_pdf == {True, False}  # the fault breaks some of the drill's tasks, not all
    assert demo_runs_ensure(researcher=users["researcher"]) == []
    assert TaskSet.objects.filter(name=DRILL_TASK_SET).count() == 1
    assert Run.objects.filter(name=DRILL_EVAL_RUN).count() == 1


def test_a_reviewer_finds_the_drills_harness_errors_and_training_on_its_set_is_refused(
    users, demo_sets, enqueued, client
):
    drill = demo_runs_ensure(researcher=users["researcher"])[-1]
    # The drill as ingestion leaves it: the tasks that enable read_pdf failed at sandbox start.
    for member in drill.task_set.members.select_related("version"):
        if member.version.tools is None:
            add_rollout(drill, member.version, outcome="harness_error", code="SANDBOX_START", split="eval")
        else:
            add_rollout(drill, member.version, split="eval")
    Run.objects.filter(pk=drill.pk).update(
        status=RunStatus.SUCCEEDED, finished_at=timezone.now(), harness_error_rate=0.5
    )

    client.force_login(users["reviewer"])
    page = client.get(
        reverse("runs:trace_list"),
        {"run": drill.pk, "outcome": "harness_error", "error_code": "SANDBOX_START"},
    )
    assert page.status_code == 200
    rows = re.findall(r'<td><a href="/traces/(\d+)/', page.content.decode())
    harness_errors = drill.rollouts.filter(outcome="harness_error")
    assert [int(pk) for pk in rows] == [rollout.pk for rollout in harness_errors] and len(rows) == 1
    assert "hide:read_pdf" in client.get(reverse("runs:run_detail", args=[drill.pk])).content.decode()

    with pytest.raises(RunGateRefused) as refused:
        run_launch(
            user=users["researcher"],
            kind="train",
            task_set=drill.task_set,
            split="train",
            spec={"model": {"builtin": "tiny-llama"}, "max_steps": 2},
        )
    assert refused.value.reasons == [
        f"the latest evaluation of {DRILL_TASK_SET} (run #{drill.pk}, {drill.name}) had a harness error rate "
        "of 50.0%, above health_gate.max_eval_harness_error_rate 10.0%"
    ]
