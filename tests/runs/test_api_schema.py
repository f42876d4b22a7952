"""Schemathesis over the API's own OpenAPI schema: generated requests never make the server fail.

Bounded (a few examples per operation) so it fits the suite; the calls authenticate as a researcher
who owns a run with a reviewed rollout, and each request is sent again with the ids of that run, its
rollout, task set and task version in its path, so the generated requests also reach the routes' happy
paths (random ids alone only ever meet a 404).
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from runs.models import RolloutBody
from runs.services.ingest import events_ingest
from runs.services.quality import criterion_review_set
from tests.runs.event_builders import event, rollout_payload, task_of
from webapp.api_tokens import api_token_create
from webapp.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", application)


@pytest.fixture
def keep_test_connection():
    """Requests go straight to the WSGI app, whose end-of-request hook would close the test's
    transaction-wrapped connection; Django's own test client unhooks it the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(launch, researcher, keep_test_connection):
    """The researcher's token, and the ids of things they may read, by the path parameter naming them."""
    run = launch()
    name, content_hash = task_of(run)
    events_ingest(run=run, events=[event(run, 1, "rollout", rollout_payload(name, content_hash))])
    rollout = run.rollouts.select_related("run").get()
    RolloutBody.objects.filter(rollout=rollout).update(
        verdicts=[{"criterion_id": "c1", "kind": "contains", "met": True, "weight": 1, "required": True}]
    )
    criterion_review_set(rollout=rollout, user=researcher, criterion_id="c1", reviewer_met=False)
    _, raw = api_token_create(user=researcher, name="schemathesis")
    known = {
        "run_id": run.pk,
        "rollout_id": rollout.pk,
        "task_set_id": run.task_set_id,
        "version_id": rollout.task_version_id,
    }
    return {"Authorization": f"Bearer {raw}"}, known


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_the_api_never_answers_a_server_error(case, bearer):
    headers, known = bearer
    case.call_and_validate(headers=headers, checks=[not_a_server_error])
    real = {name: known[name] for name in case.path_parameters if name in known}
    if real:
        case.path_parameters = {**case.path_parameters, **real}
        case.call_and_validate(headers=headers, checks=[not_a_server_error])
