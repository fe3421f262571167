"""Which URLs a webhook may be posted to: checked at submission (a 4xx naming the problem), at a worker's start
(AJET_RUNNER_WEBHOOK_URL) and again before every POST (a URL stored by an older version).

A webhook URL comes from whoever submits a stage, and the worker POSTs to it with the cluster's signature, so:
no control character or space (CR/LF in a URL is a header injection in any client that writes it raw), only
http and https (no `file:`, `gopher:`, `redis:`), a host, and plain `http://` only to a loopback address unless
the operator allows it (AJET_RUNNER_WEBHOOK_ALLOW_HTTP): a signed notification and the log line it carries are
not sent across a network in clear text by default. Redirects are never followed (workers/notify/webhook.py).
"""

from __future__ import annotations

import ipaddress
import unicodedata
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MAX_URL_CHARS", "shown_url", "webhook_url_problem"]

MAX_URL_CHARS = 2048


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def webhook_url_problem(url: str, *, allow_http: bool = False) -> str:
    """Why `url` cannot be a webhook URL; "" when it can."""
    problem = _characters_problem(url)
    if problem:
        return problem
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return f"must start with https:// or http:// (not {parts.scheme + ':' if parts.scheme else 'no scheme'})"
    try:
        host, _ = parts.hostname, parts.port
    except ValueError as exc:
        return f"has an invalid port ({exc})"
    if not host:
        return "names no host"
    if parts.scheme.lower() == "http" and not allow_http and not _loopback(host):
        return (f"is plain http:// to {host}, which is not a loopback address: use https://, or let the operator "
                "allow plain http (AJET_RUNNER_WEBHOOK_ALLOW_HTTP=1)")
    return ""


def _characters_problem(url: str) -> str:
    """Why `url`'s characters cannot go into a request (too many, a control character or a space), or ""."""
    if len(url) > MAX_URL_CHARS:
        return f"is {len(url)} characters long (at most {MAX_URL_CHARS})"
    bad = next((c for c in url if c.isspace() or unicodedata.category(c).startswith("C")), None)
    if bad is not None:
        return (f"holds a control character or a space ({ascii(bad)}): CR/LF would split the request's headers; "
                "encode it (%0D, %20)")
    return ""


def shown_url(url: str) -> str:
    """The URL as events, dead letters and the console show it: no user, password, query or fragment (where
    tokens hide)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(an unreadable URL)"
    host = parts.hostname or ""
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
