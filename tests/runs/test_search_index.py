"""The trace search's text, written after ingestion commits: by the task, by the sweep, once each."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Rollout, RolloutSearchText
from runs.services.ingest import events_ingest
from runs.services.search_index import rollout_search_backlog_index, rollout_search_index
from runs.trace_selectors import rollouts_filtered
from tests.runs.event_builders import event, rollout_payload, task_of


def _ingest(run, *texts: str) -> list[Rollout]:
    name, content_hash = task_of(run)
    events = []
    for offset, text in enumerate(texts):
        payload = rollout_payload(name, content_hash, sample=offset)
        payload["turns"][0]["content"] = text
        events.append(event(run, run.last_seq + 1 + offset, "rollout", payload))
    assert events_ingest(run=run, events=events).accepted == len(texts)
    run.refresh_from_db()
    return list(Rollout.objects.filter(run=run).order_by("seq"))


@pytest.mark.django_db
def test_the_text_is_written_once_and_then_found(launch, reviewer):
    run = launch("eval")
    first, second = _ingest(run, "The Kestrel licence sale", "Quarterly margin of APAC")
    assert not RolloutSearchText.objects.exists()  # ingestion itself writes none
    assert not rollouts_filtered(user=reviewer, filters={"q": "kestrel"}).exists()

    assert rollout_search_index(rollout_ids=[first.pk, second.pk]) == 2
    assert rollout_search_index(rollout_ids=[first.pk, second.pk]) == 0  # a task delivered twice

    assert list(rollouts_filtered(user=reviewer, filters={"q": "kestrel licence"})) == [first]
    assert "apac" in RolloutSearchText.objects.get(rollout=second).text.split()


@pytest.mark.django_db
def test_the_sweep_indexes_what_a_lost_task_left_behind_in_recent_runs_only(launch):
    recent, old = launch("eval"), launch("eval")
    (recent_rollout,) = _ingest(recent, "recent words")
    _ingest(old, "old words")
    old.last_event_at = timezone.now() - timedelta(days=2)
    old.save(update_fields=["last_event_at"])

    assert rollout_search_backlog_index() == 1
    assert list(RolloutSearchText.objects.values_list("rollout_id", flat=True)) == [recent_rollout.pk]
    assert rollout_search_backlog_index() == 0


@pytest.mark.services
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_real_worker_indexes_a_committed_batch(live_celery_worker, launch, reviewer):
    run = launch("eval")
    (rollout,) = _ingest(run, "Amendment one replaced the term")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not RolloutSearchText.objects.filter(rollout=rollout).exists():
        time.sleep(0.3)
    assert list(rollouts_filtered(user=reviewer, filters={"q": "amendment replaced"})) == [rollout]
