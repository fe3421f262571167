"""`ajet-runner session-host`: the per-node tmux server that owns the experiments.

It is deliberately tiny and rarely changes, so it can run with its own lifetime (a systemd
unit, a DaemonSet with `updateStrategy: OnDelete`): a worker restart or upgrade leaves it,
and every experiment it hosts, running. It is `tmux -D` (the server in the foreground, never
exiting when its last session ends) on a socket in a directory shared with the worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import typer

DEFAULT_SOCKET = "/run/ajet-runner/tmux.sock"


def _server_answers(tmux: str, socket: Path) -> str | None:
    """The pid of a tmux server already listening on `socket`, else None."""
    try:
        proc = subprocess.run([tmux, "-S", str(socket), "display-message", "-p", "#{pid}"],
                              capture_output=True, text=True, timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and out.isdigit() else None


def _server_environment() -> dict[str, str]:
    """This environment less the control plane's keys: the tmux server keeps the one it starts with (its
    /proc/<pid>/environ, readable by every experiment it hosts, and the global environment new sessions get)."""
    from ajet_runner.store.settings import get_settings
    from ajet_runner.workers.executors.environment import launch_environment

    return launch_environment(get_settings()).variables


def register(app: typer.Typer) -> None:
    @app.command("session-host", epilog="Example: ajet-runner session-host --socket /run/ajet-runner/tmux.sock")
    def session_host(
        socket: str = typer.Option("", help="tmux socket",
                                   show_default=f"$AJET_RUNNER_TMUX_SOCKET or {DEFAULT_SOCKET}"),
        config: str = typer.Option("/dev/null", help="tmux config file for the server", show_default="none"),
    ) -> None:
        """Run this node's tmux server in the foreground; workers use it through AJET_RUNNER_TMUX_SOCKET."""
        tmux = shutil.which("tmux")
        if tmux is None:
            typer.echo("error: tmux is not installed (e.g. 'apt-get install tmux')", err=True)
            raise typer.Exit(2)
        path = Path(socket or os.environ.get("AJET_RUNNER_TMUX_SOCKET") or DEFAULT_SOCKET)
        path.parent.mkdir(parents=True, exist_ok=True)
        pid = _server_answers(tmux, path)
        if pid is not None:
            typer.echo(f"error: a tmux server (pid {pid}) already listens on {path}; "
                       "it keeps its sessions: stop it first only when nothing runs there", err=True)
            raise typer.Exit(1)
        if path.is_socket():
            path.unlink()  # left by a server that is gone (a node reboot, a killed pod)
        typer.echo(f"session host: tmux server on {path}", err=True)
        os.execve(tmux, [tmux, "-D", "-S", str(path), "-f", config], _server_environment())
