"""The head's side of a multi-node run: reserve the gang, launch the other ranks first, watch them,
stop them, release every node's GPUs. The driver calls these at the matching states; all gang
state lives in Redis (service.gang_store), so a restarted head driver carries on where it was.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from ajet_runner.statemachine.durations import format_duration, format_limit
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.cluster.gangs import Gang, GangStore
from ajet_runner.store.records import ExperimentRecord
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import NODE_ALIVE_SECONDS, Store
from ajet_runner.workers.gang.env import free_port
from ajet_runner.workers.identity.this_node import NodeInfo


class GangFailed(RuntimeError):
    """The other ranks could not be started: the reason is the attempt's failure."""


def gang_head(store: Store, rec: ExperimentRecord, settings: Settings, node: NodeInfo, *,
              renew: Callable[[], None], cancelled: Callable[[], bool]) -> GangHead | None:
    """The head's gang helper for a multi-node experiment record (`nnodes` > 1), else None."""
    if rec.nnodes <= 1:
        return None
    named = [n for n in rec.target_nodes.split(",") if n]
    return GangHead(store, store.gangs(), rec.id, settings, node, renew=renew, cancelled=cancelled,
                    nnodes=rec.nnodes, per_node=rec.gpus_per_node or 1, named=named)


class GangHead:
    def __init__(self, store: Store, gangs: GangStore, exp_id: str, settings: Settings, node: NodeInfo, *,
                 renew: Callable[[], None], cancelled: Callable[[], bool], nnodes: int, per_node: int,
                 named: list[str] | None = None) -> None:
        self.named = named or []  # the submission's `nodes`: the gang uses only these
        self.store = store
        self.gangs = gangs
        self.id = exp_id
        self.nnodes = nnodes
        self.per_node = per_node
        self.settings = settings
        self.node = node
        self.renew = renew
        self.cancelled = cancelled

    # -- placement -----------------------------------------------------------------------------
    def _live_nodes(self) -> list[dict[str, Any]]:
        now = time.time()
        return [n for n in self.store.nodes.all() if now - float(n.get("last_seen") or 0) < NODE_ALIVE_SECONDS]

    def candidates(self) -> list[tuple[str, int]]:
        """Live, undrained nodes with their GPU totals: where the other ranks may go."""
        out = []
        for n in self._live_nodes():
            if n.get("drain"):
                continue
            if self.named and n["name"] not in self.named:
                continue
            if n["name"] != self.node.name:
                out.append((str(n["name"]), int(n.get("gpus") or 0)))  # 0: GPUs not managed there
        return out

    def reserve(self) -> list[int] | None:
        """All or nothing: `per_node` GPUs on this node (rank 0) and on nnodes-1 others; this node's GPUs."""
        gang = self.gangs.reserve(self.id, (self.node.name, self.node.gpus), self.candidates(), self.nnodes,
                                  self.per_node)
        if gang is None:
            return None
        return gang.gpus[self.node.name] if self.node.manages_gpus else []

    # -- launching -----------------------------------------------------------------------------
    def address(self) -> str:
        """MASTER_ADDR: this node's hostname as the experiment sees it, or the worker's `--address`."""
        return self.settings.node_address or os.uname().nodename

    def launch_members(self, attempt: int, command: str, env_overrides: dict[str, str]) -> dict[str, Any]:
        """Ask every non-head rank to start attempt `attempt` and wait until all run; returns the launch
        spec (MASTER_ADDR/PORT ...). Raises GangFailed with the reason when one cannot start.

        A launch of this attempt still in force (a restarted head driver) is kept, port and all; any other
        gets a new id, and a rank runs only the launch whose id it last started."""
        gang = self._gang()
        launch = dict(gang.launch)
        if not (launch.get("attempt") == attempt and launch.get("phase") == "launch"):
            launch = {"id": uuid.uuid4().hex[:12], "attempt": attempt, "phase": "launch", "command": command,
                      "env_overrides": env_overrides, "master_addr": self.address(), "master_port": free_port(),
                      "nnodes": len(gang.nodes)}
            self.gangs.set_launch(self.id, launch)
        deadline = time.monotonic() + self.settings.gang_start_timeout_seconds
        while True:
            self.renew()
            gang = self._replace_lost(self._gang())
            self.dispatch(gang)
            waiting = self._waiting_for(gang, launch["id"])
            if not waiting:
                return launch
            if self.cancelled():
                raise GangFailed("stop requested while the other ranks were starting")
            if time.monotonic() >= deadline:
                limit = self.settings.gang_start_timeout_seconds
                raise GangFailed(f"{', '.join(waiting)} not running after {format_limit(limit)} "
                                 "(is a worker serving that node, with a free slot?)")
            time.sleep(self.settings.poll_interval)

    def _waiting_for(self, gang: Gang, launch_id: str) -> list[str]:
        """The ranks not yet running this launch (`rank N (node)`); GangFailed when one ended instead."""
        waiting = []
        for rank, node in enumerate(gang.nodes[1:], start=1):
            mine = gang.rank_state(rank)
            if mine.get("launch_id") != launch_id or mine.get("state") in (None, "starting"):
                waiting.append(f"rank {rank} ({node})")
            elif mine.get("state") != "running":
                raise GangFailed(f"rank {rank} on node {node} did not start: {self._ended(mine)}")
        return waiting

    def _replace_lost(self, gang: Gang) -> Gang:
        """Members whose node is gone (no heartbeat) are swapped for other live nodes with room, all at once;
        until that fits, the gang waits (the start timeout bounds it)."""
        live = {str(n["name"]) for n in self._live_nodes()}
        lost = [n for n in gang.nodes[1:] if n not in live]
        if not lost:
            return gang
        moved = self.gangs.replace_members(self.id, lost, self.candidates())
        if moved is None:
            return gang
        self.store.events.publish(self.id, {"type": EventType.gang,
                                            "message": f"node(s) {', '.join(lost)} gone: their rank(s) "
                                            f"now run on {', '.join(n for n in moved.nodes if n not in gang.nodes)}",
                                            "nodes": moved.nodes})
        return moved

    def dispatch(self, gang: Gang) -> list[int]:
        """Enqueue a rank job on each member node whose rank nobody drives (lease run out or never held)."""
        now = self.store.server_time()
        sent = []
        for rank, node in enumerate(gang.nodes[1:], start=1):
            if gang.rank_lease(rank) > now:
                continue
            if now - gang.rank_enqueued_at(rank) < 2 * self.settings.lease_seconds:
                continue
            self.gangs.mark_enqueued(self.id, rank, now)
            self.store.jobs.enqueue_rank(self.id, rank, node)
            sent.append(rank)
        return sent

    def record_head(self, attempt: int, handle: Any, log_path: Any) -> None:
        """Rank 0 in the gang record too, so the report lists every rank the same way."""
        self.gangs.set_rank(self.id, 0, "", {"node": self.node.name, "attempt": attempt, "state": "running",
                                             "session": handle.session, "log": str(log_path), "at": time.time()})

    # -- watching ------------------------------------------------------------------------------
    def problem(self, attempt: int) -> str | None:
        """Why a non-head rank of this attempt is gone, or None while every one runs."""
        gang = self._gang()
        now = self.store.server_time()
        for rank, node in enumerate(gang.nodes[1:], start=1):
            mine = gang.rank_state(rank)
            if mine.get("launch_id") != gang.launch.get("id") or gang.launch.get("attempt") != attempt:
                continue
            if mine.get("state") in ("exited", "stopped"):
                return f"rank {rank} on node {node} ended while the head was running: {self._ended(mine)}"
            late = now - gang.rank_lease(rank)
            if late > self.settings.gang_member_grace_seconds:
                return (f"rank {rank} on node {node}: its worker's lease ran out {format_duration(late)} ago "
                        "(the node or its worker is gone)")
        return None

    # -- ending --------------------------------------------------------------------------------
    def stop_members(self, attempt: int, phase: str = "stop") -> list[str]:
        """Tell every rank to stop (phase stop, or done at the end) and wait until each reports it;
        returns the ranks that did not confirm in time."""
        self.gangs.set_phase(self.id, phase)
        deadline = time.monotonic() + self.settings.stop_grace_seconds + 20
        while True:
            self.renew()
            gang = self.gangs.get(self.id)
            if gang is None:
                return []
            now = self.store.server_time()
            pending = [f"rank {rank} ({node})" for rank, node in enumerate(gang.nodes[1:], start=1)
                       if gang.rank_state(rank).get("state") not in (None, "stopped")
                       and gang.rank_lease(rank) > now - self.settings.gang_member_grace_seconds]
            if not pending:
                return []
            if time.monotonic() >= deadline:
                return pending
            time.sleep(self.settings.poll_interval)

    def release(self) -> dict[str, list[int]]:
        """Every node's GPUs of this gang, at once."""
        return self.gangs.release(self.id)

    def members(self) -> list[dict[str, Any]]:
        """For the report: every node, rank, session and log."""
        gang = self.gangs.get(self.id)
        if gang is None:
            return []
        return [{"rank": rank, "node": node, "gpus": gang.gpus.get(node), **{
            k: v for k, v in gang.rank_state(rank).items() if k in ("session", "log", "state", "exit_code", "attempt")}}
            for rank, node in enumerate(gang.nodes)]

    def _gang(self) -> Gang:
        gang = self.gangs.get(self.id)
        if gang is None:
            raise GangFailed("the gang's reservation is gone")
        return gang

    @staticmethod
    def _ended(mine: dict[str, Any]) -> str:
        if mine.get("error"):
            return str(mine["error"])
        code = mine.get("exit_code")
        return f"exit code {code}" if code is not None else "it is no longer running"
