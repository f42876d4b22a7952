"""The runs REST API: a permission matrix over every route, launch (and its health gate) and cancel,
metrics, rollouts and traces."""

from __future__ import annotations

import pytest
from django.test import Client

from runs.models import Run, RunStatus
from runs.services.ingest import events_ingest
from tests.runs.event_builders import event, rollout_payload, task_of
from tests.runs.factories import make_run
from tests.runs.validation_helpers import checks
from webapp.api_tokens import api_token_create, api_token_revoke

pytestmark = pytest.mark.django_db

LAUNCH_SPEC = {"agent": "oracle"}


@pytest.fixture
def people(expert, researcher, reviewer, admin_user, outsider, make_user):
    return {
        "expert": expert,
        "researcher": researcher,
        "reviewer": reviewer,
        "admin": admin_user,
        "outsider": outsider,
        "other_researcher": make_user("oscar_other", "researcher"),
    }


@pytest.fixture
def run_with_rollouts(launch):
    """The researcher's eval run with 12 rollouts (4 steps × 3 samples; sample 2 is a harness error)."""
    run = launch(max_attempts=1)
    name, content_hash = task_of(run)
    events = [event(run, 1, "run_started")]
    for step in range(4):
        for sample in range(3):
            outcome = ("graded", "failed", "harness_error")[sample]
            payload = rollout_payload(name, content_hash, outcome=outcome, step=step, sample=sample, turns=30)
            events.append(event(run, len(events) + 1, "rollout", payload))
        metrics = {"step": step, "reward_mean": step / 4, "pass_at_1": 0.5, "note": "text is skipped"}
        events.append(event(run, len(events) + 1, "step_metrics", metrics))
    events_ingest(run=run, events=events)
    run.refresh_from_db()
    return run


def _as(user) -> Client:
    """A client that authenticates with the user's personal API token."""
    _, raw = api_token_create(user=user, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


READS = [
    "/api/runs/{run}",
    "/api/runs/{run}/metrics",
    "/api/runs/{run}/rollouts",
    "/api/runs/{run}/rollouts/{rollout}",
]
CAN_READ = {"expert", "researcher", "reviewer", "admin"}


@pytest.mark.parametrize("who", ["expert", "researcher", "reviewer", "admin", "outsider", "other_researcher"])
def test_the_permission_matrix_over_every_route(people, run_with_rollouts, two_task_set, who):
    run, client = run_with_rollouts, _as(people[who])
    rollout = run.rollouts.first()
    for route in READS:
        response = client.get(route.format(run=run.pk, rollout=rollout.pk))
        assert response.status_code == (200 if who in CAN_READ else 404), (route, who)
    listed = client.get("/api/runs").json()
    assert listed["count"] == (1 if who in CAN_READ else 0)

    sees_task_sets = who in {"researcher", "reviewer", "admin", "other_researcher"}
    assert client.get("/api/task-sets").json()["count"] == (1 if sees_task_sets else 0)
    detail = client.get(f"/api/task-sets/{two_task_set.pk}")
    assert detail.status_code == (200 if sees_task_sets else 404)

    launch = client.post(
        "/api/runs",
        {"kind": "eval", "task_set": two_task_set.pk, "split": "eval", "spec": LAUNCH_SPEC},
        content_type="application/json",
    )
    expected_launch = {"researcher": 201, "admin": 201, "other_researcher": 201, "reviewer": 403}
    assert launch.status_code == expected_launch.get(who, 404), who

    cancel = client.post(f"/api/runs/{run.pk}/cancel")
    expected_cancel = {"researcher": 200, "admin": 200, "reviewer": 403, "expert": 403}
    assert cancel.status_code == expected_cancel.get(who, 404), who


def test_anonymous_callers_and_revoked_tokens_are_refused(researcher, run_with_rollouts):
    assert Client().get("/api/runs").status_code == 401
    token, raw = api_token_create(user=researcher, name="laptop")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get(f"/api/runs/{run_with_rollouts.pk}").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    api_token_revoke(token=token, user=researcher)
    assert client.get(f"/api/runs/{run_with_rollouts.pk}").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer prc_made-up").get("/api/runs").status_code == 401


def test_a_session_needs_the_csrf_token_for_writes(researcher, run_with_rollouts):
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    assert client.get(f"/api/runs/{run_with_rollouts.pk}").status_code == 200
    assert client.post(f"/api/runs/{run_with_rollouts.pk}/cancel").status_code == 403
    client.get("/")  # sets the CSRF cookie, as a page load does
    token = client.cookies["csrftoken"].value
    cancelled = client.post(f"/api/runs/{run_with_rollouts.pk}/cancel", HTTP_X_CSRFTOKEN=token)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == RunStatus.CANCELLING


def test_a_launch_answers_the_run_and_an_invalid_spec_every_problem(researcher, two_task_set):
    client = _as(researcher)
    launched = client.post(
        "/api/runs",
        {
            "kind": "eval",
            "task_set": two_task_set.pk,
            "split": "eval",
            "spec": LAUNCH_SPEC,
            "name": "API eval",
        },
        content_type="application/json",
    )
    assert launched.status_code == 201
    body = launched.json()
    assert (body["name"], body["status"], body["launched_by"]) == ("API eval", "queued", researcher.username)
    assert body["spec"]["agent"] == "oracle" and body["rollouts_expected"] == 1

    refused = client.post(
        "/api/runs",
        {
            "kind": "train",
            "task_set": two_task_set.pk,
            "split": "train",
            "spec": {"sampling": {"temperature": -1}, "batch": {"samples_per_prompt": 0}, "typo": 1},
        },
        content_type="application/json",
    )
    assert refused.status_code == 422
    locations = {problem["loc"] for problem in refused.json()["problems"]}
    assert {"sampling.temperature", "batch.samples_per_prompt", "typo"} <= locations


TRAIN_SPEC = {"model": {"builtin": "tiny-llama"}, "max_steps": 2}


@pytest.fixture
def gated_set(two_task_set, researcher, monkeypatch):
    """The two-task set with a member whose latest validation failed and an evaluation with 25% harness
    errors: the health gate refuses a training run on it for two reasons."""
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)
    version = two_task_set.members.select_related("version__task").order_by("pk").first().version
    version.validations.create(
        status="failed",
        trigger="manual",
        requested_by=version.task.owner,
        checks=checks({"oracle_passes": "score 0.50: c1 not met"}),
    )
    make_run(
        user=researcher,
        task_set=two_task_set,
        kind="eval",
        status="succeeded",
        name="Baseline eval",
        harness_error_rate=0.25,
    )
    return two_task_set


def _train(client, task_set, **extra):
    body = {"kind": "train", "task_set": task_set.pk, "split": "train", "spec": TRAIN_SPEC, **extra}
    return client.post("/api/runs", body, content_type="application/json")


def test_a_training_run_the_gate_refuses_answers_409_with_every_reason(gated_set, researcher, admin_user):
    slug = gated_set.members.select_related("version__task").order_by("pk").first().version.task.slug
    for user in (researcher, admin_user):
        refused = _train(_as(user), gated_set)

        assert refused.status_code == 409
        body = refused.json()
        assert body["detail"] == (
            "the health gate refused this training run (2 reasons); fix them, or an admin may launch past "
            "the gate with gate_override_reason"
        )
        first, second = body["reasons"]
        assert first.startswith(f"{slug} v1: its validation failed (") and "score 0.50: c1 not met" in first
        assert (
            "had a harness error rate of 25.0%, above health_gate.max_eval_harness_error_rate 10.0%" in second
        )
    assert not Run.objects.filter(kind="train").exists()


@pytest.mark.parametrize("kind", ["train", "eval"])
def test_only_an_admin_may_give_a_gate_override_reason(gated_set, researcher, kind):
    body = {"kind": kind, "split": kind, "spec": TRAIN_SPEC if kind == "train" else LAUNCH_SPEC}
    refused = _as(researcher).post(
        "/api/runs",
        {**body, "task_set": gated_set.pk, "gate_override_reason": "trust me"},
        content_type="application/json",
    )
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "only admins launch a training run past the health gate; leave gate_override_reason empty"
    )
    assert Run.objects.count() == 1  # the baseline evaluation only


def test_an_admin_launches_past_the_gate_and_the_run_keeps_who_and_why(gated_set, admin_user):
    client = _as(admin_user)
    launched = _train(client, gated_set, gate_override_reason="  c1 is graded by hand; the rest is sound  ")

    assert launched.status_code == 201
    body = launched.json()
    assert (body["kind"], body["status"], body["launched_by"]) == ("train", "queued", "ada_admin")
    assert (body["gate_overridden_by"], body["gate_override_reason"]) == (
        "ada_admin",
        "c1 is graded by hand; the rest is sound",
    )
    run = Run.objects.get(pk=body["id"])
    assert (run.gate_overridden_by, run.gate_override_reason) == (
        admin_user,
        "c1 is graded by hand; the rest is sound",
    )
    assert client.get(f"/api/runs/{run.pk}").json()["gate_overridden_by"] == "ada_admin"


def test_an_admins_reason_is_not_recorded_when_the_gate_lets_the_run_through(
    two_task_set, admin_user, monkeypatch
):
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)
    spec = {**TRAIN_SPEC, "health_gate": {"max_eval_harness_error_rate": None}}
    launched = _as(admin_user).post(
        "/api/runs",
        {
            "kind": "train",
            "task_set": two_task_set.pk,
            "split": "train",
            "spec": spec,
            "gate_override_reason": "just in case",
        },
        content_type="application/json",
    )
    assert launched.status_code == 201
    assert (launched.json()["gate_overridden_by"], launched.json()["gate_override_reason"]) == (None, "")


def test_cancelling_a_finished_run_is_a_conflict(researcher, run_with_rollouts):
    events_ingest(run=run_with_rollouts, events=[event(run_with_rollouts, 100, "run_finished")])
    response = _as(researcher).post(f"/api/runs/{run_with_rollouts.pk}/cancel")
    assert response.status_code == 409 and "already ended" in response.json()["detail"]


def test_a_paused_run_resumes_over_the_api_and_a_running_one_is_a_conflict(
    researcher, run_with_rollouts, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr("runs.tasks.run_dispatch.delay", lambda pk: sent.append(pk))
    client = _as(researcher)
    refused = client.post(f"/api/runs/{run_with_rollouts.pk}/resume")
    assert refused.status_code == 409 and "only a paused run resumes" in refused.json()["detail"]
    type(run_with_rollouts).objects.filter(pk=run_with_rollouts.pk).update(status=RunStatus.PAUSED)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/api/runs/{run_with_rollouts.pk}/resume")
    assert response.status_code == 200 and response.json()["status"] == "queued"
    assert sent == [run_with_rollouts.pk]


def test_metrics_come_as_one_series_per_numeric_metric(reviewer, run_with_rollouts):
    client = _as(reviewer)
    body = client.get(f"/api/runs/{run_with_rollouts.pk}/metrics").json()
    assert body["steps"] == [0, 1, 2, 3]
    assert body["series"] == {"pass_at_1": [0.5] * 4, "reward_mean": [0.0, 0.25, 0.5, 0.75]}
    chosen = client.get(f"/api/runs/{run_with_rollouts.pk}/metrics?names=reward_mean,missing").json()
    assert chosen["series"] == {"reward_mean": [0.0, 0.25, 0.5, 0.75], "missing": [None] * 4}
    assert client.get(f"/api/runs/{run_with_rollouts.pk}/metrics?split=eval").json()["steps"] == []


def test_the_run_list_filters_by_task_set_and_refuses_an_id_no_database_holds(reviewer, run_with_rollouts):
    client = _as(reviewer)
    mine = client.get("/api/runs", {"task_set": run_with_rollouts.task_set_id}).json()
    assert [run["id"] for run in mine["items"]] == [run_with_rollouts.pk]
    for bad in (0, 2**63, 10**30):  # found by schemathesis: 10**30 overflowed the database's integer
        response = client.get("/api/runs", {"task_set": bad})
        assert response.status_code == 422, bad
        assert "task_set" in str(response.json()["detail"])


def test_rollouts_filter_on_their_columns_and_paginate(reviewer, run_with_rollouts):
    client = _as(reviewer)
    url = f"/api/runs/{run_with_rollouts.pk}/rollouts"
    errors = client.get(url, {"outcome": "harness_error"}).json()
    assert errors["count"] == 4 and {r["error_code"] for r in errors["items"]} == {"SANDBOX_START"}
    assert all(r["reward"] is None for r in errors["items"])
    window = client.get(url, {"step_min": 1, "step_max": 2, "passed": "true"}).json()
    assert [(r["step"], r["sample"]) for r in window["items"]] == [(1, 0), (2, 0)]
    page = client.get(url, {"order": "-step", "limit": 5, "offset": 5}).json()
    assert page["count"] == 12 and len(page["items"]) == 5 and page["items"][0]["step"] == 2
    assert client.get(url, {"outcome": "bogus"}).status_code == 422


def test_a_trace_comes_with_a_range_of_its_turns(reviewer, run_with_rollouts):
    rollout = run_with_rollouts.rollouts.get(step=1, sample=0)
    client = _as(reviewer)
    url = f"/api/runs/{run_with_rollouts.pk}/rollouts/{rollout.pk}"
    first = client.get(url).json()
    assert first["turn_count"] == 30 and [t["index"] for t in first["turns"]] == list(range(20))
    assert first["rollout"]["passed"] is True and first["final_answer"] == "120"
    tail = client.get(url, {"turn_start": 25, "turn_count": 10}).json()
    assert [t["index"] for t in tail["turns"]] == list(range(25, 30)) and tail["turn_start"] == 25
    assert client.get(url, {"turn_count": 500}).status_code == 422
    other_run_rollout = f"/api/runs/{run_with_rollouts.pk + 1000}/rollouts/{rollout.pk}"
    assert client.get(other_run_rollout).status_code == 404
