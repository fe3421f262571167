"""Report queued work for a node that no worker has served for a while (event once per experiment).

The cluster's queue checker (workers/node/queue_check.py, one elected supervisor) looks at the
queued records each scan, so the report comes from any live node; when no worker is alive at all,
the API's `ajet_runner_queued_for_absent_node` gauge and its alert still show it.
"""

from __future__ import annotations

import logging
from typing import Any

from ajet_runner.statemachine.absence import node_absent_for
from ajet_runner.statemachine.durations import format_duration
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.store import NODE_ALIVE_SECONDS, Store

log = logging.getLogger(__name__)
REPORTED_FIELD = "node_absent_reported_at"


def _absent_for(rec: dict[str, Any], node: str, seen: dict[str, float | None], now: float) -> float | None:
    """How long the node a queued, not yet reported record waits for has been absent; None when it is not
    such a record or the node is there."""
    if rec.get("state") != "queued" or not node or rec.get(REPORTED_FIELD):
        return None
    return node_absent_for(now, seen.get(node), float(rec.get("created_at") or now), NODE_ALIVE_SECONDS)


def report_absent_nodes(store: Store, records: list[dict[str, Any]], now: float, after_seconds: float,
                        seen: dict[str, float | None] | None = None) -> list[str]:
    """Publish a `node_absent` event for each queued record whose node has been gone `after_seconds`
    (`seen`: each known node's last heartbeat, if the caller has read them already)."""
    if seen is None:
        seen = {n["name"]: float(n.get("last_seen") or 0) or None for n in store.nodes.all()}
    reported = []
    for rec in records:
        node = str(rec.get("target_node") or "")
        gone = _absent_for(rec, node, seen, now)
        if gone is None or gone < after_seconds:
            continue
        if not store.records.set_once(rec["id"], REPORTED_FIELD, now):
            continue  # another supervisor reported it first
        store.events.publish(rec["id"], {"type": EventType.node_absent, "node": node, "absent_seconds": round(gone, 1),
                                         "message": f"queued for node {node}, which no live worker has served "
                                                    f"for {format_duration(gone)}"})
        log.warning("%s: queued for node %s, absent for %s", rec["id"], node, format_duration(gone))
        reported.append(rec["id"])
    return reported
