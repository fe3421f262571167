"""ASGI middleware: a request body limit enforced before anything parses the body, request latency, and the
security headers of every response.

All are plain ASGI (not BaseHTTPMiddleware) so server-sent event streams pass through untouched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _send_json(send, 400, {"detail": "invalid Content-Length", "problems": [
                        {"level": "error", "field": "Content-Length", "message": "not a number"}]})
                    return
                if declared > self.max_bytes:
                    await _send_json(send, 413, self._too_large())
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_json(send, 413, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
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


# The console and every API answer: nothing may run but our own files, nothing may frame a page.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
# The interactive API docs (/docs, /redoc): their own inline start-up scripts are allowed by hash (computed
# from the page as sent), their bundles from this server or, until the bundled offline assets land, the CDN
# FastAPI's pages load them from; styles inline (both UIs set style attributes), workers from blob: (ReDoc).
DOCS_PATHS = ("/docs", "/redoc")
DOCS_SOURCES = "'self' https://cdn.jsdelivr.net"
FIXED_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin"),
                 (b"x-frame-options", b"DENY"))
_INLINE_SCRIPT = re.compile(rb"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.S | re.I)
MAX_DOCS_PAGE = 1 << 20


def docs_csp(html: bytes) -> str:
    """The docs pages' policy: their inline scripts by sha256, nothing else inline."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode()}'"
                      for m in _INLINE_SCRIPT.finditer(html))
    return (f"default-src 'none'; script-src {DOCS_SOURCES} {hashes}".rstrip()
            + f"; style-src {DOCS_SOURCES} 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
              "connect-src 'self'; worker-src blob:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


def _with_headers(headers: list[tuple[bytes, bytes]], csp: str) -> list[tuple[bytes, bytes]]:
    names = {b"content-security-policy", *(n for n, _ in FIXED_HEADERS)}
    kept = [(n, v) for n, v in headers if n.lower() not in names]
    return [*kept, (b"content-security-policy", csp.encode()), *FIXED_HEADERS]


class SecurityHeaders:
    """The same security headers (CSP, anti-framing, nosniff, referrer) on every response of every route,
    the API docs included (plain ASGI, so event streams pass through). A docs page is held until complete
    (it is small) so its inline scripts can be hashed into its policy."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if str(scope.get("path", "")).rstrip("/") in DOCS_PATHS:
            await self._docs(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _with_headers(list(message.get("headers", [])), CSP)
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _docs(self, scope: Scope, receive: Receive, send: Send) -> None:
        start: Message | None = None
        body: list[bytes] = []

        async def held(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)  # after the page went out (an oversized one): as it comes
                return
            body.append(message.get("body", b""))
            more = bool(message.get("more_body", False))
            if more and sum(map(len, body)) < MAX_DOCS_PAGE:
                return
            page = b"".join(body)
            start["headers"] = _with_headers(list(start.get("headers", [])), docs_csp(page))
            await send(start)
            start = None
            body.clear()
            await send({"type": "http.response.body", "body": page, "more_body": more})

        await self.app(scope, receive, held)
