"""runs.demo: the toy task set goes through import and review once; the demo runs are launched once."""

from __future__ import annotations

import pytest

from runs.demo import DEMO_EVAL_RUN, DEMO_TRAIN_RUN, TOY_TASK_SET, demo_runs_ensure, toy_task_set_ensure
from runs.models import Run, RunStatus
from tasks_authoring.demo import DEMO_TASK_SET
from tasks_authoring.models import VersionState
from tasks_authoring.services.task_sets import task_set_create

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

    assert [run.name for run in launched] == [DEMO_EVAL_RUN, DEMO_TRAIN_RUN]
    evaluation, training = launched
    assert (evaluation.kind, evaluation.spec["agent"], evaluation.split) == ("eval", "oracle", "all")
    assert evaluation.spec["judge"]["base_url"] == "http://127.0.0.1:9999/v1"
    assert (training.kind, training.task_set.name, training.steps_total) == ("train", TOY_TASK_SET, 12)
    assert {run.status for run in launched} == {RunStatus.QUEUED}
    assert enqueued == [("run_dispatch", evaluation.pk), ("run_dispatch", training.pk)]
    assert demo_runs_ensure(researcher=users["researcher"]) == []
    assert Run.objects.exclude(kind="validate").count() == 2
