"""Drives one experiment through the lifecycle machine, from wherever Redis says it is.

Each state has one handler module in workers/drive/states/ (as each watch rule has one in
statemachine/rules/) that does that state's I/O and fires the next trigger. Every
transition is persisted and published (through the Journal) before the next action, so a
worker that dies anywhere leaves a record the next worker can resume from: a run that is
alive in tmux is re-adopted and watched, never launched twice.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ajet_runner.logsetup import bind
from ajet_runner.resultdir.roots import OutsideRoots, check_inside, confined, parse_roots
from ajet_runner.statemachine.blueprint.swarm_blueprint import SwarmSpec
from ajet_runner.statemachine.lifecycle import EventType, Lifecycle, RepairBudget, State
from ajet_runner.statemachine.models import Blueprint, Level, Problem
from ajet_runner.statemachine.policies import parse_backoff
from ajet_runner.statemachine.rules import default_rules
from ajet_runner.store.cluster.stats import TransitionStats
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store, TransitionConflict
from ajet_runner.workers.drive.journal import REDIS_ERRORS, Journal, LostOwnership
from ajet_runner.workers.drive.seam import WatchCallback
from ajet_runner.workers.drive.states import HANDLERS
from ajet_runner.workers.executors import build_executor, executor_for_handle
from ajet_runner.workers.executors.attempt import MARKER
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Executor
from ajet_runner.workers.gang.head import GangHead, gang_head
from ajet_runner.workers.identity.owner_identity import driver_identity
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.repair.adviser import advised_stat
from ajet_runner.workers.repair.config_patch import patch_config_copy
from ajet_runner.workers.report.plot_preload import PlotAhead
from ajet_runner.workers.swarm.hooks import swarm_plan
from ajet_runner.workers.swarm.server_watch import ServerWatch
from ajet_runner.workers.watching.watch import AttemptWatch

log = logging.getLogger(__name__)


class ExperimentDriver:
    """Drives one experiment; its state handlers see it as a `Drive` (workers/drive/seam.py)."""

    def __init__(self, store: Store, exp_id: str, settings: Settings, node: NodeInfo, owner: str,
                 runner: Executor | None = None,
                 on_watch: WatchCallback | None = None,
                 handback: threading.Event | None = None) -> None:
        self.store = store
        self.id = exp_id
        self.settings = settings
        self.node = node
        self.owner = owner
        self.on_watch = on_watch
        self.handback = handback  # set once the hosting process stops: the watch gives the run back
        rec = store.records.get(exp_id)
        if rec is None:
            raise LookupError(f"experiment {exp_id} does not exist")
        self.rec = rec
        self.bp = Blueprint.model_validate(rec.blueprint_json)
        self.lc = Lifecycle.from_dict(rec.lifecycle or {"id": exp_id})
        self.lc.budget = RepairBudget(settings.repair_budget, settings.repair_budget_per_signature)
        self.ctx = rec.ctx
        self.journal = Journal(store, exp_id, owner, rec.version, node=node.name)
        self.started_at = rec.started_at or None
        self.handle = RunHandle.from_dict(rec.handle) if rec.handle else None
        # A run already started is found again by the executor that started it; a new one runs on the host the
        # blueprint names (never anywhere else), else on this worker's executor.
        self.runner: Executor = runner or (executor_for_handle(settings, self.handle) if self.handle is not None
                                           else build_executor(settings, "ssh" if self.bp.exp_host else None,
                                                               host=self.bp.exp_host or None))
        self.watch: AttemptWatch | None = None
        self.server_watch: ServerWatch | None = None  # swarm mode: the server, watched beside the client
        self.cleaned_attempt = 0  # none yet by this driver (an adopted run in collecting is cleaned up there)
        self.plot_ahead = PlotAhead()  # the report's plot, drawn while the run is watched
        self.rules = default_rules(
            time_limit_grace=settings.time_limit_grace_seconds,
            stall_seconds=settings.stall_seconds,
            diagnosis_settle=settings.diagnosis_settle_seconds,
            plateau_after_fraction=settings.plateau_after_fraction,
            plateau_window=settings.plateau_evaluations,
            plateau_epsilon=settings.plateau_epsilon,
            first_step_seconds=settings.first_step_seconds,
        )
        self.backoff = parse_backoff(settings.progress_backoff)
        self.roots = parse_roots(settings.allowed_roots)
        # A multi-node run (nnodes > 1): this driver is the head's (rank 0); see workers/drive/gang_steps.py.
        self.gang: GangHead | None = gang_head(store, rec, settings, node, renew=self.renew,
                                                cancelled=lambda: self.store.runs.cancel_requested(self.id))

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> str:
        """Drive until finished (returns the outcome) or until the experiment is not ours.

        Every file it writes stays inside the allowed roots (checked at each write, not once)."""
        with confined(self.roots):
            return self._drive()

    def _drive(self) -> str:
        if self.lc.finished:
            self.journal.close(timeout=1.0)
            return self.lc.outcome  # e.g. the API finished a queued one while this job waited
        bind(experiment=self.id, state=self.lc.state)  # on every log line of this drive
        try:
            if self.lc.state != State.queued.value:
                self._adopt()
            while not self.lc.finished:
                if not HANDLERS[self.lc.state](self):
                    return ""  # handed back (e.g. waiting for GPUs) without finishing
        finally:
            # Deliver what is buffered (a node cut off from Redis waits here for it to come back).
            self.journal.close(timeout=self.settings.redis_outage_wait_seconds)
            bind(experiment=None, state=None)
        try:
            if self.store.records.flag_set(self.id, "delete_requested"):
                self.store.records.delete(self.id)  # DELETE on a running experiment: drop it once it is finished
        except REDIS_ERRORS:
            log.warning("%s: could not check for a delete request", self.id)
        return self.lc.outcome

    def _adopt(self) -> None:
        """Take over an unfinished experiment whose previous owner's lease ran out."""
        lease = self.store.server_time() + self.settings.lease_seconds
        self.journal.transition({"owner": self.owner, "lease_until": lease, "node": self.node.name,
                                 **driver_identity()},
                                {"type": EventType.adopted, "owner": self.owner, "state": self.lc.state}, ack=True)
        self.renew()

    def fire(self, trigger: str, reason: str = "", fields: dict[str, Any] | None = None, ack: bool = False,
             repair_stat: tuple[str, str] | None = None, advised: tuple[str, str] | None = None,
             **detail: Any) -> None:
        """Fire `trigger` and persist the new state with its event; `repair_stat` is (signature, result)."""
        before = self.lc.state
        entry = self.lc.fire(trigger, reason=reason, **detail)
        stats = TransitionStats(transition=(before, self.lc.state), repair=repair_stat,
                                write_failure=str(detail.get("write_failure") or ""))
        if repair_stat:
            advised = advised or (advised_stat(self.ctx.repairs[-1]) if self.ctx.repairs else None)
        stats.advised = advised
        record = {
            "state": self.lc.state, "outcome": self.lc.outcome, "reason": self.lc.reason,
            "attempt": self.lc.attempt, "lifecycle": self.lc.to_dict(), "ctx": self.ctx.to_json(),
            **(fields or {}),
        }
        if self.lc.finished:
            record["finished_at"] = entry["at"]
            start = self.started_at or self.rec.created_at or entry["at"]
            stats.outcome = self.lc.outcome
            stats.duration = max(0.0, entry["at"] - start)
        self.journal.transition(record, {"type": EventType.transition, **entry, **detail}, stats, ack=ack)
        bind(state=self.lc.state)
        log.info("%s: %s -> %s (%s) %s", self.id, before, self.lc.state, trigger, reason)

    # -- steps several state handlers share (the handlers are in workers/drive/states/; the Drive protocol) ----
    def swarm_port(self) -> int | None:
        if self.ctx.swarm.get("spec"):
            return SwarmSpec.model_validate(self.ctx.swarm["spec"]).port
        spec, _ = swarm_plan(self.bp)
        return spec.port if spec else None

    def patch_config(self, new_changes: list[dict[str, Any]]) -> str:
        """Every change so far onto a fresh copy of the user's YAML (workers/repair/config_patch.py); the diff."""
        return patch_config_copy(self.ctx, Path(self.bp.yaml_abspath()), self.id, self.bp.exp_codebase_dir,
                                 new_changes)

    def root_problems(self) -> list[Problem]:
        """Codebase, result dir, YAML and venv resolved now, each inside the allowed roots."""
        out = []
        for fld, path, keep_name in (("exp_codebase_dir", self.bp.exp_codebase_dir, False),
                                     ("exp_result_dir", self.bp.exp_result_dir, False),
                                     ("exp_yaml_path", self.bp.yaml_abspath(), False),
                                     ("exp_venv_exe", self.bp.exp_venv_exe, True)):
            try:
                if path:
                    check_inside(path, self.roots, keep_name=keep_name)
            except OutsideRoots as exc:
                out.append(Problem(level=Level.error, field=fld, message=str(exc)))
        return out

    def cleanup_processes(self) -> list[int]:
        """Scoped cleanup: this experiment's own processes only (never `--autokill`'s host-wide kill);
        returns the pids it stopped."""
        killed = self.runner.kill_marked(MARKER, self.id, grace=5.0)  # where the runs live (session host)
        if killed:
            self.journal.publish({"type": EventType.cleanup, "killed_pids": killed,
                                  "message": f"killed {len(killed)} leftover process(es) of this experiment"})
        return list(killed)

    def renew(self) -> None:
        self.journal.renew(self.settings.lease_seconds)

__all__ = ["ExperimentDriver", "LostOwnership", "TransitionConflict"]
