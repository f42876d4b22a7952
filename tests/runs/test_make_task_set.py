"""Make a task set from a filtered trace list: the task versions those rollouts ran, for researchers."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.services.task_sets_from_traces import task_set_from_rollouts
from runs.services.trace_exports import TraceExportError
from tasks_authoring import services as authoring
from tasks_authoring.errors import AuthoringError, NotAllowed
from tasks_authoring.models import TaskSet
from tasks_authoring.services.task_sets import task_set_create
from tests.runs.factories import make_run
from tests.runs.trace_helpers import ingest, make_world
from tests.runs.validation_helpers import validation_finished

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    a, b = world.runs["a"], world.runs["b"]
    q0, q1, z = world.versions["q0"], world.versions["q1"], world.versions["z"]
    world.rollouts = {
        "a_q0": ingest(a, q0),
        "a_q1_harness": ingest(a, q1, outcome="harness_error", turns=0),
        "a_z_harness": ingest(a, z, outcome="harness_error", turns=0, sample=1),
        "b_q0_harness": ingest(b, q0, outcome="harness_error", turns=0),
    }
    return world


def _members(task_set: TaskSet) -> dict[str, int]:
    return {m.version.task.slug: m.version.number for m in task_set.members.select_related("version__task")}


def test_it_makes_a_set_of_the_task_versions_the_filtered_rollouts_ran(world, researcher):
    task_set = task_set_from_rollouts(
        user=researcher,
        filters={"outcome": "harness_error"},
        name="Harness-hit tasks",
        eval_fraction=0.5,
        seed=3,
    )

    q1, z = world.versions["q1"], world.versions["z"]
    assert set(task_set.members.values_list("version_id", flat=True)) == {q1.pk, z.pk}
    assert sorted(task_set.members.values_list("split", flat=True)) == ["eval", "train"]
    assert (task_set.owner, task_set.eval_fraction, task_set.seed) == (researcher, 0.5, 3)
    assert task_set.description == "Made from the trace list (outcome harness_error)."


def test_a_researcher_gets_only_the_tasks_of_rollouts_they_can_read(world, make_user):
    other = world.users["other_researcher"]

    task_set = task_set_from_rollouts(user=other, filters={"outcome": "harness_error"}, name="Run B's")

    assert set(task_set.members.values_list("version_id", flat=True)) == {world.versions["q0"].pk}


def test_the_newest_version_a_task_ran_is_taken(world, expert, researcher, reviewer):
    q0 = world.versions["q0"]
    draft = authoring.task_version_new_draft(task=q0.task, user=expert)
    authoring.task_version_update(version=draft, user=expert, instruction="What was Q4 revenue?")
    authoring.task_version_submit(version=draft, user=expert)
    validation_finished(draft)
    authoring.review_decide(version=draft, reviewer=reviewer, decision="approve")
    draft.refresh_from_db()
    second = task_set_create(owner=researcher, name="Second", versions=[draft], eval_fraction=0, seed=1)
    run = make_run(user=researcher, task_set=second, kind="eval", status="succeeded", name="Run C")
    ingest(run, draft)

    task_set = task_set_from_rollouts(user=researcher, filters={"task": q0.task_id}, name="Q0 latest")

    assert _members(task_set) == {q0.task.slug: 2}


def test_it_refuses_non_researchers_an_empty_list_and_bad_filters(world, reviewer, researcher):
    with pytest.raises(NotAllowed):
        task_set_from_rollouts(user=reviewer, filters={}, name="Nope")
    with pytest.raises(AuthoringError, match="no rollout in this list ran a task version"):
        task_set_from_rollouts(user=researcher, filters={"step_min": 99}, name="Empty")
    with pytest.raises(TraceExportError, match="outcome: "):
        task_set_from_rollouts(user=researcher, filters={"outcome": "great"}, name="Bad")
    assert not TaskSet.objects.filter(name__in=["Nope", "Empty", "Bad"]).exists()


def test_the_page_lists_the_tasks_and_creates_the_set(world, client, researcher):
    client.force_login(researcher)
    url = reverse("runs:trace_task_set_new") + "?outcome=harness_error"

    page = client.get(url)
    assert page.status_code == 200
    assert world.versions["q1"].task.title.encode() in page.content
    assert world.versions["z"].task.title.encode() in page.content
    assert world.versions["q0"].task.title.encode() not in page.content  # a_q0 passed; b is not theirs

    response = client.post(url, {"name": "From the harness errors", "eval_fraction": "0"})
    task_set = TaskSet.objects.get(name="From the harness errors")
    assert response.status_code == 302
    assert response["Location"] == reverse("tasks_authoring:task_set_detail", args=[task_set.pk])
    assert task_set.members.count() == 2 and set(task_set.members.values_list("split", flat=True)) == {
        "train"
    }

    again = client.post(url, {"name": "From the harness errors", "eval_fraction": "0.2"})
    assert again.status_code == 200 and b"already exists" in again.content


@pytest.mark.parametrize("who", ["reviewer", "expert", "outsider"])
def test_only_researchers_open_the_page(world, client, who, request):
    client.force_login(request.getfixturevalue(who))

    assert client.get(reverse("runs:trace_task_set_new")).status_code == 404
    assert (
        client.post(reverse("runs:trace_task_set_new"), {"name": "x", "eval_fraction": "0"}).status_code
        == 404
    )
    assert not TaskSet.objects.filter(name="x").exists()
