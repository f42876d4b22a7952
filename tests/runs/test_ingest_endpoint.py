"""POST /api/runs/<uuid>/events: the run's ingest token, unknown runs, bad bodies, and the answer's counts."""

from __future__ import annotations

import json
import uuid

import pytest

from runs.models import RunEvent
from runs.tokens import run_ingest_token
from tests.runs.event_builders import event, rollout_payload, task_of

pytestmark = pytest.mark.django_db


def _post(client, run_uuid, body, token: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(f"/api/runs/{run_uuid}/events", data=data, content_type="application/json", **headers)


def test_it_stores_a_batch_and_answers_the_counts(client, launch):
    run = launch()
    name, content_hash = task_of(run)
    events = [
        event(run, 1, "run_started"),
        event(run, 2, "rollout", rollout_payload(name, content_hash)),
        "junk",
    ]
    response = _post(client, run.uuid, {"run_id": str(run.uuid), "events": events}, run_ingest_token(run))
    assert response.status_code == 200
    assert response.json() == {
        "accepted": 2,
        "duplicates": 0,
        "rejected": [{"index": 2, "reason": "an event must be a JSON object, got str"}],
    }
    again = _post(client, run.uuid, {"run_id": str(run.uuid), "events": events[:2]}, run_ingest_token(run))
    assert again.json() == {"accepted": 0, "duplicates": 2, "rejected": []}


@pytest.mark.parametrize("token", [None, "", "wrong", "use-the-other-runs"])
def test_it_refuses_a_missing_or_wrong_token_and_stores_nothing(client, launch, token):
    run, other = launch(), launch()
    if token == "use-the-other-runs":
        token = run_ingest_token(other)
    response = _post(client, run.uuid, {"run_id": str(run.uuid), "events": [event(run, 1, "log")]}, token)
    assert response.status_code == 401
    assert not RunEvent.objects.exists()


def test_an_unknown_run_is_not_found(client, launch):
    run = launch()
    unknown = uuid.uuid4()
    response = _post(client, unknown, {"run_id": str(unknown), "events": []}, run_ingest_token(run))
    assert response.status_code == 404


@pytest.mark.parametrize(
    "body, problem",
    [
        ("{not json", "not JSON"),
        ([1, 2], "the body must be"),
        ({"run_id": "x"}, "the body must be"),
        ({"run_id": "00000000-0000-0000-0000-000000000000", "events": []}, "is not the run in the URL"),
    ],
)
def test_it_answers_a_bad_body_with_what_is_wrong(client, launch, body, problem):
    run = launch()
    response = _post(client, run.uuid, body, run_ingest_token(run))
    assert response.status_code == 400 and problem in response.json()["detail"]


def test_a_personal_session_does_not_replace_the_run_token(client, launch, researcher):
    run = launch()
    client.force_login(researcher)
    response = _post(client, run.uuid, {"run_id": str(run.uuid), "events": [event(run, 1, "log")]}, None)
    assert response.status_code == 401


def test_it_takes_batches_larger_than_a_form_upload(client, launch, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    run = launch()
    name, content_hash = task_of(run)
    events = [
        event(run, seq, "rollout", rollout_payload(name, content_hash, sample=seq, turns=20))
        for seq in range(1, 21)
    ]
    body = json.dumps({"run_id": str(run.uuid), "events": events})
    assert len(body) > 10 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = _post(client, run.uuid, body, run_ingest_token(run))
    assert response.status_code == 200 and response.json()["accepted"] == 20
