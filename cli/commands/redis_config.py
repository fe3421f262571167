"""The Redis a long-running command (`worker`, `serve`, `drain`) uses, or a clear error naming the setting:
REDIS_URL, or AJET_RUNNER_REDIS_SENTINELS with AJET_RUNNER_REDIS_MASTER (store/connection.py). Mixed or
broken settings stop the command at start; nothing falls back to another Redis."""

from __future__ import annotations

import typer

# From store/clients.py, not store/connection.py: the worker checks its Redis before it starts its watcher, and
# the connection module brings the whole Store (pydantic records, rq) with it (issue 39).
from ajet_runner.store.clients import RedisSettingsError, RedisTarget, check_reachable, need_target
from ajet_runner.store.settings import Settings

NONE = ("REDIS_URL is not set (e.g. REDIS_URL=redis://redis-host:6379/0), nor AJET_RUNNER_REDIS_SENTINELS "
        "(e.g. redis-0:26379,redis-1:26379,redis-2:26379) with AJET_RUNNER_REDIS_MASTER")


def redis_or_exit(settings: Settings, *, check: bool = True) -> RedisTarget:
    """The configured Redis; with `check`, every sentinel must answer and name the master now."""
    try:
        target = need_target(settings)
        if check:
            check_reachable(target)
    except RedisSettingsError as exc:
        message = NONE if str(exc).startswith("no Redis configured") else str(exc)
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2) from exc
    return target
