"""One webhook POST: the JSON body, signed with HMAC-SHA256 when a secret is set.

Headers: `X-Ajet-Runner-Event` (the body's `type`), `X-Ajet-Runner-Delivery` (the same for every retry of
one notification: a receiver deduplicates by it, since delivery is at least once) and, with a secret,
`X-Ajet-Runner-Signature: sha256=<hex>` — the HMAC-SHA256 of the exact body bytes under the secret (the
scheme GitHub's webhooks use; check it with `hmac.compare_digest`).

One deadline covers the whole POST: DNS, connect, sending the body and reading the answer. httpx's timeouts
are per operation, so a receiver that accepts and then trickles a byte every few seconds (or never answers)
held a delivery for as long as it liked; here the request runs under `anyio.move_on_after(deadline)` and is
cancelled at the deadline, whatever it is waiting for; of the answer's body only the first 4 KB is read (a
receiver streaming gigabytes is not buffered). Redirects are never followed (a 3xx is a failed
delivery, retried later like any other). The URL is checked again before sending
(statemachine/blueprint/webhook_url.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ajet_runner.statemachine.blueprint.webhook_url import shown_url, webhook_url_problem
from ajet_runner.statemachine.durations import format_limit

if TYPE_CHECKING:
    import httpx

__all__ = ["SIGNATURE_HEADER", "Delivery", "post_json", "shown_url", "signature"]

SIGNATURE_HEADER = "X-Ajet-Runner-Signature"
EVENT_HEADER = "X-Ajet-Runner-Event"
DELIVERY_HEADER = "X-Ajet-Runner-Delivery"
USER_AGENT = "ajet-runner-webhook/1"
MAX_ANSWER_BYTES = 4096  # of a receiver's answer body: only its start is shown in an error


@dataclass
class Delivery:
    ok: bool
    status: int  # 0: no answer
    error: str = ""
    final: bool = False  # never worth retrying (a URL that may not be posted to)


def signature(body: bytes, secret: str) -> str:
    """The header value: `sha256=` and the hex HMAC-SHA256 of `body` keyed by `secret`."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def post_json(url: str, payload: dict[str, Any], *, secret: str = "", timeout: float = 10.0,
              transport: Any = None, allow_http: bool = False) -> Delivery:
    """POST `payload` within `timeout` seconds in all (connect + send + read); ok on a 2xx answer. Never raises
    for the network or the receiver. `transport`: an httpx async transport (tests)."""
    problem = webhook_url_problem(url, allow_http=allow_http)
    if problem:
        return Delivery(False, 0, f"not posted: the webhook URL {problem}", final=True)
    body = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
               EVENT_HEADER: str(payload.get("type", "")), DELIVERY_HEADER: str(payload.get("delivery", ""))}
    if secret:
        headers[SIGNATURE_HEADER] = signature(body, secret)
    import anyio  # here: every worker's outbox imports this module, most never post (httpx brings rich and click)

    return anyio.run(_post, url, body, headers, timeout, transport)


async def _post(url: str, body: bytes, headers: dict[str, str], deadline: float, transport: Any) -> Delivery:
    import anyio
    import httpx

    with anyio.move_on_after(deadline):
        try:
            async with httpx.AsyncClient(timeout=deadline, transport=transport, follow_redirects=False) as client, \
                    client.stream("POST", url, content=body, headers=headers) as resp:
                answer = await _head_of(resp)
        except httpx.HTTPError as exc:
            return Delivery(False, 0, f"{type(exc).__name__}: {exc}"[:300])
        if 200 <= resp.status_code < 300:
            return Delivery(True, resp.status_code)
        if 300 <= resp.status_code < 400:
            return Delivery(False, resp.status_code, f"HTTP {resp.status_code}: a redirect (not followed) to "
                                                     f"{shown_url(resp.headers.get('location', ''))}")
        text = answer.decode("utf-8", errors="replace").strip()
        return Delivery(False, resp.status_code, f"HTTP {resp.status_code}: {text[:200]}")
    return Delivery(False, 0, f"no answer within the {format_limit(deadline)} deadline (connect, send and read)")


async def _head_of(resp: httpx.Response) -> bytes:
    """The answer's first MAX_ANSWER_BYTES: a receiver that streams an endless body is not read to its end."""
    got = b""
    async for chunk in resp.aiter_bytes():
        got += chunk
        if len(got) >= MAX_ANSWER_BYTES:
            break
    return got[:MAX_ANSWER_BYTES]
