"""The traces REST API: rollouts across runs, a trace per turn range, labels, exports, and who may do what."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from rl_engine.trace import RolloutRecord
from runs.models import RolloutLabel, TraceExport
from runs.services.trace_exports import trace_export_run
from tests.runs.trace_helpers import ingest, make_world
from webapp.api_tokens import api_token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    a, b = world.runs["a"], world.runs["b"]
    q0, q1, z = world.versions["q0"], world.versions["q1"], world.versions["z"]
    world.rollouts = {
        "a_pass": ingest(a, q0, text="The revenue grew by a needle amount", turns=6),
        "a_fail": ingest(a, q1, outcome="failed", sample=1),
        "a_harness": ingest(a, q0, outcome="harness_error", sample=2, turns=0),
        "a_other": ingest(a, z, outcome="agent_error"),
        "b_pass": ingest(b, q0, step=3),
    }
    world.users.update(admin=make_user("ada_admin", "admin"), outsider=make_user("otto_outsider"))
    return world


def _as(user) -> Client:
    if user is None:
        return Client()
    _, raw = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def _ids(world, *names: str) -> set[int]:
    return {world.rollouts[name].pk for name in names}


# Rollouts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("reviewer", ("a_pass", "a_fail", "a_harness", "a_other", "b_pass")),
        ("admin", ("a_pass", "a_fail", "a_harness", "a_other", "b_pass")),
        ("researcher", ("a_pass", "a_fail", "a_harness", "a_other")),
        ("other_researcher", ("b_pass",)),
        ("expert", ("a_pass", "a_fail", "a_harness", "b_pass")),
        ("other_expert", ("a_other",)),
    ],
)
def test_the_rollout_list_shows_each_reader_what_the_pages_show(world, who, expected):
    response = _as(world.users[who]).get("/api/rollouts")

    assert response.status_code == 200
    assert {item["id"] for item in response.json()["items"]} == _ids(world, *expected)
    assert response.json()["count"] == len(expected)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("outcome=harness_error", ("a_harness",)),
        ("q=NEEDLE", ("a_pass",)),
        ("passed=false&run={a}", ("a_fail",)),
        ("step_min=1", ("b_pass",)),
        ("version={q1}", ("a_fail",)),
        ("error_code=TURN_BUDGET", ("a_other",)),
    ],
)
def test_the_rollout_list_takes_the_trace_lists_filters(world, reviewer, query, expected):
    query = query.format(a=world.runs["a"].pk, q1=world.versions["q1"].pk)

    response = _as(reviewer).get(f"/api/rollouts?{query}")

    assert response.status_code == 200, response.content
    assert {item["id"] for item in response.json()["items"]} == _ids(world, *expected)


def test_the_rollout_list_walks_keyset_pages_both_ways(world, reviewer):
    client = _as(reviewer)
    query = "sort=-reward&limit=2"
    page = client.get(f"/api/rollouts?{query}").json()
    pages = [page]
    while page["next"]:
        page = client.get(f"/api/rollouts?{query}&after={page['next']}").json()
        pages.append(page)
    seen = [item["id"] for page in pages for item in page["items"]]

    assert len(seen) == len(set(seen)) == 5 and len(pages) == 3
    rewards = [item["reward"] for page in pages for item in page["items"]]
    assert rewards == [1.0, 1.0, 0.0, 0.0, None]
    back = client.get(f"/api/rollouts?{query}&before={pages[-1]['prev']}").json()
    assert [item["id"] for item in back["items"]] == [item["id"] for item in pages[-2]["items"]]


def test_the_rollout_list_refuses_bad_filters_with_their_reason(world, reviewer):
    client = _as(reviewer)

    short = client.get("/api/rollouts?q=ab")
    code = client.get("/api/rollouts?error_code=NOPE")
    cursor = client.get("/api/rollouts?after=garbage")
    bounds = client.get("/api/rollouts?reward_min=1&reward_max=0")

    assert short.status_code == 422 and "q: Search for at least 3 characters" in short.json()["detail"]
    assert code.status_code == 422 and "error_code:" in code.json()["detail"]
    assert cursor.status_code == 422 and "after is not a cursor" in cursor.json()["detail"]
    assert bounds.status_code == 422 and "reward_max" in bounds.json()["detail"]


def test_a_trace_comes_with_a_range_of_turns_and_its_verdicts(world, reviewer):
    rollout = world.rollouts["a_pass"]

    response = _as(reviewer).get(f"/api/rollouts/{rollout.pk}?turn_start=2&turn_count=3")

    data = response.json()
    assert response.status_code == 200
    assert data["rollout"]["id"] == rollout.pk and data["rollout"]["run_id"] == rollout.run_id
    assert data["turn_count"] == 6 and data["turn_start"] == 2
    assert [turn["index"] for turn in data["turns"]] == [2, 3, 4]
    assert data["final_answer"] == "120" and data["rollout"]["label"] == ""


# Labels ------------------------------------------------------------------------------------------


def test_labels_keep_their_history_and_become_the_rollouts_filterable_label(world, reviewer, researcher):
    rollout = world.rollouts["a_harness"]
    url = f"/api/rollouts/{rollout.pk}/labels"

    first = _as(researcher).post(
        url, {"label": "harness_bug", "note": "sandbox"}, content_type="application/json"
    )
    second = _as(reviewer).post(url, {"label": "grader_wrong"}, content_type="application/json")
    history = _as(reviewer).get(url).json()

    assert first.status_code == 201 and first.json()["author"] == researcher.username
    assert second.status_code == 201
    assert [(row["label"], row["note"], row["author"]) for row in history] == [
        ("grader_wrong", "", reviewer.username),
        ("harness_bug", "sandbox", researcher.username),
    ]
    listed = _as(reviewer).get("/api/rollouts?label=grader_wrong").json()["items"]
    assert [item["id"] for item in listed] == [rollout.pk] and listed[0]["label"] == "grader_wrong"


def test_an_unknown_label_is_refused_by_name(world, reviewer):
    rollout = world.rollouts["a_pass"]

    response = _as(reviewer).post(
        f"/api/rollouts/{rollout.pk}/labels", {"label": "meh"}, content_type="application/json"
    )

    assert response.status_code == 422
    assert not RolloutLabel.objects.exists()


LABEL_MATRIX = {
    # who: (read the trace and its labels, set a label) on run A's rollout of another expert's task
    "reviewer": (200, 201),
    "admin": (200, 201),
    "researcher": (200, 201),
    "other_expert": (200, 403),
    "expert": (404, 404),
    "other_researcher": (404, 404),
    "outsider": (404, 404),
    None: (401, 401),
}


@pytest.mark.parametrize("who", list(LABEL_MATRIX))
def test_the_permission_matrix_of_traces_and_labels(world, who):
    client = _as(world.users[who] if who else None)
    rollout = world.rollouts["a_other"]
    read, label = LABEL_MATRIX[who]

    assert client.get(f"/api/rollouts/{rollout.pk}").status_code == read
    assert client.get(f"/api/rollouts/{rollout.pk}/labels").status_code == read
    response = client.post(
        f"/api/rollouts/{rollout.pk}/labels", {"label": "good"}, content_type="application/json"
    )
    assert response.status_code == label
    assert RolloutLabel.objects.filter(rollout=rollout).count() == (1 if label == 201 else 0)
    list_status = client.get("/api/rollouts").status_code
    assert list_status == {None: 401, "outsider": 404}.get(who, 200)


# Exports -----------------------------------------------------------------------------------------


def test_an_export_is_created_polled_and_downloaded(world, reviewer):
    client = _as(reviewer)

    created = client.post(
        "/api/trace-exports",
        {"format": "jsonl", "filters": {"outcome": "graded", "passed": True}},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    data = created.json()
    assert (data["status"], data["download_url"], data["filters"]) == (
        "queued",
        None,
        {"outcome": "graded", "passed": True},
    )
    trace_export_run(export=TraceExport.objects.get(pk=data["id"]))

    status = client.get(f"/api/trace-exports/{data['id']}").json()
    assert (status["status"], status["done"], status["total"]) == ("done", 2, 2)
    download = client.get(status["download_url"])
    assert download.status_code == 200 and download["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in b"".join(download.streaming_content).decode().splitlines()]
    assert {line["rollout_id"] for line in lines} == _ids(world, "a_pass", "b_pass")
    assert all(RolloutRecord.model_validate(line).summary.passed for line in lines)
    assert [row["id"] for row in client.get("/api/trace-exports").json()["items"]] == [data["id"]]


def test_a_bad_export_request_is_refused_with_its_reason(world, reviewer):
    client = _as(reviewer)

    bad_filter = client.post(
        "/api/trace-exports",
        {"format": "atif", "filters": {"outcome": "great"}},
        content_type="application/json",
    )
    bad_format = client.post("/api/trace-exports", {"format": "xml"}, content_type="application/json")

    assert bad_filter.status_code == 422 and "outcome:" in bad_filter.json()["detail"]
    assert bad_format.status_code == 422
    assert not TraceExport.objects.exists()


EXPORT_MATRIX = {"reviewer": 200, "admin": 200, "researcher": 404, "expert": 404, "outsider": 404, None: 401}


@pytest.mark.parametrize("who", list(EXPORT_MATRIX))
def test_only_the_owner_or_an_admin_reads_and_downloads_an_export(world, reviewer, who):
    export = TraceExport.objects.get(
        pk=_as(reviewer)
        .post("/api/trace-exports", {"format": "metrics_csv"}, content_type="application/json")
        .json()["id"]
    )
    trace_export_run(export=export)
    client = _as(world.users[who] if who else None)

    assert client.get(f"/api/trace-exports/{export.pk}").status_code == EXPORT_MATRIX[who]
    assert client.get(f"/api/trace-exports/{export.pk}/download").status_code == EXPORT_MATRIX[who]
    listed = client.get("/api/trace-exports")
    if who in ("reviewer", "admin"):
        assert [row["id"] for row in listed.json()["items"]] == [export.pk]
    elif who in ("researcher", "expert"):
        assert listed.json()["items"] == []
    else:
        assert listed.status_code == EXPORT_MATRIX[who]
