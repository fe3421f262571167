"""A member node's supervisor keeps its ranks of multi-node runs driven: when a rank job died (its lease
ran out) or was never started, it enqueues a new one here, which re-adopts the rank's session."""

from __future__ import annotations

from typing import Any

from statemachine.lifecycle import ACTIVE_STATES
from store.gang import GangStore
from store.queue import enqueue_rank

ACTIVE = {s.value for s in ACTIVE_STATES}


def adopt_ranks(gangs: GangStore, unfinished: list[dict[str, Any]], node: str, now: float,
                lease_seconds: float) -> list[tuple[str, int]]:
    """(experiment, rank) pairs whose rank job was enqueued on this node's queue now."""
    sent = []
    for rec in unfinished:
        if int(rec.get("nnodes") or 1) <= 1 or rec.get("state") not in ACTIVE or rec.get("node") == node:
            continue
        gang = gangs.get(str(rec["id"]))
        if gang is None or node not in gang.nodes[1:] or not gang.launch:
            continue  # not placed yet, or no launch asked yet: the head dispatches the first rank jobs
        rank = gang.nodes.index(node)
        if gang.rank_lease(rank) > now or now - gang.rank_enqueued_at(rank) < 2 * lease_seconds:
            continue
        gangs.mark_enqueued(str(rec["id"]), rank, now)
        enqueue_rank(gangs.r, str(rec["id"]), rank, node)
        sent.append((str(rec["id"]), rank))
    return sent


def held_by_gang(gangs: GangStore, rec: dict[str, Any] | None, node: str) -> bool:
    """GPUs on `node` held for an unfinished multi-node run this node is a member of: not stale."""
    if rec is None or rec.get("state") == "finished" or int(rec.get("nnodes") or 1) <= 1:
        return False
    gang = gangs.get(str(rec["id"]))
    return gang is not None and node in gang.nodes
