"""Run one attempt's command in a detached tmux session, and know for sure how it ended.

tmux 3.3a on Debian loses its panes' exit statuses and leaves zombies (docs/background.md#tmux-exit-status), so
tmux is used only to host the job where a person can `tmux attach` and watch. The truth
comes from a generated bash wrapper (`<log_dir>/<log_stem>.sh`, readable by a person):

- the command runs under `setsid`, so it leads its own session and process group: the
  runner can signal the whole job while the wrapper survives to record the exit code;
- everything it prints (stdout and stderr) goes through `tee -a` to the pane and the log;
- the job writes its own pid to `pid_path` (one write of "<pid>\\n", read only once the
  newline is there) after SIGINT is back to default, so a stop sent once the pid is known
  is never lost; the wrapper writes the exit code (128+N for signal N) to `rc_path`
  atomically (temp file + mv);
- liveness comes from psutil (pid + create time, zombie = dead), never from tmux;
- Ctrl-C in the pane, SIGTERM, or SIGHUP (the session was killed) reach the wrapper, which
  forwards them to the job's group and stays to record the code (a hang-up skips linger).

Output capture, measured here (4,000 lines of mixed stdout/stderr, then exit 3):
`tee` 0.13 s, `script -qefa` 0.19 s, both complete and both keep the exit code. `tee` was
chosen: the log holds exactly what the program printed (`\\n` line ends, no
"Script started/done" lines to strip), and the command pid is the process we started.
The cost is that the program sees a pipe, not a tty: Python needs PYTHONUNBUFFERED=1 (the
worker sets it) and colour-on-tty tools print plain text, which suits log matching.
`tmux pipe-pane` was rejected: it attaches only after the pane exists (early output is
lost), writes `\\r\\n`, and stops logging when the tmux server goes away.

After the command ends the pane stays open for `linger` seconds (default 300) showing the
last screen and the exit code, so a person attaching soon after a failure sees it; then it
closes by itself. `stop()` and `kill_session()` close it at once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import libtmux
import psutil

from ajet_runner.resultdir.confined import open_dir, write_at
from ajet_runner.store.naming import SESSION_PREFIX as PREFIX
from ajet_runner.store.naming import session_name
from ajet_runner.workers.executors.environment import is_control_plane_name
from ajet_runner.workers.executors.handle import RunHandle, read_int
from ajet_runner.workers.executors.local.procs import is_gone, kill_marked, signal_all, wait_gone
from ajet_runner.workers.executors.local.session_host import ServerIdentity, SessionHost
from ajet_runner.workers.executors.protocol import Capabilities, ExecutorError, ProcessesSurvived, SessionExists
from ajet_runner.workers.executors.wrapper import (
    WrapperError,
    local_tool,
    wrapper_text,
    write_attempt_files,
)

SOCKET_ENV = "AJET_RUNNER_TMUX_SOCKET"
# auto: go through the session host (tmux run-shell) when its server is not in our PID namespace
SESSION_HOST_ENV = "AJET_RUNNER_SESSION_HOST"
SESSION_HOST_MODES = ("auto", "local", "remote")
POLL = 0.005
RC_WAIT = 8.0  # stop(): how long the wrapper gets to record the exit code once the job is dead
TERM_WAIT = 3.0  # stop(): between SIGTERM and SIGKILL (never more than `grace`)
KILL_WAIT = 5.0


class TmuxRunnerError(ExecutorError):
    """Base of this module's errors."""


def _job_processes(handle: RunHandle) -> dict[int, psutil.Process]:
    """The job: the command, its descendants, and anything left in its session (re-parented)."""
    found: dict[int, psutil.Process] = {}
    leader = handle.process()
    if leader is not None:
        found[leader.pid] = leader
        with contextlib.suppress(psutil.NoSuchProcess):
            found.update((c.pid, c) for c in leader.children(recursive=True))
    for proc in _session_members(handle):
        found.setdefault(proc.pid, proc)
    return {pid: p for pid, p in found.items() if not is_gone(p)}


def _session_members(handle: RunHandle) -> list[psutil.Process]:
    """The processes in the job's session (its leader's pid is the session id), started after it."""
    if handle.pid is None or handle.pid_create_time is None:
        return []
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == handle.pid and proc.create_time() >= handle.pid_create_time - 0.05:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return members


def _alive(seen: dict[int, psutil.Process]) -> list[psutil.Process]:
    return [p for p in seen.values() if not is_gone(p)]


def _signal_and_wait(pgid: int | None, alive: list[psutil.Process], sig: int, wait: float) -> None:
    """`sig` to the job's process group and to each live process, then up to `wait` for them to go."""
    _signal_group(pgid, alive, sig)
    signal_all(alive, sig)
    wait_gone(alive, wait)


def _kill_leftovers(wrapper_tree: Iterable[psutil.Process]) -> None:
    """The wrapper and tee ignore nothing fatal: SIGKILL is a last resort for what is left of them."""
    leftover = wait_gone(wrapper_tree, 2.0)
    if leftover:
        signal_all(leftover, signal.SIGKILL)
        wait_gone(leftover, KILL_WAIT)


def _signal_group(pgid: int | None, members: list[psutil.Process], sig: int) -> None:
    """Signal the job's process group, but only while one of our processes is still in it.

    A live member keeps the pgid from being reused, so the signal cannot reach strangers.
    """
    if pgid is None:
        return
    for proc in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
                return


class TmuxRunner:
    """Starts, watches and stops attempts in tmux sessions on one tmux server."""

    def __init__(self, socket_path: str | None = None, *, linger: float = 300.0, mode: str | None = None) -> None:
        self.socket_path = socket_path or os.environ.get(SOCKET_ENV) or None
        self.server = libtmux.Server(socket_path=self.socket_path) if self.socket_path else libtmux.Server()
        self.linger = linger
        self.mode = (mode or os.environ.get(SESSION_HOST_ENV) or "auto").strip().lower()
        if self.mode not in SESSION_HOST_MODES:
            raise ValueError(f"{SESSION_HOST_ENV}={self.mode!r}: expected one of {', '.join(SESSION_HOST_MODES)}")
        self.host = SessionHost(self.socket_path)
        self._ident: ServerIdentity | None = None
        self._remote = self.mode == "remote"

    # --- where the tmux server lives --------------------------------------------------------
    def remote(self, refresh: bool = False) -> bool:
        """True when the tmux server is not in our PID namespace: then its pids are never used
        here (no psutil, no os.kill); liveness and signals go through the session host's RPC."""
        if self.mode != "auto":
            return self.mode == "remote"
        if self._ident is None or refresh:
            ident = self.host.identity()
            if ident is not None and ident != self._ident:
                self._ident = ident
                self._remote = not self.host.shares_pid_namespace(ident)
        return self._remote

    # --- sessions -------------------------------------------------------------------------
    def start(
        self,
        session: str,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str],
        log_path: Path,
        rc_path: Path,
        pid_path: Path,
        pid_timeout: float = 10.0,
        reserve_path: Path | None = None,
        base_env: Mapping[str, str] | None = None,
    ) -> RunHandle:
        """Start `command` detached in a new session; returns once its pid is known.

        If the command could not start (e.g. `cwd` vanished) the handle has no pid and
        `exit_code()` tells why it ended; the log says more. The files go into the log's
        directory through a directory fd, confined to the allowed roots when `ajet_runner.resultdir.roots.
        confined` is active (OutsideRoots, a PermissionError, when it is not where it should be).
        `reserve_path` (in the result dir): the wrapper frees it if the disk is full when the
        command ends, to record the exit code. `base_env`: the job's whole environment under `env`
        (an env file the wrapper reads and removes); without it the job inherits the tmux server's.
        """
        if not Path(cwd).is_dir():
            raise NotADirectoryError(cwd)
        if self.exists(session):
            raise SessionExists(session)
        log_path, rc_path, pid_path = Path(log_path), Path(rc_path), Path(pid_path)
        if rc_path.parent != log_path.parent or pid_path.parent != log_path.parent:
            raise ValueError("the log, rc and pid files must share one directory")
        wrapper = log_path.with_name(log_path.stem + ".sh")
        self._write_files(session, command, cwd, env, log_path, rc_path, pid_path, wrapper, reserve_path, base_env)
        handle = RunHandle(
            session=session,
            log_path=log_path,
            rc_path=rc_path,
            pid_path=pid_path,
            wrapper_path=wrapper,
            socket_path=self.socket_path,
        )
        handle.pane_pid = self._start_session(session, wrapper, base_env)
        if self.remote(refresh=True):
            handle.server_pid = self._ident.pid if self._ident else None
            handle.wait_for_pid(pid_timeout, local=False)
            return handle
        with contextlib.suppress(psutil.NoSuchProcess):
            handle.server_pid = psutil.Process(handle.pane_pid).ppid()
        handle.wait_for_pid(pid_timeout)
        return handle

    def _write_files(self, session: str, command: str, cwd: str, env: Mapping[str, str], log_path: Path,
                     rc_path: Path, pid_path: Path, wrapper: Path, reserve_path: Path | None,
                     base_env: Mapping[str, str] | None) -> None:
        """The attempt's command, env and wrapper files, written through a directory fd of the logs dir."""
        dfd = open_dir(log_path.parent)
        try:
            logs_id, command_file, reserve, env_file = write_attempt_files(
                dfd, log_path, rc_path, pid_path, command, reserve_path, base_env)
            try:
                text = wrapper_text(session, command_file, cwd, env, log_path, rc_path, pid_path, round(self.linger),
                                    logs_id=logs_id, reserve=reserve, env_file=env_file)
            except WrapperError as exc:
                raise TmuxRunnerError(str(exc)) from exc
            write_at(dfd, wrapper.name, text.encode(), mode=0o755)
        finally:
            os.close(dfd)

    def _start_session(self, session: str, wrapper: Path, base_env: Mapping[str, str] | None) -> int:
        """Start the wrapper in a new detached session; its pane's pid.

        A raw `tmux new-session`: libtmux's `Server.new_session()` returns a Session
        whose pane must be fetched by a second query, which fails when a quick command has
        already ended the session; `-P -F '#{pane_pid}'` gets it atomically (and 3x faster).
        No `-c cwd`: tmux expands formats there (`#(cmd)` runs cmd), so the wrapper does the
        `cd`; the shell command itself is not format-expanded (both checked on tmux 3.3a)."""
        shell_command = f"exec {shlex.quote(local_tool('bash'))} {shlex.quote(str(wrapper))}"
        args = ["-d", "-P", "-F", "#{pane_pid}", "-s", session, "-x", "200", "-y", "50"]
        for _ in range(3):
            proc = self._new_session([*args, shell_command], base_env)
            # A server exits when its last session ends; a new-session that races that exit
            # fails with "server exited unexpectedly", and a retry starts a fresh server.
            if proc.returncode == 0 or "server exited unexpectedly" not in proc.stderr:
                break
        if proc.returncode != 0 or not proc.stdout.strip():
            raise TmuxRunnerError(f"tmux new-session failed: {proc.stderr.strip()}")
        return int(proc.stdout.split()[0])

    def _new_session(self, args: list[str], base_env: Mapping[str, str] | None) -> subprocess.CompletedProcess[str]:
        """`tmux new-session` from an environment without the control plane's keys: the first one starts the
        tmux server, whose /proc/<pid>/environ keeps that environment for its whole life and is readable by
        every process of the user, the experiments it hosts included (libtmux would hand it the worker's)."""
        tmux = self.server.tmux_bin or shutil.which("tmux") or "tmux"
        where = ["-S", self.socket_path] if self.socket_path else []
        source = os.environ if base_env is None else base_env
        env = {k: v for k, v in source.items() if not is_control_plane_name(k)}
        return subprocess.run([tmux, *where, "new-session", *args], env=env, capture_output=True, text=True,
                              encoding="utf-8", errors="backslashreplace", check=False)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(name="local", local_pids=not self.remote())

    def attach_command(self, handle: RunHandle) -> str:
        socket = f"-S {shlex.quote(self.socket_path)} " if self.socket_path else ""
        return f"tmux {socket}attach -t {shlex.quote(handle.session)}"

    def sync(self, handle: RunHandle) -> None:
        """The wrapper writes into the result dir itself: nothing to bring over."""

    def adopt(self, session: str, paths: Mapping[str, Path]) -> RunHandle | None:
        """The attempt a crashed worker started but did not record (its wrapper wrote the pid file)."""
        if not paths["pid"].exists():
            return None
        ended = paths["rc"].exists()
        if not ended and not self.exists(session):
            return None  # started, then its session vanished with no exit code (the tmux server died)
        handle = RunHandle(session=session, log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
                           wrapper_path=paths["log"].with_suffix(".sh"), socket_path=self.socket_path)
        if not ended:
            handle.wait_for_pid(1.0, local=not self.remote())
        return handle

    def exists(self, session: str) -> bool:
        return bool(self.server.has_session(session))

    def list_sessions(self, prefix: str = PREFIX) -> list[str]:
        try:
            names = [s.session_name or "" for s in self.server.sessions]
        except libtmux.exc.LibTmuxException:
            return []
        return sorted(n for n in names if n.startswith(prefix))

    def capture(self, session: str, lines: int = 50) -> str:
        """The last `lines` lines of the pane (screen and scroll-back), trailing blanks dropped."""
        found = self.server.sessions.filter(session_name=session)
        pane = found[0].active_pane if found else None
        if pane is None:
            return ""
        text = pane.capture_pane(start=-lines)
        text = text if isinstance(text, list) else []
        while text and not text[-1].strip():
            text.pop()
        return "\n".join(text[-lines:])

    def kill_session(self, session: str) -> None:
        """Kill exactly this session (`=name`: libtmux's target would also match by prefix)."""
        if self.exists(session):
            try:
                self.server.kill_session(f"={session}")
            except libtmux.exc.LibTmuxException:
                if self.exists(session):
                    raise

    # --- the command ----------------------------------------------------------------------
    def is_running(self, handle: RunHandle) -> bool:
        """The command's own process is alive (psutil, pid + create time); tmux is not asked."""
        remote = self.remote()
        if handle.pid is None:
            handle.wait_for_pid(0, local=not remote)
        if handle.rc_path.exists():
            return False
        if remote:
            return handle.pid is not None and self.host.process_alive(handle.pid, handle.pane_pid)
        return handle.process() is not None

    def exit_code(self, handle: RunHandle) -> int | None:
        """The exit code the wrapper recorded (128+N for signal N), or None while unknown."""
        return read_int(handle.rc_path)

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None:
        """Wait until the wrapper has recorded the exit code, at most `timeout` seconds."""
        start = time.monotonic()
        deadline = start + timeout
        while (rc := self.exit_code(handle)) is None and (now := time.monotonic()) < deadline:
            time.sleep(POLL if now - start < 0.5 else POLL * 4)  # the wrapper writes it within ms
        return rc

    def stop(self, handle: RunHandle, grace: float) -> int | None:
        """Stop the job: SIGINT, then SIGTERM, then SIGKILL, then close the session.

        Every process of the job is collected before each signal (children re-parent when
        their parent dies). Raises ProcessesSurvived if any is still alive at the end.
        Returns the recorded exit code (None if the wrapper could not record one).
        """
        if self.remote():
            return self._stop_remote(handle, grace)
        if handle.pid is None:
            handle.wait_for_pid(min(grace, 2.0))
        wrapper_tree = self._wrapper_tree(handle)
        seen = _job_processes(handle)
        leader = handle.process()
        if leader is not None:
            _signal_group(handle.pgid, [leader], signal.SIGINT)  # the group only: one SIGINT each
            wait_gone([leader], grace)
        seen.update(_job_processes(handle))
        alive = _alive(seen)
        if alive:
            _signal_and_wait(handle.pgid, alive, signal.SIGTERM, min(grace, TERM_WAIT))
            seen.update(_job_processes(handle))
            alive = _alive(seen)
        if alive:
            _signal_and_wait(handle.pgid, alive, signal.SIGKILL, KILL_WAIT)
        rc = self.wait_for_exit(handle, RC_WAIT if handle.pid is not None else 0.0)
        self.kill_session(handle.session)
        self._reap_nudge(handle)
        _kill_leftovers(wrapper_tree.values())
        survivors = sorted(p.pid for p in [*seen.values(), *wrapper_tree.values()] if not is_gone(p))
        if survivors:
            raise ProcessesSurvived(survivors)
        return rc

    def _stop_remote(self, handle: RunHandle, grace: float) -> int | None:
        """stop() through the session host: the same escalation, signalled and awaited there."""
        if handle.pid is None:
            handle.wait_for_pid(min(grace, 2.0), local=False)
        gone = True
        if handle.pgid is not None and not handle.rc_path.exists():
            for sig, wait in (("INT", grace), ("TERM", min(grace, TERM_WAIT)), ("KILL", KILL_WAIT)):
                gone = self.host.signal_group(handle.pgid, sig, wait)
                if gone:
                    break
        rc = self.wait_for_exit(handle, RC_WAIT if handle.pid is not None else 0.0)
        self.kill_session(handle.session)
        if handle.server_pid is not None:
            self.host.nudge(handle.server_pid)
        if not gone:
            raise ProcessesSurvived([handle.pgid or 0])
        return rc

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        """Scoped cleanup (processes carrying `name=value`), where the experiments run.

        Remote: the pids are the session host's, for the record only."""
        if self.remote():
            return self.host.kill_marked(name, value, grace)
        return kill_marked(name, value, grace)

    def _wrapper_tree(self, handle: RunHandle) -> dict[int, psutil.Process]:
        if handle.pane_pid is None:
            return {}
        try:
            wrapper = psutil.Process(handle.pane_pid)
            if str(handle.wrapper_path) not in wrapper.cmdline():
                return {}  # a reused pid, not our wrapper
            tree = [wrapper, *wrapper.children(recursive=True)]
        except psutil.NoSuchProcess:
            return {}
        return {p.pid: p for p in tree}

    def _reap_nudge(self, handle: RunHandle) -> None:
        """SIGCHLD to the tmux server makes it reap panes whose exit it missed (docs/background.md#tmux-exit-status)."""
        if handle.server_pid is None:
            return
        try:
            if psutil.Process(handle.server_pid).name().startswith("tmux"):
                os.kill(handle.server_pid, signal.SIGCHLD)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass


__all__ = [
    "ProcessesSurvived",
    "RunHandle",
    "SessionExists",
    "TmuxRunner",
    "TmuxRunnerError",
    "session_name",
]
