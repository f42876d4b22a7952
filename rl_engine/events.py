"""Numbered run events, delivered at least once to a JSONL file or an HTTP endpoint.

Every event carries the run id and a per-run `seq` that only grows, so the receiver can ingest
idempotently on (run_id, seq). `emit()` never blocks and never fails: events wait in a buffer that a
background task delivers in batches; a failed delivery keeps the batch and retries it with
exponential backoff, so a receiver that is down (a web server restarting) loses nothing. A batch
may arrive twice (the receiver stored it but the answer was lost): that is the "at least once".
A resumed run passes `start_seq` one past the last seq the receiver acknowledged.

HTTP wire format: `POST url` with `Authorization: Bearer TOKEN` and the body
`{"run_id": ..., "events": [{"run_id", "seq", "type", "payload", "timestamp"}, ...]}`;
any 2xx answer acknowledges the whole batch.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel

EventType = Literal[
    "run_started", "step_metrics", "rollout", "harness_error", "checkpoint", "log", "run_finished"
]


class Event(BaseModel):
    run_id: str
    seq: int
    type: EventType
    payload: dict[str, Any]
    timestamp: float


class EventDeliveryError(Exception):
    """Events could not be delivered before the emitter was closed."""


class EventSink(Protocol):
    async def write(self, events: list[Event]) -> None:
        """Deliver the whole batch or raise; the emitter keeps a failed batch and retries it."""
        ...

    async def close(self) -> None: ...


class JsonlSink:
    """Appends one JSON object per line; each batch is flushed and fsynced before it counts as delivered."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    async def write(self, events: list[Event]) -> None:
        lines = "".join(event.model_dump_json() + "\n" for event in events)
        await asyncio.to_thread(self._append, lines)

    def _append(self, lines: str) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())

    async def close(self) -> None:
        return None


class HttpSink:
    def __init__(self, url: str, *, token: str = "", timeout_sec: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url
        self.client = httpx.AsyncClient(headers=headers, timeout=timeout_sec)

    async def write(self, events: list[Event]) -> None:
        body = {
            "run_id": events[0].run_id,
            "events": [json.loads(event.model_dump_json()) for event in events],
        }
        response = await self.client.post(self.url, json=body)
        response.raise_for_status()

    async def close(self) -> None:
        await self.client.aclose()


class EventEmitter:
    def __init__(
        self,
        run_id: str,
        sink: EventSink,
        *,
        start_seq: int = 1,
        batch_size: int = 100,
        flush_interval_sec: float = 0.5,
        backoff_sec: float = 0.2,
        max_backoff_sec: float = 10.0,
    ) -> None:
        self.run_id = run_id
        self.sink = sink
        self.next_seq = start_seq
        self.batch_size = batch_size
        self.flush_interval_sec = flush_interval_sec
        self.backoff_sec = backoff_sec
        self.max_backoff_sec = max_backoff_sec
        self.failed_attempts = 0
        self._buffer: list[Event] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task | None = None

    def emit(self, type: EventType, payload: dict[str, Any]) -> Event:
        event = Event(
            run_id=self.run_id, seq=self.next_seq, type=type, payload=payload, timestamp=time.time()
        )
        self.next_seq += 1
        self._buffer.append(event)
        self._idle.clear()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._deliver_forever())
        if len(self._buffer) >= self.batch_size:
            self._wake.set()
        return event

    @property
    def pending(self) -> int:
        return len(self._buffer)

    async def flush(self) -> None:
        """Wait until every event emitted so far is delivered (retrying as long as it takes)."""
        self._wake.set()
        await self._idle.wait()

    async def close(self, timeout_sec: float = 60.0) -> None:
        """Deliver what is left, then stop; raises EventDeliveryError if the sink stayed down too long."""
        try:
            async with asyncio.timeout(timeout_sec):
                await self.flush()
        except TimeoutError:
            raise EventDeliveryError(
                f"{len(self._buffer)} events of run {self.run_id} (from seq {self._buffer[0].seq}) "
                f"were not delivered within {timeout_sec:g} s"
            ) from None
        finally:
            if self._task is not None:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            await self.sink.close()

    async def _deliver_forever(self) -> None:
        delay = self.backoff_sec
        while True:
            await self._wait(self.flush_interval_sec)
            self._wake.clear()
            while self._buffer:
                batch = self._buffer[: self.batch_size]
                try:
                    await self.sink.write(batch)
                except Exception:
                    # Any failure keeps the batch: the receiver may be restarting; retry later.
                    self.failed_attempts += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.max_backoff_sec)
                    continue
                delay = self.backoff_sec
                del self._buffer[: len(batch)]
            self._idle.set()

    async def _wait(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            pass


class EventFanout:
    """The same numbered events to several emitters (a file and the web app), each buffering on its own."""

    def __init__(self, emitters: list[EventEmitter]) -> None:
        if not emitters:
            raise ValueError("an event fanout needs at least one emitter")
        self.emitters = emitters

    def emit(self, type: EventType, payload: dict[str, Any]) -> Event:
        return [emitter.emit(type, payload) for emitter in self.emitters][0]

    async def close(self, timeout_sec: float = 60.0) -> None:
        errors = []
        for emitter in self.emitters:
            try:
                await emitter.close(timeout_sec)
            except EventDeliveryError as error:
                errors.append(str(error))
        if errors:
            raise EventDeliveryError("; ".join(errors))
