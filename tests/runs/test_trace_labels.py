"""Labels: who may set them, the append-only history, the current label on the rollout, counts on run and task pages."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from runs.models import RolloutLabel
from runs.services.labels import rollout_label_set
from tests.runs.trace_helpers import ingest, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    world.rollouts["a"] = ingest(world.runs["a"], world.versions["q0"], outcome="failed")
    world.rollouts["b"] = ingest(world.runs["b"], world.versions["q0"])
    return world


def test_a_change_of_label_keeps_the_history_and_copies_the_newest_onto_the_rollout(world):
    rollout, reviewer = world.rollouts["a"], world.users["reviewer"]
    rollout_label_set(
        rollout=rollout, user=reviewer, label="grader_wrong", note="120 is right; the grader read 12"
    )
    rollout_label_set(rollout=rollout, user=world.users["researcher"], label="good", note="")
    rollout_label_set(rollout=rollout, user=reviewer, label="", note="unsure now")
    rollout.refresh_from_db()
    assert rollout.label == ""
    history = list(rollout.labels.values_list("label", "author__username", "note"))
    assert history == [
        ("", "remy_reviewer", "unsure now"),
        ("good", "rhea_researcher", ""),
        ("grader_wrong", "remy_reviewer", "120 is right; the grader read 12"),
    ]
    assert all(entry.created_at for entry in rollout.labels.all())


def test_an_unknown_label_is_refused_by_name(world):
    with pytest.raises(ValidationError, match="Unknown label 'wrong'"):
        rollout_label_set(rollout=world.rollouts["a"], user=world.users["reviewer"], label="wrong")
    assert not RolloutLabel.objects.exists()


@pytest.mark.parametrize(
    ("persona", "rollout", "allowed"),
    [
        ("reviewer", "b", True),
        ("admin_user", "b", True),
        ("researcher", "a", True),
        ("researcher", "b", False),
        ("expert", "a", False),
        ("outsider", "a", False),
    ],
)
def test_who_may_label(world, persona, rollout, allowed, request):
    user = world.users.get(persona) or request.getfixturevalue(persona)
    target = world.rollouts[rollout]
    if allowed:
        rollout_label_set(rollout=target, user=user, label="harness_bug")
        target.refresh_from_db()
        assert target.label == "harness_bug"
    else:
        with pytest.raises(PermissionDenied):
            rollout_label_set(rollout=target, user=user, label="harness_bug")


def test_the_viewer_labels_through_htmx_and_shows_the_history(client, world):
    rollout = world.rollouts["a"]
    client.force_login(world.users["reviewer"])
    url = reverse("runs:trace_label", args=[rollout.pk])
    response = client.post(
        url, {"label": "reward_hacking", "note": "wrote the answer file only"}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith(
        '<section class="card labels" id="labels"'
    )
    assert "Reward hacking" in body and "wrote the answer file only" in body and "remy_reviewer" in body
    rollout.refresh_from_db()
    assert rollout.label == "reward_hacking"


def test_without_htmx_labelling_redirects_back_with_the_filter(client, world):
    rollout = world.rollouts["a"]
    client.force_login(world.users["reviewer"])
    response = client.post(
        reverse("runs:trace_label", args=[rollout.pk]),
        {"label": "good", "note": "", "q_return": "outcome=graded"},
    )
    assert response.status_code == 302
    assert response["Location"] == f"/traces/{rollout.pk}/?outcome=graded"


def test_a_bad_label_posted_shows_the_error_and_changes_nothing(client, world):
    client.force_login(world.users["reviewer"])
    url = reverse("runs:trace_label", args=[world.rollouts["a"].pk])
    body = client.post(url, {"label": "nonsense"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Select a valid choice" in body
    assert not RolloutLabel.objects.exists()


def test_an_expert_sees_no_label_form_and_cannot_post_one(client, world):
    client.force_login(world.users["expert"])
    rollout = world.rollouts["a"]
    body = client.get(reverse("runs:trace_detail", args=[rollout.pk])).content.decode()
    assert "Save label" not in body
    assert client.post(reverse("runs:trace_label", args=[rollout.pk]), {"label": "good"}).status_code == 403


def test_label_counts_show_on_the_run_page_and_the_task_page(client, world):
    reviewer = world.users["reviewer"]
    rollout_label_set(rollout=world.rollouts["a"], user=reviewer, label="grader_wrong")
    rollout_label_set(rollout=world.rollouts["b"], user=reviewer, label="grader_wrong")
    client.force_login(reviewer)
    run_page = client.get(reverse("runs:run_detail", args=[world.runs["a"].pk])).content.decode()
    assert "Reviewer labels" in run_page
    assert f"?run={world.runs['a'].pk}&amp;label=grader_wrong" in run_page
    assert "Grader wrong</span> 1" in run_page
    task = world.versions["q0"].task
    task_page = client.get(reverse("tasks_authoring:task_detail", args=[task.pk])).content.decode()
    assert f"?task={task.pk}&amp;label=grader_wrong" in task_page
    assert "Grader wrong</span> 2" in task_page
