"""The ssh hosts a worker serves (`worker --executor ssh --host H`, AJET_RUNNER_HOSTS), in the canonical form a
blueprint's `exp_host` takes (statemachine/shell/ssh_login.py), so `root@gpu1 -p 22` and `root@gpu1:22` are one host."""

from __future__ import annotations

from typing import Any

from ajet_runner.statemachine.shell.ssh_login import LoginError, parse_target


def canonical_host(text: str) -> str:
    """`user@host:port` or an alias, as a blueprint's host is stored; the text itself when it is not a host."""
    try:
        return str(parse_target(text))
    except LoginError:
        return text.strip()


def served_hosts(settings: Any) -> list[str]:
    """The hosts in `settings.hosts` (comma-separated), canonical, in order, once each."""
    seen: list[str] = []
    for raw in str(getattr(settings, "hosts", "") or "").split(","):
        host = canonical_host(raw) if raw.strip() else ""
        if host and host not in seen:
            seen.append(host)
    return seen
