"""Every view of the runs pages × every persona × method → the status each one must get."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.runs.factories import add_rollout, make_run

pytestmark = pytest.mark.django_db

PERSONAS = ("expert", "researcher", "reviewer", "admin", "outsider")


@pytest.fixture(autouse=True)
def no_dispatch(monkeypatch):
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)


@pytest.fixture
def world(expert, researcher, reviewer, admin_user, outsider, make_user, two_task_set):
    """The researcher's running run on the expert's tasks, and a queued one per cancel check."""
    run = make_run(user=researcher, task_set=two_task_set, kind="eval", status="running")
    second = make_run(user=researcher, task_set=two_task_set, kind="eval", status="succeeded")
    version = two_task_set.members.first().version
    rollout = add_rollout(run, version, split="eval", step=0)
    users = {
        "expert": expert,
        "researcher": researcher,
        "reviewer": reviewer,
        "admin": admin_user,
        "outsider": outsider,
    }
    return {"run": run, "second": second, "rollout": rollout, "task_set": two_task_set, "users": users}


def _url(world, name: str) -> str:
    run = world["run"]
    return {
        "list": reverse("runs:run_list"),
        "new": reverse("runs:run_new"),
        "preview": reverse("runs:run_new_preview"),
        "compare": reverse("runs:run_compare") + f"?runs={run.pk},{world['second'].pk}",
        "detail": reverse("runs:run_detail", args=[run.pk]),
        "cancel": reverse("runs:run_cancel", args=[run.pk]),
        "logs": reverse("runs:run_driver_logs", args=[run.pk]),
        "rollout": reverse("runs:rollout_detail", args=[run.pk, world["rollout"].pk]),
    }[name]


# (url name, method, expected status for expert, researcher, reviewer, admin, outsider)
MATRIX = [
    ("list", "get", (200, 200, 200, 200, 404)),
    ("new", "get", (404, 200, 404, 200, 404)),
    ("new", "post", (404, 400, 404, 400, 404)),
    ("preview", "post", (404, 200, 404, 200, 404)),
    ("compare", "get", (200, 200, 200, 200, 404)),
    ("detail", "get", (200, 200, 200, 200, 404)),
    ("logs", "get", (200, 200, 200, 200, 404)),
    ("rollout", "get", (302, 302, 302, 302, 404)),  # into the trace viewer
    ("cancel", "post", (403, 302, 403, 302, 404)),
]

CASES = [
    pytest.param(name, method, persona, expected[index], id=f"{method}-{name}-{persona}")
    for name, method, expected in MATRIX
    for index, persona in enumerate(PERSONAS)
]


@pytest.mark.parametrize(("name", "method", "persona", "expected"), CASES)
def test_each_persona_gets_the_expected_status(client, world, name, method, persona, expected):
    client.force_login(world["users"][persona])
    url = _url(world, name)
    response = client.post(url, {}) if method == "post" else client.get(url)
    assert response.status_code == expected


@pytest.mark.parametrize(("name", "method"), [(n, m) for n, m, _ in MATRIX], ids=lambda v: str(v))
def test_an_anonymous_visitor_is_sent_to_the_login_page(client, world, name, method):
    url = _url(world, name)
    response = client.post(url, {}) if method == "post" else client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_a_researcher_cannot_open_another_researchers_run(client, world, make_user):
    client.force_login(make_user("rob_researcher", "researcher"))
    for name in ("detail", "logs", "rollout", "compare"):
        assert client.get(_url(world, name)).status_code == 404
    assert client.post(_url(world, "cancel")).status_code == 404


def test_an_expert_without_tasks_in_the_run_cannot_open_it(client, world, make_user):
    client.force_login(make_user("ed_expert", "expert"))
    assert client.get(_url(world, "detail")).status_code == 404


def test_every_url_of_the_dashboards_is_in_the_matrix():
    """Every route served by the dashboard views (the trace views have their own matrix)."""
    from runs.urls import urlpatterns

    modules = {"runs.views.lists", "runs.views.launch", "runs.views.pages", "runs.views.compare"}
    served = {pattern.name for pattern in urlpatterns if pattern.callback.__module__ in modules}
    covered = {
        "run_list", "run_new", "run_new_preview", "run_compare", "run_detail", "run_cancel",
        "run_driver_logs", "rollout_detail",
    }  # fmt: skip
    assert served == covered


def test_cancel_without_a_csrf_token_is_refused(world):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(world["users"]["researcher"])
    assert client.post(_url(world, "cancel")).status_code == 403
    world["run"].refresh_from_db()
    assert world["run"].status == "running"
