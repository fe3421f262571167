"""Trusted hosts: the API and console answer only requests whose `Host` is one they were configured for.

Without it a page on `attacker.example` that rebinds its name to 127.0.0.1 (DNS rebinding) reaches a
`serve --insecure` API on a developer's machine: the browser sends `Host: attacker.example`, the API
answered 201 and ran the command, and the console served a CSRF token under the foreign Host (its
Origin check compares against that same Host). So the first middleware of the stack compares the Host
header with the allowed names and answers 400 before anything else runs.

Entries (AJET_RUNNER_ALLOWED_HOSTS, comma separated): `name` (any port), `name:port` (that port only),
`*.example.com` (any sub-domain, any port), `*` (any host). Names compare case-insensitively; IPv6 as
`[::1]`. Defaults: with no token at all (`serve --insecure`, loopback only) the loopback names with
the served port; otherwise any host (the token is what protects it; set the variable to narrow it).
Starlette's TrustedHostMiddleware drops the port before comparing, so it cannot say "this port only".
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence

from ajet_runner.service.api.middleware import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class HostsError(ValueError):
    """An allowed-hosts setting that cannot be used (e.g. a foreign name for an API without a token)."""


def parse_hosts(value: str) -> tuple[str, ...]:
    """The entries of AJET_RUNNER_ALLOWED_HOSTS, lower-cased, without blanks."""
    return tuple(dict.fromkeys(h.strip().lower() for h in value.split(",") if h.strip()))


def split_host(host: str) -> tuple[str, str]:
    """(name, port) of a Host header value; port "" when absent. `[::1]:8080` -> ("[::1]", "8080")."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return host, ""
        name, rest = host[: end + 1], host[end + 1:]
        return name, rest[1:] if rest.startswith(":") else ""
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return name, port
    return host, ""


def is_loopback_name(name: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (brackets allowed)."""
    name = name.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def loopback_hosts(port: int | None, bound: str = "") -> tuple[str, ...]:
    """The loopback names a local browser uses for this server (with `port`, when known)."""
    names = list(LOOPBACK_NAMES)
    if bound and is_loopback_name(bound):
        literal = f"[{bound.strip('[]')}]" if ":" in bound.strip("[]") else bound
        names.append(literal.lower())
    suffix = f":{port}" if port else ""
    return tuple(dict.fromkeys(f"{n}{suffix}" for n in names))


def allowed_hosts(configured: str, *, open_api: bool, port: int | None = None, bound: str = "") -> tuple[str, ...]:
    """The entries in force. An API open without a token takes loopback names only: a configured
    foreign name is refused (HostsError) rather than opening the API to rebinding."""
    entries = parse_hosts(configured)
    if not open_api:
        return entries or ("*",)
    if not entries:
        return loopback_hosts(port, bound)
    foreign = [e for e in entries if e == "*" or e.startswith("*.") or not is_loopback_name(split_host(e)[0])]
    if foreign:
        raise HostsError(f"AJET_RUNNER_ALLOWED_HOSTS names {', '.join(foreign)}, but an API without a token "
                         "answers loopback names only (a foreign name would open it to DNS rebinding): "
                         "set AJET_RUNNER_TOKEN to serve other names")
    return entries


def host_allowed(host: str, entries: Sequence[str]) -> bool:
    """Whether a Host header value matches one of the entries."""
    if not host:
        return False
    name, port = split_host(host)
    for entry in entries:
        if entry == "*":
            return True
        e_name, e_port = split_host(entry)
        if e_port and e_port != port:
            continue
        if e_name.startswith("*."):
            if name.endswith(e_name[1:]) and len(name) > len(e_name) - 1:
                return True
        elif name == e_name:
            return True
    return False


class TrustedHosts:
    """ASGI middleware, first in the stack: 400 for a Host not allowed, before any other code runs."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str]) -> None:
        self.app = app
        self.hosts = tuple(hosts)
        self.any = "*" in self.hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.any:
            await self.app(scope, receive, send)
            return
        host = ""
        for name, value in scope.get("headers", []):
            if name == b"host":
                host = value.decode("latin-1")
                break
        if host_allowed(host, self.hosts):
            await self.app(scope, receive, send)
            return
        shown = host[:100] or "(none)"
        why = f"Host {shown!r} is not one this server answers (AJET_RUNNER_ALLOWED_HOSTS)"
        body = json.dumps({"detail": f"invalid request: {why}", "problems": [
            {"level": "error", "field": "Host", "message": why}]}).encode()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 400, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
