"""Bearer tokens for the HTTP API.

Several tokens may be valid at once (rotation: add the new one, move clients, drop the old
one), given comma separated in AJET_RUNNER_TOKEN or one per line in AJET_RUNNER_TOKEN_FILE.
The file is re-read when it changes, so rotating needs no restart. Every presented token is
compared with every configured one in constant time, and tokens are never logged.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from fastapi.security import HTTPBearer

from ajet_runner.service.api.middleware import ASGIApp, Receive, Scope, Send
from ajet_runner.store.settings import Settings

BEARER = 'Bearer realm="ajet-runner"'
BROKEN_LOG_EVERY = 60.0  # seconds between two repeats of the "token source broken" error line
log = logging.getLogger("ajet_runner.auth")


class TokenFileError(RuntimeError):
    """The configured token file cannot be read."""


def parse_tokens(env_value: str, file_text: str = "") -> list[str]:
    """Tokens from the env value (comma separated) and a file (one per line, `#` comments)."""
    tokens = [t.strip() for t in env_value.split(",")]
    for line in file_text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            tokens.append(line)
    return list(dict.fromkeys(t for t in tokens if t))


def _read_token_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror or exc}") from exc


@dataclass
class TokenSet:
    """The valid tokens: from settings, plus the token file (re-read when its mtime changes).

    Never fails open: once a token source is configured, an empty or unreadable source at run
    time means no token is valid (401 for everything) and an error line in the log, not an open API.
    """

    env_value: str = ""
    file_path: str = ""
    _file_tokens: list[str] = field(default_factory=list)
    _file_mtime: float | None = None
    _file_error: str = ""
    _logged_at: float = 0.0
    _logged_why: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenSet:
        tokens = cls(env_value=settings.token, file_path=settings.token_file)
        tokens.current()  # a missing or unreadable file is an error at start-up, not at the first request
        return tokens

    @property
    def configured(self) -> bool:
        """Whether any token source is configured (then an empty one is broken, not "no auth")."""
        return bool(self.env_value.strip() or self.file_path)

    def current(self) -> list[str]:
        if not self.file_path:
            return parse_tokens(self.env_value)
        with self._lock:
            try:
                mtime = os.stat(self.file_path).st_mtime
                if mtime != self._file_mtime:
                    self._file_tokens = parse_tokens("", _read_token_file(self.file_path))
                    self._file_mtime = mtime
                self._file_error = ""
            except (OSError, TokenFileError) as exc:
                why = f"cannot read the token file {self.file_path}: {getattr(exc, 'strerror', None) or exc}"
                if self._file_mtime is None:
                    raise TokenFileError(why) from exc
                # Unreadable after start-up: no token is valid until it is readable again (never open).
                self._file_error = why
                self._file_tokens, self._file_mtime = [], -1.0
            tokens = [] if self._file_error else parse_tokens(self.env_value, "\n".join(self._file_tokens))
            if not tokens:
                self._log_broken(self._file_error or f"the token file {self.file_path} holds no token")
            else:
                self._logged_why = ""
            return tokens

    def _log_broken(self, why: str) -> None:
        now = time.monotonic()
        if why != self._logged_why or now - self._logged_at >= BROKEN_LOG_EVERY:
            self._logged_at, self._logged_why = now, why
            log.error("AUTH: %s -- every protected request is refused with 401 until it is fixed", why)

    def matches(self, presented: str) -> bool:
        """Constant time in the presented token: every configured token is compared, no early exit."""
        given = presented.encode("utf-8")
        ok = False
        for token in self.current():
            ok |= hmac.compare_digest(given, token.encode("utf-8"))
        return ok


def bearer_of(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def refusal(tokens: TokenSet, insecure: bool, authorization: str) -> tuple[str, str] | None:
    """None when the request may pass; else (detail, WWW-Authenticate value) for a 401.

    `insecure` opens the API only when no token source is configured at all: a configured source
    that is empty or unreadable refuses everything.
    """
    if not tokens.current():
        if insecure and not tokens.configured:
            return None
        if tokens.configured:
            return "authentication is unavailable: the server's token source is empty or unreadable", BEARER
        return "no token is configured on this server (set AJET_RUNNER_TOKEN)", BEARER
    presented = bearer_of(authorization)
    if presented is None:
        return "missing bearer token (send 'Authorization: Bearer <token>')", BEARER
    if not tokens.matches(presented):
        return "invalid bearer token", f'{BEARER}, error="invalid_token"'
    return None


class BearerAuth:
    """ASGI middleware: 401 for protected paths before any body is read or any handler runs."""

    def __init__(self, app: ASGIApp, tokens: TokenSet, insecure: bool, prefixes: tuple[str, ...]) -> None:
        self.app = app
        self.tokens = tokens
        self.insecure = insecure
        self.prefixes = prefixes

    def _protected(self, path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        authorization = ""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                authorization = value.decode("latin-1")
        refused = refusal(self.tokens, self.insecure, authorization)
        if refused is None:
            await self.app(scope, receive, send)
            return
        detail, challenge = refused
        body = json.dumps({"detail": detail, "problems": []}).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", challenge.encode())]})
        await send({"type": "http.response.body", "body": body})


# Declares the scheme in the OpenAPI document (the check itself is BearerAuth's).
bearer_scheme = HTTPBearer(auto_error=False, description="a token from AJET_RUNNER_TOKEN or AJET_RUNNER_TOKEN_FILE")
