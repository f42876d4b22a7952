"""Real delivery: the engine's own EventEmitter and HttpSink against the live server, with duplicates
from lost answers and a resumed driver, and (on PostgreSQL) the ingesting connections killed mid-stream."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from django.db import connection

from rl_engine.events import EventEmitter, HttpSink
from runs.models import Rollout, RolloutBody, RunEvent
from runs.tokens import run_ingest_token
from tests.runs.event_builders import rollout_payload, task_of

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


class AnswerLostSink(HttpSink):
    """Stores every third batch but reports a failure, as when the answer is lost on the way back."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes = 0

    async def write(self, events) -> None:
        await super().write(events)
        self.writes += 1
        if self.writes % 3 == 0:
            raise httpx.ReadTimeout("the answer was lost")


def _payloads(run, count: int) -> list[tuple[str, dict]]:
    name, content_hash = task_of(run)
    events = [("run_started", {"kind": "eval"})]
    for i in range(1, count - 1):
        if i % 4:
            events.append(("rollout", rollout_payload(name, content_hash, sample=i, turns=4)))
        else:
            events.append(("log", {"message": f"progress {i}"}))
    events.append(("run_finished", {"rollouts": count}))
    return events


async def _stream(emitter: EventEmitter, events: list[tuple[str, dict]], *, pause_every: int = 25) -> None:
    for i, (type_, payload) in enumerate(events):
        emitter.emit(type_, payload)
        if i % pause_every == 0:
            await asyncio.sleep(0.02)  # a driver emits over time, not all at once


def _url(live_server, run) -> str:
    return f"{live_server.url}/api/runs/{run.uuid}/events"


def test_the_engine_delivers_every_event_exactly_once(live_server, launch):
    run = launch()
    events = _payloads(run, 300)
    token = run_ingest_token(run)

    async def deliver() -> int:
        sink = AnswerLostSink(_url(live_server, run), token=token)
        emitter = EventEmitter(str(run.uuid), sink, batch_size=20, flush_interval_sec=0.05, backoff_sec=0.01)
        await _stream(emitter, events)
        await emitter.close(timeout_sec=60)
        # A driver resumed from an older acknowledgement sends the last 100 events again.
        resumed = EventEmitter(str(run.uuid), HttpSink(_url(live_server, run), token=token), start_seq=201)
        await _stream(resumed, events[200:])
        await resumed.close(timeout_sec=60)
        return emitter.failed_attempts

    lost_answers = asyncio.run(deliver())

    assert lost_answers >= 3  # batches really were sent twice
    run.refresh_from_db()
    rollouts = sum(type_ == "rollout" for type_, _ in events)
    assert RunEvent.objects.filter(run=run).count() == run.events_received == len(events) == 300
    assert Rollout.objects.filter(run=run).count() == RolloutBody.objects.filter(rollout__run=run).count()
    assert Rollout.objects.filter(run=run).count() == run.rollouts_done == rollouts
    assert run.last_seq == 300 and run.status == "succeeded"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="terminates PostgreSQL backends")
def test_nothing_is_lost_when_the_ingesting_connections_are_killed(live_server, launch):
    import psycopg

    run = launch()
    events = _payloads(run, 400)
    token = run_ingest_token(run)
    settings = connection.settings_dict
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), clock_timestamp()")
        own_pid, started = cursor.fetchone()
    killed: list[int] = []
    streaming = threading.Event()

    def kill_ingesting_connections() -> None:
        # Only connections opened since this test began (the live server's per-request ones that ingest), in
        # this test database: never the test's own, nor the session's workers' and fixtures' older ones.
        with psycopg.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=settings["PORT"] or 5432,
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            dbname=settings["NAME"],
            autocommit=True,
        ) as admin:
            streaming.wait(timeout=10)
            while streaming.is_set() and len(killed) < 5:
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s "
                    "AND backend_start > %s",
                    [own_pid, started],
                ).fetchall()
                if any(ok for (ok,) in rows):
                    killed.append(len(rows))
                    time.sleep(0.1)  # let a few batches through between the kills
                time.sleep(0.005)

    async def deliver() -> None:
        emitter = EventEmitter(
            str(run.uuid),
            HttpSink(_url(live_server, run), token=token),
            batch_size=20,
            flush_interval_sec=0.02,
            backoff_sec=0.05,
            max_backoff_sec=0.5,
        )
        streaming.set()
        await _stream(emitter, events, pause_every=10)
        await emitter.close(timeout_sec=120)
        streaming.clear()

    killer = threading.Thread(target=kill_ingesting_connections)
    killer.start()
    asyncio.run(deliver())
    killer.join()

    assert killed, "no ingesting connection was terminated; the test proved nothing"
    run.refresh_from_db()
    rollouts = sum(type_ == "rollout" for type_, _ in events)
    assert sorted(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == list(range(1, 401))
    assert run.events_received == 400 and run.rollouts_done == rollouts
    assert (
        Rollout.objects.filter(run=run).count()
        == RolloutBody.objects.filter(rollout__run=run).count()
        == rollouts
    )
