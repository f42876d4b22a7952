import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rl_engine.events import EventDeliveryError, EventEmitter, HttpSink, JsonlSink


class FlakyReceiver:
    """A real HTTP endpoint that answers 503 to its first `failures` requests, then stores batches."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests = 0
        self.batches: list[dict] = []
        self.authorization: list[str | None] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.requests += 1
                receiver.authorization.append(self.headers.get("Authorization"))
                if receiver.requests <= receiver.failures:
                    self.send_response(503)
                    self.end_headers()
                    return
                receiver.batches.append(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/events"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def seqs(self) -> list[int]:
        return [event["seq"] for batch in self.batches for event in batch["events"]]


@pytest.fixture
def receiver():
    made: list[FlakyReceiver] = []

    def make(failures: int) -> FlakyReceiver:
        made.append(FlakyReceiver(failures))
        return made[-1]

    yield make
    for server in made:
        server.server.shutdown()
        server.server.server_close()


def test_jsonl_sink_writes_every_event_once_with_increasing_seq(tmp_path):
    path = tmp_path / "run" / "events.jsonl"

    async def main():
        emitter = EventEmitter("run-1", JsonlSink(path), batch_size=3, flush_interval_sec=0.01)
        emitter.emit("run_started", {"tasks": 2})
        for index in range(7):
            emitter.emit("rollout", {"index": index})
        emitter.emit("run_finished", {})
        await emitter.close()

    asyncio.run(main())
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [event["seq"] for event in events] == list(range(1, 10))
    assert {event["run_id"] for event in events} == {"run-1"}
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert [event["payload"]["index"] for event in events[1:-1]] == list(range(7))


def test_http_sink_loses_nothing_while_the_server_fails_first_then_recovers(receiver):
    server = receiver(failures=3)

    async def main():
        emitter = EventEmitter(
            "run-2",
            HttpSink(server.url, token="s3cret"),
            batch_size=4,
            flush_interval_sec=0.01,
            backoff_sec=0.01,
        )
        for index in range(10):
            emitter.emit("log", {"line": index})
            await asyncio.sleep(0)
        await emitter.close(timeout_sec=30)
        return emitter.failed_attempts

    failed_attempts = asyncio.run(main())
    assert failed_attempts == 3
    assert sorted(set(server.seqs)) == list(range(1, 11))
    assert server.seqs == sorted(server.seqs) and len(server.seqs) == len(set(server.seqs))
    assert set(server.authorization) == {"Bearer s3cret"}
    assert {batch["run_id"] for batch in server.batches} == {"run-2"}


def test_a_resumed_emitter_continues_from_the_given_seq(receiver):
    server = receiver(failures=0)

    async def main():
        emitter = EventEmitter("run-3", HttpSink(server.url), start_seq=42, flush_interval_sec=0.01)
        emitter.emit("checkpoint", {"step": 5})
        emitter.emit("step_metrics", {"step": 6})
        await emitter.close()

    asyncio.run(main())
    assert server.seqs == [42, 43]


def test_closing_while_the_receiver_stays_down_says_how_many_events_were_not_delivered(receiver):
    server = receiver(failures=10_000)

    async def main():
        emitter = EventEmitter("run-4", HttpSink(server.url), flush_interval_sec=0.01, backoff_sec=0.01)
        emitter.emit("log", {})
        emitter.emit("log", {})
        await emitter.close(timeout_sec=0.3)

    with pytest.raises(EventDeliveryError, match="2 events of run run-4 \\(from seq 1\\)"):
        asyncio.run(main())
