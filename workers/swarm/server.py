"""The swarm server of a swarm-mode experiment: reuse one that listens, else start, await, stop.

AgentJet's swarm server (`ajet-swarm start --swarm-port=N`) blocks once it listens and keeps
running after a client finishes, so the runner treats it as part of the experiment:

- something already listening on the port is *reused*: recorded, never started twice, never
  stopped by this experiment;
- otherwise the server runs in its own tmux session (`<experiment session>_swarm`, so the
  name holds `ajet`, the purpose slug and `swarm`) through `TmuxRunner.start`, its output in
  `logs/server-<n>.log`, and the client may start only once the port accepts connections or
  the log shows `Starting swarm server on port` — within a boot timeout; a server that exits
  or times out first is a `SwarmServerFailed` naming why, with its log;
- at the end a server this experiment started is stopped (SIGINT first) and no process of it
  is left (`TmuxRunner.stop` raises otherwise).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ajet_runner.statemachine.blueprint.swarm_blueprint import SwarmSpec
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.store.naming import session_name
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Runner

__all__ = ["READY_LINE", "SwarmServer", "SwarmServerFailed", "port_listening", "answers_http",
           "server_session", "client_env", "ensure_server"]

READY_LINE = "Starting swarm server on port"
DEFAULT_BOOT_TIMEOUT = 15 * 60.0
_POLL = 0.1


class SwarmServerFailed(RuntimeError):
    """The server could not be brought up (exited, timed out); `log_path` holds its output."""

    def __init__(self, reason: str, log_path: Path | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_path = log_path


def port_listening(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on `host:port`."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def answers_http(port: int, host: str = "127.0.0.1", timeout: float = 2.0) -> bool:
    """Whether the listener on the port speaks HTTP (any status line counts)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            sock.settimeout(timeout)
            return sock.recv(16).startswith(b"HTTP/")
    except OSError:
        return False


def server_session(purpose: str, exp_id: str) -> str:
    """The tmux session of an experiment's swarm server: `ajet_<purpose slug>_<id>_swarm`."""
    return f"{session_name(purpose, exp_id)}_swarm"


def client_env(spec: SwarmSpec, command: str, env: Mapping[str, str]) -> dict[str, str]:
    """The client's environment: `AJET_SWARM_URL` added when neither the command nor `env` sets it."""
    out = dict(env)
    if "AJET_SWARM_URL" not in command and "AJET_SWARM_URL" not in out:
        out["AJET_SWARM_URL"] = spec.url()
    return out


@dataclass
class SwarmServer:
    """A server this experiment uses: reused (not ours) or started by us (`handle`)."""

    spec: SwarmSpec
    reused: bool
    handle: RunHandle | None = None
    log_path: Path | None = None

    def alive(self, runner: Runner) -> bool:
        """A reused server is alive while the port listens; ours while its process runs."""
        if self.handle is None:
            return port_listening(self.spec.port or 0)
        return runner.is_running(self.handle)

    def stop(self, runner: Runner, grace: float = 10.0) -> int | None:
        """Stop a server we started (gracefully, nothing left behind); a reused one is left alone."""
        if self.reused or self.handle is None:
            return None
        return runner.stop(self.handle, grace)


def _log_has_ready_line(path: Path) -> bool:
    try:
        return READY_LINE in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def await_ready(runner: Runner, handle: RunHandle, port: int, timeout: float) -> None:
    """Return once the server listens; raise SwarmServerFailed when it exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if port_listening(port, timeout=0.2) or _log_has_ready_line(handle.log_path):
            return
        rc = runner.exit_code(handle)
        if rc is not None or (handle.pid is not None and not runner.is_running(handle)):
            raise SwarmServerFailed(f"the swarm server exited (code {rc}) before listening on port {port}",
                                    handle.log_path)
        if time.monotonic() >= deadline:
            raise SwarmServerFailed(f"the swarm server did not listen on port {port} within {format_limit(timeout)}",
                                    handle.log_path)
        time.sleep(_POLL)


def ensure_server(
    runner: Runner,
    spec: SwarmSpec,
    *,
    purpose: str,
    exp_id: str,
    cwd: str,
    env: Mapping[str, str],
    log_dir: Path,
    n: int,
    boot_timeout: float = DEFAULT_BOOT_TIMEOUT,
    base_env: Mapping[str, str] | None = None,
) -> SwarmServer:
    """Reuse a listening server or start one (attempt `n`) and wait until it listens.

    A listener that does not answer HTTP is not a swarm server: SwarmServerFailed, nothing started.
    """
    if spec.port is None:
        raise SwarmServerFailed(f"the swarm port {spec.port_text!r} is not a number")
    if port_listening(spec.port):
        if not answers_http(spec.port):
            raise SwarmServerFailed(f"port {spec.port} is in use by something that does not answer HTTP")
        return SwarmServer(spec=spec, reused=True)
    log_dir = Path(log_dir)
    session = server_session(purpose, exp_id)
    if runner.exists(session):  # a previous attempt's server that died: its pane may linger
        runner.kill_session(session)
    handle = runner.start(
        session, spec.server_command, cwd=cwd, env=dict(env),
        log_path=log_dir / f"server-{n}.log", rc_path=log_dir / f"server-{n}.rc",
        pid_path=log_dir / f"server-{n}.pid", base_env=base_env,
    )
    server = SwarmServer(spec=spec, reused=False, handle=handle, log_path=handle.log_path)
    try:
        await_ready(runner, handle, spec.port, boot_timeout)
    except SwarmServerFailed:
        if runner.is_running(handle):
            runner.stop(handle, 5.0)
        raise
    return server

