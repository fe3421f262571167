"""The multi-node (gang) steps the state handlers call for a run with nnodes > 1 (`d.gang` set).

The head's driver (rank 0) reserves every node at once, starts the other ranks first and its own
command once they run, watches them, and stops them whenever its attempt ends; the gang logic itself
is in workers/gang/head.py (head) and workers/gang/rank.py (the other ranks).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from ajet_runner.statemachine.lifecycle import EventType, Trigger
from ajet_runner.statemachine.rules.gang_members import gang_finding
from ajet_runner.store.naming import session_name
from ajet_runner.store.records import PendingRepair
from ajet_runner.workers.drive.journal import REDIS_ERRORS
from ajet_runner.workers.executors.attempt import attempt_paths
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.gang.env import gang_env
from ajet_runner.workers.gang.head import GangFailed
from ajet_runner.workers.gang.paths import rank_paths, rank_session

if TYPE_CHECKING:
    from ajet_runner.workers.drive.seam import Drive


def reserve(d: Drive) -> list[int] | None:
    """This run's GPUs here (None: not now); a multi-node run reserves every node's at once, all or nothing."""
    if d.gang is not None:
        gpus = d.gang.reserve()
        return None if gpus is None else gpus
    return d.store.slots.reserve_gpus(d.node.name, d.id, max(1, d.rec.gpus_needed), d.node.gpus)


def release(d: Drive) -> None:
    """Give back this run's GPUs: every node's for a gang, this node's otherwise."""
    if d.gang is not None:
        d.gang.release()
    elif d.node.manages_gpus:
        d.store.slots.release_gpus(d.node.name, d.id)


def session_and_paths(d: Drive) -> tuple[str, dict[str, Path]]:
    """The tmux session and files of this attempt; a multi-node head's carry its rank (0)."""
    if d.gang is not None:
        return rank_session(d.bp.exp_purpose, d.id, 0), rank_paths(d.bp.exp_result_dir, d.lc.attempt, 0)
    return session_name(d.bp.exp_purpose, d.id), attempt_paths(d.bp.exp_result_dir, d.lc.attempt)


def launch_members(d: Drive) -> dict[str, str] | None:
    """The other ranks first (each on its node, in its own session); the head's variables once they run.
    None when they did not start: the attempt already failed (or was cancelled) here."""
    assert d.gang is not None
    try:
        launch = d.gang.launch_members(d.lc.attempt, d.ctx.command, d.ctx.env)
    except GangFailed as exc:
        _launch_failed(d, str(exc))
        return None
    d.ctx.gang = {k: launch[k] for k in ("attempt", "master_addr", "master_port", "nnodes")}
    d.journal.publish({"type": EventType.gang, "message": f"{launch['nnodes'] - 1} non-head rank(s) running; starting "
                       f"the head with MASTER_ADDR={launch['master_addr']} MASTER_PORT={launch['master_port']}",
                       **d.ctx.gang})
    return gang_env(launch, 0)


def _launch_failed(d: Drive, reason: str) -> None:
    """Stop what did start; a stop request is a cancel, anything else a repairable gang failure."""
    stop_members(d)
    if d.journal.cancel_requested():
        d.fire(Trigger.cancel, "stop requested")
        return
    finding = gang_finding(reason)
    d.ctx.pending_repair = PendingRepair(cause=finding.model_dump(), reason=reason, log_excerpt=reason,
                                         log_tail=[reason])
    d.fire(Trigger.anomaly, f"the gang did not start: {reason}", signature=finding.signature)


def record_head(d: Drive, handle: RunHandle, log_path: Path) -> None:
    if d.gang is not None:
        d.gang.record_head(d.lc.attempt, handle, log_path)


def problem(d: Drive) -> str | None:
    """Why a non-head rank is gone; unknown (None) while Redis is unreachable: the head keeps watching."""
    if d.gang is None:
        return None
    try:
        return d.gang.problem(d.lc.attempt)
    except REDIS_ERRORS:
        return None


def stop_members(d: Drive, phase: str = "stop") -> None:
    """The head's attempt ended (any reason): every other rank's command is stopped too, no process left."""
    if d.gang is None:
        return
    try:
        left = d.gang.stop_members(d.lc.attempt, phase)
    except REDIS_ERRORS as exc:  # the ranks stop by themselves once they see the experiment finished
        left = [f"every rank (redis unreachable: {exc})"]
    if left:
        d.journal.publish({"type": EventType.warning, "message": f"{', '.join(left)} did not confirm the stop"})


def finish(d: Drive) -> None:
    """Collecting: every rank stopped for good, and listed (node, rank, session, log) for the report."""
    if d.gang is None:
        return
    stop_members(d, "done")
    with contextlib.suppress(*REDIS_ERRORS):  # the report then lists no nodes; it is written anyway
        d.ctx.gang = {**d.ctx.gang, "members": d.gang.members()}
