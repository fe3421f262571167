"""A tiny OpenAI-compatible `/v1/chat/completions` server for tests: real HTTP on a free port.

Each test scripts its answers (`answer`), and reads back every request it got (`requests`:
headers and the raw body), e.g. to prove no secret was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0
    raw: str | None = None  # a whole body instead of a chat completion


@dataclass
class FakeLLM:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    answer: Callable[[dict[str, Any]], Reply] = lambda body: Reply("{}")
    refuse_json_mode: bool = False


def advice(changes: list[dict[str, Any]], *, repairable: bool = True, diagnosis: str = "a diagnosis",
           rationale: str = "a rationale") -> str:
    return json.dumps({"diagnosis": diagnosis, "repairable": repairable, "changes": changes,
                       "rationale": rationale})


@contextmanager
def fake_llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # http.server's name
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8")
            body = json.loads(raw)
            fake.requests.append({"path": self.path, "headers": dict(self.headers.items()), "raw": raw,
                                  "body": body})
            if self.path != "/v1/chat/completions":
                self._send(404, json.dumps({"error": "not found"}))
                return
            if fake.refuse_json_mode and "response_format" in body:
                self._send(400, json.dumps({"error": {"message": "response_format is not supported"}}))
                return
            reply = fake.answer(body)
            if reply.delay:
                time.sleep(reply.delay)
            if reply.raw is not None:
                self._send(reply.status, reply.raw)
                return
            self._send(reply.status, json.dumps({
                "id": "chatcmpl-test", "object": "chat.completion", "model": body.get("model") or "fake-model",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply.content}}],
            }))

        def _send(self, status: int, text: str) -> None:
            data = text.encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
