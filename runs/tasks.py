"""Celery tasks of the runs app: thin adapters that take a run id and call one service.

They are routed to the `runs` queue (settings.CELERY_TASK_ROUTES): the workers that take it must
reach Ray and RUNS_DIR. A run deleted before its message was taken is skipped with a log line.
"""

from __future__ import annotations

import logging

from celery import shared_task

from tasks_authoring.services.export_jobs import exports_expire

from .models import Run, TraceExport
from .services import dispatch, trace_exports
from .services import search_index as search_index_service

log = logging.getLogger(__name__)


def _run(run_pk: int) -> Run | None:
    run = Run.objects.filter(pk=run_pk).first()
    if run is None:
        log.warning("run %s no longer exists; nothing to do", run_pk)
    return run


@shared_task(acks_late=True)
def run_dispatch(run_pk: int) -> None:
    if run := _run(run_pk):
        dispatch.run_submit(run=run)


@shared_task(acks_late=True)
def run_stop(run_pk: int) -> None:
    if run := _run(run_pk):
        dispatch.run_stop(run=run)


@shared_task
def runs_reconcile() -> None:
    dispatch.runs_reconcile()


# Exports need only the database and storage, not Ray: the explicit name keeps them off the `runs`
# queue (CELERY_TASK_ROUTES matches "runs.tasks.*"), so any worker writes them.
@shared_task(name="runs.trace_export_run", acks_late=True, max_retries=0)
def trace_export_run(export_pk: int) -> str:
    export = TraceExport.objects.filter(pk=export_pk).first()
    if export is None:
        log.warning("trace export %s no longer exists; nothing to do", export_pk)
        return "deleted"
    return trace_exports.trace_export_run(export=export).status


# Like exports, the search index needs only the database: any worker writes it.
@shared_task(name="runs.search_index", acks_late=True)
def search_index(rollout_ids: list[int]) -> int:
    return search_index_service.rollout_search_index(rollout_ids=rollout_ids)


@shared_task(name="runs.search_index_sweep")
def search_index_sweep() -> int:
    return search_index_service.rollout_search_backlog_index()


@shared_task(name="runs.trace_exports_expire")
def trace_exports_expire() -> int:
    return exports_expire(TraceExport)
