"""A webhook receiver on loopback for the tests: records every POST (headers, body) and can refuse the first ones."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        """The X-Ajet-Runner-Signature header is the HMAC-SHA256 of the exact body under `secret`."""
        want = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(self.headers.get("x-ajet-runner-signature", ""), want)


@dataclass
class WebhookReceiver:
    """`with WebhookReceiver() as hook:` serves http://127.0.0.1:<port>/hook; `fail_first` answers 503 that often."""

    fail_first: int = 0
    received: list[Received] = field(default_factory=list)
    refused: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name for it
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with owner._lock:
                    if owner.refused < owner.fail_first:
                        owner.refused += 1
                        self.send_response(503)
                        self.end_headers()
                        self.wfile.write(b"not now")
                        return
                    owner.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def of_type(self, kind: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.json.get("type") == kind]

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
