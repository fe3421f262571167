"""A member node's supervisor keeps its ranks of multi-node runs driven: when a rank job died (its lease
ran out) or was never started, it enqueues a new one here, which re-adopts the rank's session."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from ajet_runner.statemachine.lifecycle import ACTIVE_STATE_NAMES, FINISHED
from ajet_runner.statemachine.models import Blueprint
from ajet_runner.store.cluster.gangs import GangStore
from ajet_runner.store.store import Store
from ajet_runner.workers.executors.attempt import MARKER
from ajet_runner.workers.executors.protocol import Executor
from ajet_runner.workers.gang.paths import rank_marker, rank_session

log = logging.getLogger(__name__)



def adopt_ranks(store: Store, gangs: GangStore, node: str, now: float,
                lease_seconds: float) -> list[tuple[str, int]]:
    """(experiment, rank) pairs whose rank job was enqueued on this node's queue now. Reads only the
    cluster's live gangs (few), never every unfinished record."""
    sent = []
    for exp_id in gangs.ids():
        gang = gangs.get(exp_id)
        if gang is None:
            gangs.forget(exp_id)  # released (or expired) since it was listed
            continue
        if node not in gang.nodes[1:] or not gang.launch:
            continue  # not a member here, or no launch asked yet: the head dispatches the first rank jobs
        if not _active_elsewhere(store, exp_id, node):
            continue
        rank = gang.nodes.index(node)
        if gang.rank_lease(rank) > now or now - gang.rank_enqueued_at(rank) < 2 * lease_seconds:
            continue
        gangs.mark_enqueued(exp_id, rank, now)
        store.jobs.enqueue_rank(exp_id, rank, node)
        sent.append((exp_id, rank))
    return sent


def _active_elsewhere(store: Store, exp_id: str, node: str) -> bool:
    """An unfinished multi-node run whose head is on another node (read: the scan's few fields, not the record)."""
    found = store.records.fields_of([exp_id], ("state", "node", "nnodes"))
    rec = found[0] if found else None
    return rec is not None and int(rec.get("nnodes") or 1) > 1 and rec.get("state") in ACTIVE_STATE_NAMES \
        and rec.get("node") != node


def held_by_gang(gangs: GangStore, rec: dict[str, Any] | None, node: str) -> bool:
    """GPUs on `node` held for an unfinished multi-node run this node is a member of: not stale."""
    if rec is None or rec.get("state") == FINISHED or int(rec.get("nnodes") or 1) <= 1:
        return False
    gang = gangs.get(str(rec["id"]))
    return gang is not None and node in gang.nodes


def _still_here(store: Store, gangs: GangStore, rec: Any, exp_id: str, rank: int, node: str) -> bool:
    """The rank still belongs on this node: its run is active and placed it here (adopt_ranks keeps it
    driven), or its rank job is stopping it right now."""
    gang = gangs.get(exp_id)
    if gang is None or rank >= len(gang.nodes) or gang.nodes[rank] != node:
        return False
    return (rec is not None and rec.state in ACTIVE_STATE_NAMES) or gang.rank_lease(rank) > store.server_time()


def sweep_left_ranks(store: Store, gangs: GangStore, runner: Executor, node: str) -> list[tuple[str, int]]:
    """Ranks started on this node that no longer belong here (the run finished or is gone, or the rank moved to
    another node while this one was away) and whose job is gone: stop what is left of them, no process left."""
    swept = []
    for exp_id, rank in gangs.ranks_here(node):
        rec = store.records.get(exp_id)
        if _still_here(store, gangs, rec, exp_id, rank, node):
            continue
        bp = Blueprint.model_validate(rec.blueprint_json if rec is not None else {})
        if rec is not None:
            with contextlib.suppress(Exception):
                runner.kill_session(rank_session(bp.exp_purpose, exp_id, rank))
        killed = runner.kill_marked(MARKER, rank_marker(exp_id, rank), grace=5.0)
        gangs.forget_rank_here(node, exp_id, rank)
        log.info("rank %d of %s left on node %s: stopped (%d process(es))", rank, exp_id, node, len(killed))
        swept.append((exp_id, rank))
    return swept
