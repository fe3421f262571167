"""The node process behind `ajet-runner worker`: the watcher, heartbeat, re-adoption, drain.

It runs no experiment itself. It keeps the node's watcher process alive (workers/node/watcher.py:
`slots` experiments at once, a thread each), tells Redis the node is up and what it has, and
hands every unfinished experiment of this node whose driver died or gave it back (its lease
ended) to the watcher, which re-adopts the tmux session. Its scan reads only this node's work;
the queue (lost jobs, absent nodes) is checked by one supervisor per cluster (queue_check.py).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from ajet_runner.statemachine.lifecycle import FINISHED, EventType
from ajet_runner.store.connection import RedisTarget
from ajet_runner.store.per_experiment.queue import node_queue
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import REDIS_DOWN, Store
from ajet_runner.workers.executors import build_executor
from ajet_runner.workers.executors.protocol import Executor
from ajet_runner.workers.executors.ssh_hosts import served_hosts
from ajet_runner.workers.gang.adopt import adopt_ranks, held_by_gang, sweep_left_ranks
from ajet_runner.workers.identity.owner_identity import driver_alive, owner_dead
from ajet_runner.workers.identity.this_node import HEARTBEAT_SECONDS, NodeInfo
from ajet_runner.workers.identity.this_node import heartbeat as node_heartbeat
from ajet_runner.workers.node.queue_check import QueueChecker
from ajet_runner.workers.node.watcher_process import spawn_watcher

log = logging.getLogger(__name__)
ADOPT_SCAN_SECONDS = 3.0
# With no run of its own and no multi-node run in the cluster, a node scans this seldom: whatever starts
# here meanwhile holds a lease longer than this (capped at lease - ADOPT_SCAN_SECONDS below), so the next
# scan sees it, and goes back to ADOPT_SCAN_SECONDS, before it could need adopting.
IDLE_SCAN_SECONDS = 10.0
SCAN_FIELDS = ("lease_until", "adopt_enqueued_at", "max_seconds", "owner", "driver_pid", "driver_pidns",
               "driver_started")
HOLDER_FIELDS = ("state", "node", "nnodes")  # what the GPU / swarm port checks read of a holder


class NodeSupervisor:
    def __init__(self, settings: Settings, node: NodeInfo, redis: RedisTarget | str) -> None:
        self.settings = settings
        self.node = node
        self.url = redis  # the watcher is handed the same Redis (a URL, or the sentinels)
        self.store = Store.from_url(redis, socket_timeout=10, socket_connect_timeout=5, health_check_interval=0)
        self.gangs = self.store.gangs()
        self._runner: Executor | None = None  # for sweeping ranks left on this node (workers/gang/adopt.py)
        self.watcher: subprocess.Popen[bytes] | None = None
        self._indexed = False  # ensure_indexes() runs at the first scan
        self.stopping = threading.Event()
        self.started_at = time.time()
        self.running: list[str] = []
        self.on_tick: Callable[[NodeSupervisor], None] | None = None
        # the queue's health: checked by one supervisor of the cluster, the lease holder (queue_check.py)
        self.queue_check = QueueChecker(self.store, node.name, settings.node_absent_report_seconds)
        self._master: tuple[str, int] | None = None  # under Sentinel: the master this supervisor last used
        self.switches = 0  # failovers seen (each triggers a scan of this node's runs at once)
        self._switched_at = 0.0  # monotonic: when the last one was seen

    # -- the watcher -------------------------------------------------------------------------
    def _spawn(self) -> None:
        self.watcher = spawn_watcher(self.node, self.url)

    def _keep_watcher(self) -> None:
        """Restart the watcher if it died (a drain does not stop it: it takes no new job then, and
        keeps watching the runs it has)."""
        proc = self.watcher
        if proc is not None and proc.poll() is None:
            return
        if proc is not None:
            log.warning("the watcher exited with %s: restarting it", proc.returncode)
        self._spawn()

    def _stop_watcher(self, timeout: float = 10.0) -> None:
        """SIGTERM: it takes no new job and its drivers hand their runs back (they live on in tmux)."""
        proc = self.watcher
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    # -- node state ---------------------------------------------------------------------------
    def heartbeat(self) -> bool:
        """One round trip (plus the GPU owners on a GPU node); returns whether the node is drained."""
        return node_heartbeat(self.store, self.node, self.running, self.started_at,
                              executor=self.settings.executor or "local", hosts=served_hosts(self.settings))

    def scan_every(self) -> float:
        """Seconds to the next adoption scan: ADOPT_SCAN_SECONDS while this node has runs (or the cluster a
        multi-node run, whose ranks may be here), else IDLE_SCAN_SECONDS (see there)."""
        if self.running or self.gangs.ids():
            return ADOPT_SCAN_SECONDS
        return max(ADOPT_SCAN_SECONDS, min(IDLE_SCAN_SECONDS, self.settings.lease_seconds - ADOPT_SCAN_SECONDS))

    def adopt_orphans(self) -> list[str]:
        """Enqueue a drive job for each of this node's unfinished experiments that nobody drives."""
        now = self.store.server_time()
        adopted = []
        if not self._indexed:
            self._indexed = True
            self.store.indexes.backfill()  # records from before the indexes existed: once per cluster
        self.queue_check.run(now)  # one round trip here, unless this supervisor holds the cluster's lease
        adopt_ranks(self.store, self.gangs, self.node.name, now, self.settings.lease_seconds)
        sweep_left_ranks(self.store, self.gangs, self._executor(), self.node.name)
        mine = self._unfinished_here()
        self.running = [rec["id"] for rec in mine]
        starts: dict[int, int | None] = {}  # /proc read once per owner process, not once per run
        for rec in mine:
            why = self._orphaned(rec, now, starts)
            if why:
                self._adopt(rec, now, why)
                adopted.append(rec["id"])
        self._release_stale_gpus()
        self._release_stale_swarm_ports()
        return adopted

    def _orphaned(self, rec: dict, now: float, starts: dict[int, int | None]) -> str:
        """Why nobody drives this run (its adoption event's message), or "" when it is driven, or was
        enqueued for adoption less than two lease periods ago."""
        lease = float(rec.get("lease_until") or 0)
        gone = lease > now and self._owner_gone(rec, starts)
        if gone:
            lease = 0.0
        last_try = float(rec.get("adopt_enqueued_at") or 0)
        if lease > now or now - last_try < 2 * self.settings.lease_seconds or (
                driver_alive(rec) and not self._forsaken(lease, now)):
            return ""
        return "its driver is gone: re-adopting the run" if gone else "driver lease expired: re-adopting the run"

    def _adopt(self, rec: dict, now: float, why: str) -> None:
        """A drive job for the run at the front of this node's queue, and an `adoption` event saying why."""
        self.store.records.update(rec["id"], {"adopt_enqueued_at": now})
        self.store.jobs.enqueue_drive(rec["id"], node_queue(self.node.name), at_front=True,
                                      max_seconds=float(rec.get("max_seconds") or 0) or None)
        self.store.events.publish(rec["id"], {"type": EventType.adoption, "node": self.node.name, "message": why})

    def _forsaken(self, lease: float, now: float) -> bool:
        """After a failover, a run whose driver's process lives on but whose lease stayed expired for two lease
        periods is driven by nobody: its driver finished, and the write that said so was lost with the old
        master (a live driver renews its lease every third of a period once Redis answers). It is re-adopted:
        the result dir (rc file, finish.flag) says what happened, as after a crash."""
        wait = 2 * self.settings.lease_seconds  # live drivers renew within a third of a period once Redis is back
        return bool(self.switches) and time.monotonic() - self._switched_at > wait and lease < now - wait

    def _owner_gone(self, rec: dict, starts: dict[int, int | None]) -> bool:
        """The owner is provably dead (this node and boot, its pid gone or reused): its lease is ended now,
        not waited out (workers/identity/owner_identity.py)."""
        owner = str(rec.get("owner") or "")
        if not owner_dead(owner, self.node.name, starts) or not self.store.runs.end_dead_lease(rec["id"], owner):
            return False
        log.info("%s: its driver %s is gone: re-adopting the run without waiting for its lease", rec["id"], owner)
        return True

    def _executor(self) -> Executor:
        if self._runner is None:  # multi-node ranks: an ssh worker's runs are single-node, on their hosts
            self._runner = build_executor(self.settings, "local" if self.settings.executor == "ssh" else None)
        return self._runner

    def _unfinished_here(self) -> list[dict]:
        """This node's launched, unfinished experiments, only the fields the scan needs: from the node's
        own index, so the scan costs the same whatever the other nodes run."""
        return self.store.indexes.node_active(self.node.name, SCAN_FIELDS)

    def _holders(self, ids: list[str]) -> dict[str, dict[str, str]]:
        """The few fields the stale checks read of each GPU or port holder (one pipeline, never the whole
        records: their blueprints made each scan read ~50 kB at 8 runs a node)."""
        return {rec["id"]: rec for rec in self.store.records.fields_of(sorted(set(ids)), HOLDER_FIELDS)}

    def _holder_is_stale(self, rec: dict[str, str] | None) -> bool:
        """A GPU or swarm port holder that finished, vanished, or now runs on another node."""
        return rec is None or rec.get("state") == FINISHED or (
            rec.get("state") != "queued" and rec.get("node") not in ("", self.node.name))

    def _release_stale_gpus(self) -> None:
        """GPUs held by experiments that finished or vanished while their driver was dead."""
        if not self.node.manages_gpus:
            return
        seen: set[str] = set()
        owners = self.store.slots.gpu_owners(self.node.name)
        holders = self._holders(list(owners.values())) if owners else {}
        for gpu, exp_id in owners.items():
            if exp_id not in seen:
                seen.add(exp_id)
                self._release_if_stale(gpu, exp_id, holders.get(exp_id))

    def _release_if_stale(self, gpu: int, exp_id: str, rec: dict[str, str] | None) -> None:
        """Release the GPUs `exp_id` holds here when it no longer runs here (a finished multi-node run's on
        every node at once)."""
        if held_by_gang(self.gangs, rec, self.node.name):
            return  # a member's GPUs of a multi-node run: the record names the head's node
        if rec is not None and rec.get("state") == FINISHED and int(rec.get("nnodes") or 1) > 1 and (
                released_all := self.gangs.release(exp_id)):  # every node's; the gang record expires
            log.info("released the GPUs %s of multi-node run %s (stale)", released_all, exp_id)
            return
        if self._holder_is_stale(rec):
            released = self.store.slots.release_gpus(self.node.name, exp_id)
            log.info("released GPU(s) %s of %s (gpu %d was stale)", released, exp_id, gpu)

    def _release_stale_swarm_ports(self) -> None:
        """Swarm ports held by experiments that finished or vanished while their driver was dead:
        otherwise every later swarm experiment on that port would wait queued for ever."""
        owners = self.store.slots.swarm_port_owners(self.node.name)
        holders = self._holders(list(owners.values())) if owners else {}
        for port, exp_id in owners.items():
            stale = self._holder_is_stale(holders.get(exp_id))
            if stale and self.store.slots.release_swarm_port(self.node.name, exp_id, port):
                log.info("released swarm port %d of %s (stale)", port, exp_id)

    def _undrain_on_start(self) -> None:
        """A node comes back by itself: the drain its previous worker's preStop hook set ends now;
        an operator's `drain --sticky` stays."""
        try:
            undone = self.store.nodes.undrain_on_start(self.node.name)
            kept = None if undone else self.store.nodes.drain_info(self.node.name)
        except REDIS_DOWN as exc:
            log.warning("redis unreachable, drain state not checked: %s", exc)
            return
        if undone:
            log.info("node %s: taking work again (it was drained by %s%s before this worker started)",
                     self.node.name, undone["by"] or "someone", f": {undone['reason']}" if undone["reason"] else "")
        elif kept:
            log.info("node %s stays drained: sticky drain by %s%s (ajet-runner drain --undo ends it)",
                     self.node.name, kept["by"] or "someone", f": {kept['reason']}" if kept["reason"] else "")

    def master_moved(self) -> bool:
        """Under Sentinel, True once after each failover this process saw (the client now talks to another
        master): the node's runs are re-read at once, not at the next scan."""
        now = self.store.master_address()
        moved = now is not None and self._master is not None and now != self._master
        if now is not None:
            self._master = now
        if moved and now is not None:
            self.switches += 1
            self._switched_at = time.monotonic()
            log.warning("the Redis master moved to %s:%d: re-reading this node's runs (a failover may have lost "
                        "the last writes; drivers restore their records, runs nobody drives are re-adopted)", *now)
        return moved

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> None:
        log.info("node %s: %d GPU(s), %d slot(s)", self.node.name, self.node.gpus, self.node.slots)
        self._keep_watcher()  # first: its start-up overlaps ours, so the runs we re-adopt are taken sooner
        self._undrain_on_start()
        next_beat = next_scan = 0.0
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                try:
                    if self.master_moved():
                        next_scan = now
                    if now >= next_scan:
                        self.adopt_orphans()
                        next_scan = now + self.scan_every()
                    if now >= next_beat:
                        self.heartbeat()
                        next_beat = now + HEARTBEAT_SECONDS
                except REDIS_DOWN as exc:
                    log.warning("redis unreachable: %s", exc)
                self._keep_watcher()
                if self.on_tick:
                    self.on_tick(self)
                self.stopping.wait(0.5)
        finally:
            self._stop_watcher()
            self._leave()

    def _leave(self) -> None:
        """A clean exit with nothing left running here: stop listing the node (no "down" alert for
        a node that left on purpose). With runs still in tmux it stays listed, and shows as down.
        The queue check passes to another supervisor at once."""
        try:
            self.queue_check.leave()
            if not self._unfinished_here():
                self.store.nodes.forget(self.node.name)
        except REDIS_DOWN as exc:
            log.warning("could not unregister node %s: %s", self.node.name, exc)
