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


class SilentReceiver:
    """`with SilentReceiver() as silent:` a loopback port that accepts connections and never answers: the kernel
    completes the handshake, the request is sent, no byte ever comes back."""

    def __init__(self) -> None:
        import socket

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)  # never accepted: connections wait in the backlog

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def __enter__(self) -> SilentReceiver:
        return self

    def __exit__(self, *_: Any) -> None:
        self._sock.close()


class TrickleReceiver:
    """`with TrickleReceiver(every=1.0) as slow:` answers one byte of its status line every `every` seconds, so no
    single read ever waits long (a per-read timeout never fires) and the answer never ends within a minute."""

    def __init__(self, every: float = 1.0) -> None:
        import socket

        self.every = every
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: Any) -> None:
        answer = b"HTTP/1.1 204 No Content\r\n" + b"X-Slow: " + b"a" * 100 + b"\r\n\r\n"
        with conn:
            for byte in answer:
                if self._stop.wait(self.every):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def __enter__(self) -> TrickleReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._sock.close()


@dataclass
class RedirectingReceiver:
    """`with RedirectingReceiver(to) as r:` answers every POST with 307 to `to` (a redirect must not be followed)."""

    to: str
    hits: int = 0

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name for it
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.hits += 1
                self.send_response(307)
                self.send_header("Location", owner.to)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def __enter__(self) -> RedirectingReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


class EndlessReceiver:
    """`with EndlessReceiver() as flood:` answers every request 500 with a 20 GB body of zeros, streamed as fast as
    the client reads it."""

    def __init__(self) -> None:
        import socket

        self.sent = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._flood, args=(conn,), daemon=True).start()

    def _flood(self, conn: Any) -> None:
        zeros = b"\0" * 65536
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 20000000000\r\n\r\n")
                while self.sent < 20_000_000_000:
                    conn.sendall(zeros)
                    self.sent += len(zeros)
            except OSError:
                return

    def __enter__(self) -> EndlessReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._sock.close()
