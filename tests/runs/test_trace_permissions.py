"""Who may open the trace pages: reviewers everything, researchers their runs, experts only their own tasks'
rollouts (another team's task in the same run stays hidden), admins everything, outsiders 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.runs.trace_helpers import ingest, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    # "own": the expert's task in the researcher's run; "foreign": another expert's task in the same run;
    # "elsewhere": the expert's task in another researcher's run.
    world.rollouts["own"] = ingest(world.runs["a"], world.versions["q0"], text="own words")
    world.rollouts["foreign"] = ingest(world.runs["a"], world.versions["z"], text="foreign words")
    world.rollouts["elsewhere"] = ingest(world.runs["b"], world.versions["q0"], text="elsewhere words")
    return world


READS = {
    # persona: rollouts they may open
    "reviewer": {"own", "foreign", "elsewhere"},
    "admin_user": {"own", "foreign", "elsewhere"},
    "researcher": {"own", "foreign"},
    "expert": {"own", "elsewhere"},
    "outsider": set(),
}


def login(client, world, persona, request):
    user = world.users.get(persona) or request.getfixturevalue(persona)
    client.force_login(user)
    return user


@pytest.mark.parametrize("persona", list(READS))
def test_the_viewer_opens_exactly_the_readable_traces(client, world, persona, request):
    login(client, world, persona, request)
    for name, rollout in world.rollouts.items():
        for url in (
            reverse("runs:trace_detail", args=[rollout.pk]),
            reverse("runs:trace_turns", args=[rollout.pk]),
        ):
            expected = 200 if name in READS[persona] else 404
            assert client.get(url).status_code == expected, (persona, name, url)


@pytest.mark.parametrize("persona", list(READS))
def test_the_list_shows_exactly_the_readable_traces(client, world, persona, request):
    login(client, world, persona, request)
    response = client.get(reverse("runs:trace_list"), {"q": "words"})
    if persona == "outsider":
        assert response.status_code == 404
        return
    shown = {row.pk for row in response.context["page"].items}
    assert shown == {world.rollouts[name].pk for name in READS[persona]}


@pytest.mark.parametrize(
    ("persona", "status"),
    [("reviewer", 200), ("admin_user", 200), ("researcher", 200), ("expert", 200), ("outsider", 404)],
)
def test_the_harness_pages_follow_the_run_rules(client, world, persona, status, request):
    login(client, world, persona, request)
    assert client.get(reverse("runs:harness_errors")).status_code == status
    assert client.get(reverse("runs:run_harness_errors", args=[world.runs["a"].pk])).status_code == status
    other = client.get(reverse("runs:run_harness_errors", args=[world.runs["b"].pk])).status_code
    assert other == (404 if persona in ("researcher", "outsider") else 200)


@pytest.mark.parametrize(
    ("persona", "rollout", "status"),
    [
        ("reviewer", "elsewhere", 200),
        ("admin_user", "foreign", 200),
        ("researcher", "own", 200),
        ("researcher", "elsewhere", 404),
        ("expert", "own", 403),
        ("expert", "foreign", 404),
        ("outsider", "own", 404),
    ],
)
def test_labelling_follows_the_rules(client, world, persona, rollout, status, request):
    login(client, world, persona, request)
    url = reverse("runs:trace_label", args=[world.rollouts[rollout].pk])
    assert client.post(url, {"label": "good"}, HTTP_HX_REQUEST="true").status_code == status


def test_anonymous_visitors_are_sent_to_log_in(client, world):
    response = client.get(reverse("runs:trace_list"))
    assert response.status_code == 302 and "/login" in response["Location"]
