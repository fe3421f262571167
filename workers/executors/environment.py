"""The environment an attempt starts from: the launching process's (the user's shell for `run` and `demo`,
the worker's for a worker), less everything of the control plane.

A blueprint runs arbitrary code by design; it must not run with the service's keys. So no variable named
for the control plane (every `AJET_RUNNER_*`, `REDIS_URL`, the redis-cli password) and no variable whose
value holds one of its secrets under another name (the Redis URL or its password, an API token, the
token file's tokens, the webhook secret, the adviser's key) reaches the job. The worker keeps them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ajet_runner.store.settings import Settings

CONTROL_PLANE_PREFIX = "AJET_RUNNER_"
CONTROL_PLANE_NAMES = frozenset({"REDIS_URL", "REDIS_PASSWORD", "REDISCLI_AUTH", "RQ_REDIS_URL"})
_MIN_SECRET = 6  # shorter values (e.g. a password "x") would match ordinary text: those names are dropped anyway


@dataclass
class LaunchEnvironment:
    """What the job starts from, and what was held back (names only: never values)."""

    variables: dict[str, str]
    withheld: list[str] = field(default_factory=list)


def _redis_secrets(url: str) -> list[str]:
    if not url:
        return []
    found = [url]
    try:
        parts = urlsplit(url)
        if parts.password:
            found.append(unquote(parts.password))
    except ValueError:
        pass
    return found


def _file_tokens(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [t.strip() for line in text.splitlines() for t in line.split(",") if t.strip()]


def control_plane_secrets(settings: Settings) -> list[str]:
    """Every secret value the control plane holds (non-empty, long enough to recognise)."""
    values = [*_redis_secrets(settings.redis_url),
              *(t.strip() for t in settings.token.split(",")),
              *(_file_tokens(settings.token_file) if settings.token_file else []),
              settings.webhook_secret.get_secret_value(),
              settings.llm_api_key.get_secret_value()]
    if settings.llm_api_key_file:
        values += _file_tokens(settings.llm_api_key_file)[:1]
    values.append(settings.redis_password.get_secret_value())  # the master's and the sentinels'
    return sorted({v for v in values if v and len(v) >= _MIN_SECRET})


def is_control_plane_name(name: str) -> bool:
    return name.startswith(CONTROL_PLANE_PREFIX) or name in CONTROL_PLANE_NAMES


def launch_environment(settings: Settings, environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
    """The launching process's environment with the control plane's variables and secrets taken out."""
    source = os.environ if environ is None else environ
    secrets = control_plane_secrets(settings)
    kept: dict[str, str] = {}
    withheld: list[str] = []
    for name, value in source.items():
        if is_control_plane_name(name) or any(s in value for s in secrets):
            withheld.append(name)
        else:
            kept[name] = value
    return LaunchEnvironment(kept, sorted(withheld))


def worker_environment(node: str) -> str:
    """Whose environment a job on this worker starts from, as the report and `check` name it."""
    return (f"the environment of the worker on node {node} (`run`, `demo` and `up` start it from the shell that ran "
            "them), less the control plane's variables")
