"""Who may see the console: a signed, expiring session cookie made from the API token, or the API's bearer header.

The cookie is signed with a key derived from the token that logged in (HMAC), so several replicas accept each
other's cookies, and removing a token from AJET_RUNNER_TOKEN(_FILE) ends every session made with it. Logging
out revokes the session server-side: its nonce is kept in Redis until the cookie would have expired anyway
(every replica sees it), so a copied cookie stops working at logout, not at its expiry. Forms carry a CSRF
token bound to the session; the cookie is also SameSite=Strict, `Secure` whenever the request came over
https (behind a TLS proxy: AJET_RUNNER_TRUST_PROXY, so its X-Forwarded-Proto is believed), and the Origin
header, when sent, must be this host (the Host itself is one the server answers: service/api/hosts.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from fastapi import Request

from ajet_runner.service.api.auth import TokenSet, bearer_of
from ajet_runner.store.cluster.sessions import Revocations

COOKIE = "ajet_session"
_SESSION_SALT = b"ajet-runner ui session v1"
_PROCESS_KEY = os.urandom(32)  # insecure (no token, loopback) mode only: CSRF key for this process


class LoginRequired(Exception):
    """No valid session or bearer token: pages redirect to the login form, everything else answers 401."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class CsrfRefused(Exception):
    """A state-changing form without a valid CSRF token, or from another origin."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _key(token: str) -> bytes:
    return hmac.new(token.encode(), _SESSION_SALT, hashlib.sha256).digest()


def _sign(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


@dataclass(frozen=True)
class Viewer:
    """An authenticated request: how (cookie, bearer, open) and the key its CSRF tokens are made with."""

    via: str
    key: bytes
    nonce: str
    expires: int = 0  # a cookie session's end (epoch seconds); 0 for bearer and open viewers

    def csrf(self) -> str:
        return _sign(self.key, f"csrf.{self.nonce}")


@dataclass
class Sessions:
    tokens: TokenSet
    insecure: bool
    max_age: int
    revocations: Revocations | None = field(default=None)  # None: logout only drops the cookie (no Redis)

    def issue(self, token: str, now: float | None = None) -> str:
        """A cookie value for a token already checked with `tokens.matches`."""
        expires = int((now or time.time()) + self.max_age)
        payload = f"{expires}.{secrets.token_urlsafe(12)}"
        return f"{payload}.{_sign(_key(token), payload)}"

    def _from_cookie(self, value: str, now: float) -> Viewer | None:
        parts = value.split(".")
        if len(parts) != 3 or not parts[0].isdigit() or int(parts[0]) < now:
            return None
        payload = f"{parts[0]}.{parts[1]}"
        found = None
        for token in self.tokens.current():  # every token, no early exit
            key = _key(token)
            if hmac.compare_digest(_sign(key, payload), parts[2]):
                found = key
        return Viewer("cookie", found, parts[1], int(parts[0])) if found else None

    def viewer(self, request: Request) -> Viewer:
        """The request's viewer, or LoginRequired."""
        if not self.tokens.current():
            if self.insecure:
                return Viewer("open", _PROCESS_KEY, "open")
            raise LoginRequired("no token is configured on this server (set AJET_RUNNER_TOKEN)")
        presented = bearer_of(request.headers.get("authorization", ""))
        if presented is not None:
            if self.tokens.matches(presented):
                return Viewer("bearer", _key(presented), "bearer")
            raise LoginRequired("invalid bearer token")
        cookie = request.cookies.get(COOKIE, "")
        viewer = self._from_cookie(cookie, time.time()) if cookie else None
        if viewer is None:
            raise LoginRequired("log in first" if not cookie else "the session expired or its token was revoked")
        if self.revocations is not None and self.revocations.revoked(viewer.nonce):
            raise LoginRequired("the session was logged out")
        return viewer

    def end(self, viewer: Viewer) -> None:
        """Logout: a cookie session is revoked server-side (a copy of the cookie stops working now)."""
        if viewer.via == "cookie" and self.revocations is not None:
            self.revocations.revoke(viewer.nonce, viewer.expires)

    def check_csrf(self, request: Request, viewer: Viewer, sent: str) -> None:
        """Forms from a cookie session must carry the session's CSRF token and come from this origin."""
        check_origin(request)
        if viewer.via == "bearer":
            return  # a header a cross-site page cannot set
        if not sent or not hmac.compare_digest(sent, viewer.csrf()):
            raise CsrfRefused("the form's CSRF token is missing or wrong: reload the page and try again")


def check_origin(request: Request) -> None:
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise CsrfRefused(f"cross-origin form post from {origin} refused")
    if origin == "null":
        raise CsrfRefused("form post from an opaque origin refused")


def safe_next(target: str | None) -> str:
    """Only a path inside the console: never an open redirect."""
    if target and target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/"
