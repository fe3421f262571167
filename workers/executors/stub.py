"""The stub executor: scripted attempts in memory, no processes (dramatiq's StubBroker is the model).

`start()` "runs" the next scripted attempt at once: it writes the attempt's log lines, its pid file and,
unless the attempt is to run until stopped, its exit code, exactly where the wrapper would. The rest of
the runner (the store, the machine, the watch, the reports) stays real, so a unit test of one handler
drives a whole experiment in milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Capabilities

SIGINT_EXIT = 130
STUB_PID = 4242


@dataclass
class Script:
    """One attempt: what it prints and how it ends (None: runs until stopped)."""

    lines: list[str] = field(default_factory=list)
    exit_code: int | None = 0


@dataclass
class Started:
    session: str
    command: str
    env: dict[str, str]
    cwd: str
    base_env: dict[str, str] | None = None


class StubExecutor:
    """Every `Executor` method, with scripted attempts."""

    socket_path: str | None = None

    def __init__(self, *scripts: Script) -> None:
        self.scripts = list(scripts)
        self.started: list[Started] = []
        self.sessions: set[str] = set()
        self.stopped: list[str] = []

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(name="stub", attach=False)

    def remote(self, refresh: bool = False) -> bool:
        return False

    # -- sessions
    def exists(self, session: str) -> bool:
        return session in self.sessions

    def kill_session(self, session: str) -> None:
        self.sessions.discard(session)

    def start(self, session: str, command: str, *, cwd: str, env: Mapping[str, str], log_path: Path,
              rc_path: Path, pid_path: Path, pid_timeout: float = 10.0, reserve_path: Path | None = None,
              base_env: Mapping[str, str] | None = None) -> RunHandle:
        if not self.scripts:
            raise RuntimeError(f"no scripted attempt left for {command!r}")
        script = self.scripts.pop(0)
        self.started.append(Started(session, command, dict(env), cwd,
                                    dict(base_env) if base_env is not None else None))
        self.sessions.add(session)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("".join(f"{line}\n" for line in script.lines), encoding="utf-8")
        pid_path.write_text(f"{STUB_PID}\n", encoding="utf-8")
        if script.exit_code is not None:
            rc_path.write_text(f"{script.exit_code}\n", encoding="utf-8")
        return RunHandle(session=session, log_path=log_path, rc_path=rc_path, pid_path=pid_path,
                         wrapper_path=log_path.with_suffix(".sh"), pid=STUB_PID, started_at=time.time(),
                         executor="stub")

    def adopt(self, session: str, paths: Mapping[str, Path]) -> RunHandle | None:
        if not paths["pid"].exists() or (not paths["rc"].exists() and session not in self.sessions):
            return None
        return RunHandle(session=session, log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
                         wrapper_path=paths["log"].with_suffix(".sh"), pid=STUB_PID, executor="stub")

    def sync(self, handle: RunHandle) -> None:
        """Scripted files are written in place."""

    # -- the command
    def is_running(self, handle: RunHandle) -> bool:
        return not handle.rc_path.exists()

    def exit_code(self, handle: RunHandle) -> int | None:
        try:
            return int(handle.rc_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None:
        return self.exit_code(handle)

    def stop(self, handle: RunHandle, grace: float) -> int | None:
        self.stopped.append(handle.session)
        if not handle.rc_path.exists():
            handle.rc_path.write_text(f"{SIGINT_EXIT}\n", encoding="utf-8")
        return self.exit_code(handle)

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        return []

    def attach_command(self, handle: RunHandle) -> str:
        return ""
