"""ASGI middleware: a request body limit enforced before anything parses the body, request latency, and the
security headers of every response.

All are plain ASGI (not BaseHTTPMiddleware) so server-sent event streams pass through untouched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import Histogram

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})


class BodyLimit:
    """Answer 413 for a body over `max_bytes`: by Content-Length at once, else while it streams in.

    The body is read here in full (at most `max_bytes`) and replayed to the app, so no handler
    ever sees, or starts parsing, a part of an oversized request.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> dict[str, Any]:
        return {"detail": f"request body too large (limit {self.max_bytes} bytes)", "problems": [
            {"level": "error", "field": "body", "message": f"larger than {self.max_bytes} bytes"}]}

    def _declared_refusal(self, scope: Scope) -> tuple[int, dict[str, Any]] | None:
        """A Content-Length that is no number (400) or over the limit (413): refused before reading."""
        for name, value in scope.get("headers", []):
            if name != b"content-length":
                continue
            try:
                declared = int(value)
            except ValueError:
                return 400, {"detail": "invalid Content-Length", "problems": [
                    {"level": "error", "field": "Content-Length", "message": "not a number"}]}
            if declared > self.max_bytes:
                return 413, self._too_large()
        return None

    async def _read_body(self, receive: Receive, send: Send) -> list[bytes] | None:
        """The body's chunks, read up to the limit; None when the client left or it was too large (413 sent)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_json(send, 413, self._too_large())
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        refusal = self._declared_refusal(scope)
        if refusal is not None:
            await _send_json(send, *refusal)
            return
        chunks = await self._read_body(receive, send)
        if chunks is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: only a disconnect can come

        await self.app(scope, replay, send)


class Latency:
    """Observe each request's time to its response headers, labelled by route template (not raw path)."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        observed = False

        def observe(status: int) -> None:
            nonlocal observed
            if observed:
                return
            observed = True
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.histogram.labels(scope["method"], template, str(status)).observe(time.perf_counter() - start)

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                observe(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        except Exception:
            observe(500)
            raise


# The console and every API answer: nothing may run but our own files, nothing may frame a page. A route that
# needs another policy sets its own header (ReDoc's page, service/ui/docs.py) and it is kept.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
FIXED_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin"),
                 (b"x-frame-options", b"DENY"))


def _with_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    names = {n for n, _ in FIXED_HEADERS}
    kept = [(n, v) for n, v in headers if n.lower() not in names]
    own_csp = any(n.lower() == b"content-security-policy" for n, _ in kept)
    return [*kept, *(() if own_csp else ((b"content-security-policy", CSP.encode()),)), *FIXED_HEADERS]


class SecurityHeaders:
    """The same security headers (CSP, anti-framing, nosniff, referrer) on every response of every route,
    the API docs included (plain ASGI, so event streams pass through)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _with_headers(list(message.get("headers", [])))
            await send(message)

        await self.app(scope, receive, with_headers)
