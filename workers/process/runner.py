"""What the driver, its state handlers and the swarm hooks need from a runner: start a command in a
session, watch it, stop it. `TmuxRunner` (workers/process/tmux.py) is the real one; the tests drive
experiments through an in-memory one (tests/doubles.py). Both are checked against this by mypy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ajet_runner.workers.process.tmux import RunHandle


@runtime_checkable
class Runner(Protocol):
    """Sessions, the command in them, and a scoped cleanup."""

    @property
    def socket_path(self) -> str | None:
        """The tmux socket the sessions live on (None: the default server)."""
        ...

    def remote(self, refresh: bool = False) -> bool:
        """True when the sessions' processes are not in our PID namespace (no psutil, no os.kill)."""
        ...

    def exists(self, session: str) -> bool: ...

    def kill_session(self, session: str) -> None: ...

    def start(self, session: str, command: str, *, cwd: str, env: Mapping[str, str], log_path: Path,
              rc_path: Path, pid_path: Path, pid_timeout: float = 10.0,
              reserve_path: Path | None = None) -> RunHandle:
        """Run `command` in a new session, its output in `log_path`, its exit code in `rc_path`."""
        ...

    def is_running(self, handle: RunHandle) -> bool: ...

    def exit_code(self, handle: RunHandle) -> int | None: ...

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None: ...

    def stop(self, handle: RunHandle, grace: float) -> int | None:
        """Interrupt, then kill after `grace` seconds; the exit code."""
        ...

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        """Stop the processes whose environment has `name=value`; their pids."""
        ...
