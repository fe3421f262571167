"""Talk to the tmux server that hosts the experiments, wherever it lives.

A tmux server started by a "session host" (`ajet-runner session-host`, a host systemd unit, a
DaemonSet pod, or `tmux -S SOCKET new-session -d` by hand) outlives any worker that uses its
socket. Such a worker may sit in another PID namespace (another pod, no `hostPID`), where the
pids in the wrapper's pid file mean nothing, or something else: its own `/proc` must not be
asked and `os.kill` must not be used. Everything then goes through the server itself:

- `run-shell` executes a small bash script in the tmux server's namespaces and returns its
  exit status; its stdout comes back through a named tmux buffer. That is the whole RPC.
- liveness: the job pid is alive, not a zombie, and still a child of the attempt's wrapper
  (`/proc/<pid>/stat` read by the server side), and the wrapper has not written its rc file;
- signals: `kill -s SIG -- -<pgid>` (the job leads its own session and process group), run
  there, then waiting there until the group is gone.

`shares_pid_namespace()` tells whether the local fast path (psutil, `os.kill`) is valid: the
server pid that tmux reports must be a tmux process in our `/proc`, started when tmux says
it started, and in our PID namespace.
"""

from __future__ import annotations

import base64
import os
import secrets
import shlex
import shutil
import subprocess
from dataclasses import dataclass

import psutil

from ajet_runner.statemachine.durations import format_limit

RPC_TIMEOUT = 15.0

_ALIVE = """\
pid={pid}; parent={parent}
[ -r /proc/$pid/stat ] || exit 1
read -r stat < /proc/$pid/stat || exit 1
rest=${{stat##*) }}
set -- $rest
[ "$1" != Z ] || exit 1
[ -z "$parent" ] || [ "$2" = "$parent" ] || exit 1
exit 0
"""

_SIGNAL_GROUP = """\
sid={sid}; sig={sig}; wait_steps={steps}
gone() {{ ! kill -0 -- -$sid 2>/dev/null; }}
gone && exit 0
kill -s $sig -- -$sid 2>/dev/null
command -v pkill >/dev/null && pkill -$sig -s $sid 2>/dev/null
for ((i = 0; i < wait_steps; i++)); do gone && exit 0; sleep 0.05; done
gone && exit 0
exit 1
"""

_KILL_MARKED = """\
want={want}; grace_steps={steps}
self=$$
find() {{
    for d in /proc/[0-9]*; do
        p=${{d#/proc/}}
        [ "$p" = "$self" ] && continue
        if tr '\\0' '\\n' < "$d/environ" 2>/dev/null | grep -qxF -- "$want"; then echo "$p"; fi
    done
}}
pids=$(find)
[ -z "$pids" ] && exit 0
kill -s TERM $pids 2>/dev/null
for ((i = 0; i < grace_steps; i++)); do
    left=
    for p in $pids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.05
done
[ -n "$left" ] && kill -s KILL $left 2>/dev/null
echo $pids
"""


@dataclass(frozen=True)
class ServerIdentity:
    pid: int
    start_time: float


class SessionHostError(RuntimeError):
    """The tmux server could not be asked (no server on the socket, or the RPC timed out)."""


class SessionHost:
    """RPC to the tmux server on `socket_path` (None = tmux's default server)."""

    def __init__(self, socket_path: str | None) -> None:
        self.socket_path = socket_path
        exe = shutil.which("tmux")
        if exe is None:
            raise SessionHostError("`tmux` is not installed")
        self.tmux = exe

    def _cmd(self, *args: str, timeout: float = RPC_TIMEOUT) -> subprocess.CompletedProcess[str]:
        base = [self.tmux, *(["-S", self.socket_path] if self.socket_path else [])]
        try:
            return subprocess.run([*base, *args], capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SessionHostError(f"tmux {args[0]} timed out after {format_limit(timeout)}") from exc

    def identity(self) -> ServerIdentity | None:
        """The server's pid (in its own namespace) and start time; None when no server answers."""
        proc = self._cmd("display-message", "-p", "#{pid} #{start_time}")
        try:
            pid, start = proc.stdout.split()
            return ServerIdentity(int(pid), float(start))
        except ValueError:
            return None

    def shares_pid_namespace(self, ident: ServerIdentity) -> bool:
        """True when `ident.pid` is that tmux server as seen from here, in our PID namespace."""
        try:
            proc = psutil.Process(ident.pid)
            if not proc.name().startswith("tmux") or abs(proc.create_time() - ident.start_time) > 2.0:
                return False
            return os.stat(f"/proc/{ident.pid}/ns/pid").st_ino == os.stat("/proc/self/ns/pid").st_ino
        except (psutil.Error, OSError):
            return False

    def run(self, script: str, *, timeout: float = RPC_TIMEOUT, want_output: bool = False) -> tuple[int, str]:
        """Run a bash `script` in the tmux server's namespaces; its exit status (and stdout).

        The script travels base64-encoded, so tmux's format expansion of the run-shell
        command never touches it.
        """
        blob = base64.b64encode(script.encode()).decode()
        body = f"printf %s {blob} | base64 -d | bash"
        if not want_output:
            proc = self._cmd("run-shell", body, timeout=timeout)
            return proc.returncode, ""
        key = f"ajet-rpc-{secrets.token_hex(6)}"
        # `x` keeps the buffer non-empty; `#{socket_path}` is expanded by the server itself.
        wrapped = (f"out=$({body}); rc=$?; tmux -S '#{{socket_path}}' set-buffer -b {key} -- \"x$out\"; "
                   f"exit $rc")
        proc = self._cmd("run-shell", wrapped, timeout=timeout)
        shown = self._cmd("show-buffer", "-b", key)
        self._cmd("delete-buffer", "-b", key)
        out = shown.stdout[1:] if shown.returncode == 0 and shown.stdout.startswith("x") else ""
        return proc.returncode, out

    def process_alive(self, pid: int, parent: int | None) -> bool:
        """`pid` runs (not a zombie) in the server's namespace, as a child of `parent` if given."""
        rc, _ = self.run(_ALIVE.format(pid=int(pid), parent=int(parent) if parent else ""))
        return rc == 0

    def signal_group(self, pgid: int, sig: str, wait: float) -> bool:
        """Send `sig` (a name: INT, TERM, KILL) to the group and session `pgid` there; True once it is gone."""
        steps = max(0, int(wait / 0.05))
        rc, _ = self.run(_SIGNAL_GROUP.format(sid=int(pgid), sig=shlex.quote(sig), steps=steps), timeout=wait + 10)
        return rc == 0

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        """Kill the processes whose environment has `name=value`, there; the pids (server-side) it killed."""
        steps = max(1, int(grace / 0.05))
        _, out = self.run(_KILL_MARKED.format(want=shlex.quote(f"{name}={value}"), steps=steps),
                          timeout=grace + 20, want_output=True)
        return sorted(int(p) for p in out.split() if p.isdigit())

    def nudge(self, server_pid: int) -> None:
        """SIGCHLD to the tmux server (it misses some: docs/background.md#tmux-exit-status), sent from its own
        namespace."""
        self.run(f"kill -s CHLD {int(server_pid)} 2>/dev/null; exit 0")


__all__ = ["ServerIdentity", "SessionHost", "SessionHostError"]
