"""The seam between the driver and its state handlers: what a handler (workers/drive/states/), a gang step
(workers/drive/gang_steps.py) or a watch observer may use of the driver, and nothing more.

`ExperimentDriver` (workers/drive/driver.py) is the one implementation; mypy checks it against `Drive`
wherever a handler is called with it (the HANDLERS table). The attributes a handler sets (the run's
handle, its watches, when it started, the attempt whose leftovers were cleaned up) are plain attributes here;
everything else is read-only to them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ajet_runner.statemachine.lifecycle import Lifecycle
    from ajet_runner.statemachine.models import Blueprint, Problem
    from ajet_runner.statemachine.rules import Rule
    from ajet_runner.store.records import Context, ExperimentRecord
    from ajet_runner.store.settings import Settings
    from ajet_runner.store.store import Store
    from ajet_runner.workers.drive.journal import Journal
    from ajet_runner.workers.executors.handle import RunHandle
    from ajet_runner.workers.executors.protocol import Runner
    from ajet_runner.workers.gang.head import GangHead
    from ajet_runner.workers.identity.this_node import NodeInfo
    from ajet_runner.workers.report.plot_preload import PlotAhead
    from ajet_runner.workers.swarm.server_watch import ServerWatch
    from ajet_runner.workers.watching.watch import AttemptWatch

WatchCallback = Callable[[str, float, int, float], None]  # (id, tick seconds, bytes read, seconds since output)


class Drive(Protocol):
    """One experiment being driven: its record, its machine, its I/O ports, and the driver's shared steps."""

    # -- what a handler sets
    handle: RunHandle | None  # the attempt's run (launching sets it)
    watch: AttemptWatch | None  # the attempt's log and results watch (running sets it)
    server_watch: ServerWatch | None  # swarm mode: the server's watch (running sets it)
    started_at: float | None  # when the experiment started running (queued sets it)
    cleaned_attempt: int  # the attempt whose leftover processes the end of its watch stopped (running sets it)

    # -- what a handler reads (and may mutate in place: ctx, lc through fire)
    @property
    def id(self) -> str: ...
    @property
    def store(self) -> Store: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def node(self) -> NodeInfo: ...
    @property
    def owner(self) -> str: ...
    @property
    def runner(self) -> Runner: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def rec(self) -> ExperimentRecord: ...
    @property
    def bp(self) -> Blueprint: ...
    @property
    def lc(self) -> Lifecycle: ...
    @property
    def ctx(self) -> Context: ...
    @property
    def rules(self) -> list[Rule]: ...
    @property
    def backoff(self) -> tuple[float, ...]: ...
    @property
    def roots(self) -> tuple[str, ...]: ...
    @property
    def gang(self) -> GangHead | None: ...
    @property
    def plot_ahead(self) -> PlotAhead: ...
    @property
    def on_watch(self) -> WatchCallback | None: ...
    @property
    def handback(self) -> threading.Event | None: ...

    # -- the driver's steps several handlers share
    def fire(self, trigger: str, reason: str = "", fields: dict[str, Any] | None = None, ack: bool = False,
             repair_stat: tuple[str, str] | None = None, advised: tuple[str, str] | None = None,
             **detail: Any) -> None:
        """Fire `trigger`; persist and publish the new state (through the journal) before going on."""
        ...

    def renew(self) -> None:
        """Extend the owner's lease (raises LostOwnership once it is gone)."""
        ...

    def swarm_port(self) -> int | None: ...

    def patch_config(self, new_changes: list[dict[str, Any]]) -> str:
        """Every config change so far onto a fresh copy of the user's YAML; the diff."""
        ...

    def root_problems(self) -> list[Problem]:
        """Codebase, result dir, YAML and venv resolved now, each inside the allowed roots."""
        ...

    def cleanup_processes(self) -> list[int]:
        """Stop this experiment's own leftover processes; their pids."""
        ...
