"""A real OpenAI-compatible judge endpoint on 127.0.0.1 that answers from a script of behaviours."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verdict_reply(is_true: bool, rationale: str = "the evidence shows it", *, fenced: bool = False) -> str:
    content = json.dumps({"rationale": rationale, "is_criteria_true": is_true})
    if fenced:
        content = f"Here is my verdict:\n```json\n{content}\n```"
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})


class FakeJudge:
    """Each request takes the next behaviour; the last one repeats.

    Behaviours: ("ok", body) answers 200 with body; ("status", code) answers that HTTP status;
    ("hang", seconds) sleeps before answering; ("text", body) answers 200 with a non-verdict body.
    """

    def __init__(self, *behaviours: tuple[str, object]) -> None:
        self.behaviours = list(behaviours)
        self.requests: list[dict] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                index = min(len(judge.requests), len(judge.behaviours)) - 1
                kind, value = judge.behaviours[index]
                if kind == "hang":
                    time.sleep(float(value))
                    kind, value = "ok", verdict_reply(True)
                status, text = (int(value), '{"error": "boom"}') if kind == "status" else (200, str(value))
                payload = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a hanging answer, as it should

            def do_GET(self) -> None:
                """The model list, as a set-up's probe of the endpoint asks for it."""
                payload = json.dumps({"object": "list", "data": [{"id": "fake-judge", "object": "model"}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeJudge:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
