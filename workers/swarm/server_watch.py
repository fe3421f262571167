"""Watches a swarm experiment's server while the client runs: is it alive, what does its log say.

The observer half of the `swarm_server` rule (statemachine/rules/swarm_server.py): the driver
asks it once per poll and puts the answer in the Observation; the rule decides. A server this
experiment started is alive while its process runs (its log is read incrementally and scanned
for catalogue signatures); a reused server is alive while its port accepts connections (two
failed probes in a row, at most one probe a second, so one slow accept is no death).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.blueprint.swarm_blueprint import SwarmSpec, server_failure_finding
from ajet_runner.statemachine.failures.diagnose import LogScanner
from ajet_runner.statemachine.models import Finding
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Runner
from ajet_runner.workers.swarm.server import SwarmServerFailed, port_listening

__all__ = ["ServerWatch", "server_failure_pending"]

CHUNK = 1 << 20
PROBE_SECONDS = 1.0
EXCERPT_LINES = 25


def _scan_file(scanner: LogScanner, path: Path, offset: int) -> int:
    """Feed what `path` has beyond `offset` to the scanner; returns the new offset."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            while chunk := fh.read(CHUNK):
                offset += len(chunk)
                scanner.feed(chunk)
    except OSError:
        pass
    return offset


@dataclass
class ServerWatch:
    """One look per poll at the experiment's swarm server (ours by its handle, or reused by its port)."""

    runner: Runner
    port: int | None
    handle: RunHandle | None
    scanner: LogScanner = field(default_factory=LogScanner)
    offset: int = 0
    alive: bool = True
    _misses: int = 0
    _next_probe: float = 0.0

    @classmethod
    def of(cls, runner: Runner, swarm: dict[str, Any] | None) -> ServerWatch | None:
        """The watch for an experiment's swarm state (`ctx.swarm`), or None when there is no server."""
        if not swarm or not swarm.get("spec"):
            return None
        handle = RunHandle.from_dict(swarm["handle"]) if swarm.get("handle") else None
        port = SwarmSpec.model_validate(swarm["spec"]).port
        if handle is None and not (swarm.get("reused") and port):
            return None
        return cls(runner=runner, port=port, handle=handle)

    def look(self) -> None:
        """Update `alive` and the log scan (cheap: a pid check and the new bytes of the log)."""
        if not self.alive:
            return
        if self.handle is not None:
            self.offset = _scan_file(self.scanner, self.handle.log_path, self.offset)
            if not self.runner.is_running(self.handle):
                self.offset = _scan_file(self.scanner, self.handle.log_path, self.offset)
                self.scanner.close()
                self.alive = False
            return
        now = time.monotonic()
        if now < self._next_probe:
            return
        self._next_probe = now + PROBE_SECONDS
        self._misses = 0 if port_listening(self.port or 0) else self._misses + 1
        self.alive = self._misses < 2

    @property
    def cause(self) -> Finding | None:
        """The first fatal finding in the server's log (None for a reused server: its log is not ours)."""
        return self.scanner.cause

    def last_line(self) -> str:
        tail = self.scanner.tail(1)
        return tail[-1] if tail else ("" if self.handle else f"nothing listens on port {self.port} any more")

    def excerpt(self) -> str:
        """The end of the server's log, for the repair log."""
        where = f"(server log {self.handle.log_path})" if self.handle else f"(reused server on port {self.port})"
        return "\n".join([where, *self.scanner.tail(EXCERPT_LINES)])


def server_failure_pending(exc: SwarmServerFailed) -> dict[str, Any]:
    """The pending repair of a server that could not be brought up, diagnosed from its log."""
    scanner = LogScanner()
    if exc.log_path is not None:
        _scan_file(scanner, Path(exc.log_path), 0)
        scanner.close()
    tail = scanner.tail(80)
    finding = server_failure_finding(scanner.cause, tail[-1] if tail else "", what=f"failed: {exc.reason}")
    where = f"(server log {exc.log_path})" if exc.log_path else "(no server log)"
    return {"cause": finding.model_dump(), "reason": f"swarm server: {exc.reason}",
            "log_excerpt": "\n".join([where, *tail[-EXCERPT_LINES:]]), "log_tail": tail}
