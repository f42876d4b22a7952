"""The trace search's text (RolloutSearchText), written after a rollout's batch commits.

Ingestion enqueues `runs.search_index` with the batch's rollout ids on commit; the task reads the
bodies back, builds each text (runs/search_text.py) and inserts it, ignoring rows already there, so a
task delivered twice or racing the sweep stores each text once. `runs.search_index_sweep` (Celery
beat) indexes what a lost task left behind: the rollouts without a text of runs that received events
in the last day. Until its text is written a rollout is listed but not found by a text search.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ..models import Rollout, RolloutSearchText, Run
from ..search_text import search_text_of

logger = logging.getLogger(__name__)
CHUNK = 500
SWEEP_WINDOW = timedelta(days=1)


def rollout_search_index(*, rollout_ids: list[int]) -> int:
    """Write the search text of those of `rollout_ids` that have none; returns how many were written."""
    written = 0
    for start in range(0, len(rollout_ids), CHUNK):
        chunk = rollout_ids[start : start + CHUNK]
        rows = (
            Rollout.objects.filter(pk__in=chunk, search__isnull=True, body__isnull=False)
            .values_list("pk", "message", "body__turns", "body__final_answer", "body__error_detail")
            .order_by()
        )
        texts = [
            RolloutSearchText(
                rollout_id=pk,
                text=search_text_of(
                    turns=turns, final_answer=final_answer, message=message, error_detail=error_detail
                ),
            )
            for pk, message, turns, final_answer, error_detail in rows
        ]
        RolloutSearchText.objects.bulk_create(texts, ignore_conflicts=True)
        written += len(texts)
    return written


def rollout_search_backlog_index(*, limit: int = 20 * CHUNK) -> int:
    """Index up to `limit` rollouts of recently active runs that still have no search text."""
    recent = Run.objects.filter(last_event_at__gte=timezone.now() - SWEEP_WINDOW).values("pk")
    missing = list(
        Rollout.objects.filter(run__in=recent, search__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
    written = rollout_search_index(rollout_ids=missing) if missing else 0
    if written:
        logger.warning("indexed %d rollouts whose search-index task was lost", written)
    return written


def rollout_search_index_enqueue(rollout_ids: list[int]) -> None:
    """After the ingesting transaction commits, hand its rollouts to the search-index task.

    A broker that cannot take the task must not fail an ingest that has already committed (the engine
    would resend it for nothing): the sweep indexes those rollouts within its period."""
    from ..tasks import search_index

    def send() -> None:
        try:
            search_index.delay(rollout_ids)
        except Exception:  # kombu's errors vary by transport; the sweep covers every one of them
            logger.exception("could not enqueue the search index of %d rollouts", len(rollout_ids))

    transaction.on_commit(send)
