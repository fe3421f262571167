"""How long queued work has waited for a node that no live worker serves (pure: numbers in, numbers out).

A blueprint may be submitted for a named node with `wait_for_node`; if that node never comes (or
went away), the work would wait silently for ever. The supervisors (event) and the API's /metrics
(gauge, alert) both use this one definition to report it.
"""

from __future__ import annotations


def node_absent_for(now: float, last_seen: float | None, queued_since: float, alive_seconds: float) -> float | None:
    """Seconds the node has been gone for this queued work, or None while it is alive.

    Gone since its last heartbeat, or — for a node never seen (or forgotten) — since the work was queued,
    whichever is later: the work cannot have waited longer than it has existed.
    """
    if last_seen is not None and now - last_seen < alive_seconds:
        return None
    since = max(last_seen or 0.0, queued_since)
    return max(0.0, now - since)
