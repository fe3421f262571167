"""Names both sides agree on: tmux sessions, RQ queues, the job a queue carries.

The API names an experiment's tmux session when it accepts it (the record shows it) and the worker
launches it under that same name, so the function lives here rather than next to tmux.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

SESSION_PREFIX = "ajet"
SLUG_MAX = 40
_HEXISH = re.compile(r"^[0-9a-f-]{8,}$")
DEFAULT_QUEUE = "default"


def node_queue(node: str) -> str:
    """The queue only `node`'s worker serves (experiments targeted at that node)."""
    return f"node:{node}"


def host_queue(host: str) -> str:
    """The queue of the experiments that name ssh host `host` (`user@host:port` or an alias, as canonical)."""
    return f"host:{host}"


def queue_names(node: str, hosts: Sequence[str] = ()) -> list[str]:
    """A worker serves its own node's queue first, then the shared one; an ssh worker (`hosts`) its node's
    queue, then the queues of the hosts it serves, never the shared one (those experiments run beside a worker)."""
    if hosts:
        return [node_queue(node), *(host_queue(h) for h in hosts)]
    return [node_queue(node), DEFAULT_QUEUE]


def target_queue(node: str | None) -> str:
    """Where an experiment for `node` (None: any node) waits."""
    return node_queue(node) if node else DEFAULT_QUEUE


def _slug(text: str, limit: int) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "_", ascii_text.lower()).strip("_")[:limit].strip("_")


def session_name(purpose: str, exp_id: str) -> str:
    """`ajet_<purpose slug>_<short id>`: only [a-z0-9_], so tmux never rewrites it (no `.` or `:`).

    Purposes with no ascii letters (e.g. Chinese) become `exp`. The short id is the first 6
    characters of a random-looking (hex/uuid) id, else 6 hex digits of its sha1, so it
    stays deterministic for one experiment.
    """
    purpose_slug = _slug(purpose, SLUG_MAX) or "exp"
    low = exp_id.strip().lower()
    hexish = _HEXISH.match(low)
    short = low.replace("-", "")[:6] if hexish else hashlib.sha1(exp_id.encode("utf-8")).hexdigest()[:6]
    return f"{SESSION_PREFIX}_{purpose_slug}_{short}"
