"""The run list: the runs a persona may read, filters and sort in the URL, pagination, empty states."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.forms import PAGE_SIZE
from tests.runs.factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(researcher, make_user, two_task_set):
    other = make_user("rob_researcher", "researcher")
    return {
        "train": make_run(
            user=researcher, task_set=two_task_set, kind="train", name="Mine, training", latest_reward=0.4
        ),
        "eval": make_run(
            user=researcher,
            task_set=two_task_set,
            kind="eval",
            status="succeeded",
            name="Mine, eval",
            latest_reward=0.9,
        ),
        "other": make_run(user=other, task_set=two_task_set, kind="eval", status="failed", name="Rob's eval"),
    }


def _names(response) -> list[str]:
    return [run.name for run in response.context["page"].object_list]


def test_a_researcher_sees_their_own_runs_with_progress_and_figures(client, researcher, runs):
    client.force_login(researcher)
    response = client.get(reverse("runs:run_list"))
    assert response.status_code == 200
    assert _names(response) == ["Mine, eval", "Mine, training"]
    page = response.content.decode()
    assert 'role="progressbar"' in page and "0.900" in page
    assert 'name="runs"' in page and 'form="compare-form"' in page


def test_a_reviewer_sees_every_run(client, reviewer, runs):
    client.force_login(reviewer)
    assert len(_names(client.get(reverse("runs:run_list")))) == 3


def test_an_expert_sees_the_runs_that_used_their_tasks(client, expert, runs):
    client.force_login(expert)
    assert len(_names(client.get(reverse("runs:run_list")))) == 3  # two_task_set holds the expert's tasks


def test_filters_live_in_the_url(client, reviewer, researcher, runs):
    client.force_login(reviewer)
    assert _names(client.get(reverse("runs:run_list"), {"status": "failed"})) == ["Rob's eval"]
    assert _names(client.get(reverse("runs:run_list"), {"kind": "train"})) == ["Mine, training"]
    task_set = runs["eval"].task_set_id
    assert len(_names(client.get(reverse("runs:run_list"), {"task_set": task_set}))) == 3
    client.force_login(researcher)
    assert _names(client.get(reverse("runs:run_list"), {"mine": "on", "kind": "eval"})) == ["Mine, eval"]


def test_it_sorts_by_reward_with_missing_figures_last(client, reviewer, runs):
    client.force_login(reviewer)
    assert _names(client.get(reverse("runs:run_list"), {"sort": "-reward"})) == [
        "Mine, eval",
        "Mine, training",
        "Rob's eval",
    ]
    assert _names(client.get(reverse("runs:run_list"), {"sort": "reward"})) == [
        "Mine, training",
        "Mine, eval",
        "Rob's eval",
    ]


def test_bad_filters_fall_back_to_the_defaults(client, reviewer, runs):
    client.force_login(reviewer)
    response = client.get(reverse("runs:run_list"), {"status": "nope", "sort": "drop table", "page": "x"})
    assert response.status_code == 200 and len(_names(response)) == 3


def test_it_paginates_on_the_server(client, researcher, two_task_set):
    for index in range(PAGE_SIZE + 3):
        make_run(
            user=researcher, task_set=two_task_set, kind="eval", status="succeeded", name=f"Run {index:02d}"
        )
    client.force_login(researcher)
    first = client.get(reverse("runs:run_list"))
    assert len(_names(first)) == PAGE_SIZE and "Page 1 of 2" in first.content.decode()
    assert len(_names(client.get(reverse("runs:run_list"), {"page": 2}))) == 3


def test_htmx_gets_only_the_results(client, researcher, runs):
    client.force_login(researcher)
    html = client.get(
        reverse("runs:run_list"), {"kind": "eval"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert html.lstrip().startswith('<div id="results">') and "Mine, eval" in html


def test_the_empty_list_says_how_to_start(client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("runs:run_list")).content.decode()
    assert "No runs yet" in page and "preset=eval-oracle" in page


def test_the_empty_list_of_an_expert_says_what_will_appear(client, expert):
    client.force_login(expert)
    page = client.get(reverse("runs:run_list")).content.decode()
    assert "Runs that use your tasks" in page and "Launch a run" not in page
