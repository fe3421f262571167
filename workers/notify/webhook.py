"""One webhook POST: the JSON body, signed with HMAC-SHA256 when a secret is set.

Headers: `X-Ajet-Runner-Event` (the body's `type`), `X-Ajet-Runner-Delivery` (the same for every retry of
one notification: a receiver deduplicates by it, since delivery is at least once) and, with a secret,
`X-Ajet-Runner-Signature: sha256=<hex>` — the HMAC-SHA256 of the exact body bytes under the secret (the
scheme GitHub's webhooks use; check it with `hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

__all__ = ["SIGNATURE_HEADER", "Delivery", "post_json", "shown_url", "signature"]

SIGNATURE_HEADER = "X-Ajet-Runner-Signature"
EVENT_HEADER = "X-Ajet-Runner-Event"
DELIVERY_HEADER = "X-Ajet-Runner-Delivery"
USER_AGENT = "ajet-runner-webhook/1"


@dataclass
class Delivery:
    ok: bool
    status: int  # 0: no answer
    error: str = ""


def signature(body: bytes, secret: str) -> str:
    """The header value: `sha256=` and the hex HMAC-SHA256 of `body` keyed by `secret`."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def shown_url(url: str) -> str:
    """The URL as events show it: no user, password, query or fragment (where tokens hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def post_json(url: str, payload: dict[str, Any], *, secret: str = "", timeout: float = 10.0,
              transport: httpx.BaseTransport | None = None) -> Delivery:
    """POST `payload`; ok on a 2xx answer. Never raises for the network or the receiver."""
    body = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
               EVENT_HEADER: str(payload.get("type", "")), DELIVERY_HEADER: str(payload.get("delivery", ""))}
    if secret:
        headers[SIGNATURE_HEADER] = signature(body, secret)
    try:
        with httpx.Client(timeout=timeout, transport=transport, follow_redirects=False) as client:
            resp = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return Delivery(False, 0, f"{type(exc).__name__}: {exc}"[:300])
    if 200 <= resp.status_code < 300:
        return Delivery(True, resp.status_code)
    return Delivery(False, resp.status_code, f"HTTP {resp.status_code}: {resp.text.strip()[:200]}")
