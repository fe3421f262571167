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
import re
import shlex
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import libtmux
import psutil

from ajet_runner.resultdir.confined import open_dir, write_at
from ajet_runner.statemachine.command_file import command_script
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.store.naming import SESSION_PREFIX as PREFIX
from ajet_runner.store.naming import session_name
from ajet_runner.workers.process.procs import is_gone, kill_marked, signal_all, wait_gone
from ajet_runner.workers.process.session_host import ServerIdentity, SessionHost

SOCKET_ENV = "AJET_RUNNER_TMUX_SOCKET"
# auto: go through the session host (tmux run-shell) when its server is not in our PID namespace
SESSION_HOST_ENV = "AJET_RUNNER_SESSION_HOST"
SESSION_HOST_MODES = ("auto", "local", "remote")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
POLL = 0.005
TEE_DRAIN_STEPS = 200  # the wrapper waits at most 200 x 25 ms = 5 s for tee to flush before writing the rc
RC_WAIT = 8.0  # stop(): how long the wrapper gets to record the exit code once the job is dead
TERM_WAIT = 3.0  # stop(): between SIGTERM and SIGKILL (never more than `grace`)
KILL_WAIT = 5.0


class TmuxRunnerError(RuntimeError):
    """Base of this module's errors."""


class SessionExists(TmuxRunnerError):
    """A session of that name already runs: never launch a second copy."""


class ProcessesSurvived(TmuxRunnerError):
    """stop() signalled everything, but these pids are still alive (uninterruptible sleep?)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(f"processes still alive after SIGKILL: {pids}")
        self.pids = pids


def _read_int(path: Path) -> int | None:
    """The number on the first line of a file, or None while it is missing or not completely written.

    An rc file may hold a second line, `record-error: <why>` (see `exit_record_note`)."""
    try:
        text = path.read_text()
        return int(text.split("\n", 1)[0]) if text.endswith("\n") else None
    except (FileNotFoundError, ValueError):
        return None


RECORD_ERROR = "record-error: "


def exit_record_note(rc_path: Path) -> str:
    """What the wrapper met writing the rc file the first time (e.g. "No space left on device"), or "".

    It then released the result dir's reserve and wrote the code with this note."""
    try:
        lines = rc_path.read_text().split("\n")
    except OSError:
        return ""
    return next((ln[len(RECORD_ERROR):].strip() or "write error" for ln in lines[1:] if ln.startswith(RECORD_ERROR)),
                "")


@dataclass
class RunHandle:
    """Everything needed to find one attempt again, e.g. after a worker restart (stored in Redis)."""

    session: str
    log_path: Path
    rc_path: Path
    pid_path: Path
    wrapper_path: Path
    socket_path: str | None = None
    pane_pid: int | None = None
    server_pid: int | None = None
    pid: int | None = None
    pid_create_time: float | None = None
    pgid: int | None = None
    started_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("log_path", "rc_path", "pid_path", "wrapper_path"):
            data[key] = str(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunHandle:
        values = dict(data)
        for key in ("log_path", "rc_path", "pid_path", "wrapper_path"):
            values[key] = Path(values[key])
        return cls(**values)

    def wait_for_pid(self, timeout: float, *, local: bool = True) -> int | None:
        """Read the command's pid once the wrapper has written it (None if it never ran).

        Returns early when the rc file appears without a pid (e.g. the cwd vanished).
        `local=False`: the pid is in the session host's namespace; it is not looked up here.
        """
        deadline = time.monotonic() + timeout
        while self.pid is None:
            pid = _read_int(self.pid_path)
            if pid is not None:
                if local:
                    self._adopt_pid(pid)
                else:
                    self.pid = self.pgid = pid
                break
            if self.rc_path.exists() or time.monotonic() >= deadline:
                break
            time.sleep(POLL)
        return self.pid

    def _adopt_pid(self, pid: int) -> None:
        self.pid = pid
        self.pgid = pid  # setsid: the command leads its own session and process group
        try:
            proc = psutil.Process(pid)
            # The wrapper is the command's parent while it runs; anything else is a reused pid.
            if self.pane_pid is None or proc.ppid() == self.pane_pid:
                self.pid_create_time = proc.create_time()
        except psutil.NoSuchProcess:
            pass

    def process(self) -> psutil.Process | None:
        """The command's process if it is still the one we started (pid reuse is checked)."""
        if self.pid is None or self.pid_create_time is None:
            return None
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.pid_create_time) > 0.05:
                return None
            return None if is_gone(proc) else proc
        except psutil.NoSuchProcess:
            return None


_WRAPPER = """\
#!/usr/bin/env bash
# ajet-runner attempt wrapper, generated {generated} for tmux session {session}.
# It runs the launch command, kept verbatim as the script COMMAND_FILE (a multi-line block,
# heredocs and if/fi run as written), in its own session and process group (setsid), so the runner can
# signal the whole job; copies all it prints (stdout+stderr) to this pane and, appended,
# to the log (tee -a); writes the command's pid, then its exit code (128+N when killed by
# signal N): tmux loses exit codes on this platform, so the rc file is the truth.
# Ctrl-C, SIGTERM and SIGHUP sent to this wrapper are forwarded to the command's group.
# Its files live in logs_dir, held as the wrapper's working directory from the start: the log
# and the rc file are written there by relative name (a directory fd, in effect), so a result
# dir swapped for a symlink mid-run is never written through. logs_id is the device:inode of the
# directory the runner checked; the rc is written only while logs_dir still leads to it.
logs_dir={logs_dir}
logs_id={logs_id}
log={log}
rc_file={rc}
pid_file={pid}
reserve={reserve}
linger={linger}
linger_shown={linger_shown}
COMMAND_FILE={command_file}

_ajet_err=
_ajet_put() {{  # atomic: temp file, then rename; a failed write leaves no litter and its error in _ajet_err
    _ajet_err=$( {{ printf '%s\\n' "$2" > "$1.tmp.$$"; }} 2>&1 ) && {mv} -f -- "$1.tmp.$$" "$1" && return 0
    {rm} -f -- "$1.tmp.$$"
    return 1
}}
if ! cd -- "$logs_dir" 2>/dev/null || [ "$({stat} -c %d:%i .)" != "$logs_id" ]; then
    echo "[ajet-runner] refused to start: $logs_dir is no longer the directory that was checked"
    exit 1  # nothing written: the runner names the cause (a result dir outside the allowed roots)
fi
# Traps first: a signal that comes before the command starts is remembered and forwarded
# to it as soon as it exists, and never kills the wrapper before it records the code.
_ajet_pid=
_ajet_sig=
_ajet_hangup=
_ajet_forward() {{
    _ajet_sig=$1
    [ "$1" = HUP ] && _ajet_hangup=1  # the pane is gone: nobody to linger for
    [ -n "$_ajet_pid" ] && kill -s "$1" -- "-$_ajet_pid" 2>/dev/null
}}
trap '_ajet_forward INT' INT
trap '_ajet_forward TERM' TERM
trap '_ajet_forward HUP' HUP
exec 3>&1  # the pane, for the wrapper's own last words
exec > >(trap '' INT TERM HUP; exec {tee} -a -- "$log") 2>&1
_ajet_tee=$!
if ! ( cd -- {cwd} ); then
    echo "[ajet-runner] cannot cd to "{cwd}
    _ajet_put "$rc_file" 1
    exit 1
fi
# The job's environment is exported in a subshell only, so the wrapper, tee and the
# linger sleep carry no experiment marker. A background job ignores SIGINT unless told
# otherwise; `env --default-signal` restores it so a graceful stop works. The job writes
# its own pid once that is done (so no stop signal sent after the pid is known can be
# lost), then becomes bash running COMMAND_FILE: same pid, its own session and process group. Builtins
# only: a bash waiting for a child (say `mv`) swallows a SIGINT the child survives. The
# pid is one write() of "<pid>\\n"; the runner reads it only once the newline is there.
_ajet_job='printf "%s\\n" "$$" > "$1" && exec "$2" -- "$3"'
(
{exports}
    cd -- {cwd} || exit 1
    exec {setsid} {env} --default-signal=INT,QUIT {bash} -c "$_ajet_job" ajet-job "$logs_dir/$pid_file" {bash} \\
        "$logs_dir/$COMMAND_FILE"
) < /dev/null &
_ajet_pid=$!
[ -n "$_ajet_sig" ] && _ajet_forward "$_ajet_sig"
while :; do
    _ajet_sig=
    wait "$_ajet_pid"
    rc=$?
    [ -z "$_ajet_sig" ] && break  # a trapped signal interrupted wait: wait again
done
# Let tee flush what the command printed before the rc says "done". Bounded, because an
# escaped daemon may hold the pipe open for ever.
exec >&3 2>&3
for ((_i = 0; _i < {tee_steps}; _i++)); do
    [ -e "/proc/$_ajet_tee" ] || break
    {sleep} 0.025
done
# A full disk: the reserve kept in the result dir for the final files makes room for the code,
# which then carries the first error, so the run ends failed naming it (never "no exit code").
if [ "$({stat} -L -c %d:%i -- "$logs_dir" 2>/dev/null)" != "$logs_id" ]; then
    echo "[ajet-runner] $logs_dir was moved or swapped while the command ran: exit code $rc not written"
elif ! _ajet_put "$rc_file" "$rc"; then
    _ajet_why=${{_ajet_err##*: }}
    _ajet_why=${{_ajet_why:-write error}}
    [ -n "$reserve" ] && {rm} -f -- "$reserve"
    _ajet_put "$rc_file" "$rc
{record_error}$_ajet_why" || echo "[ajet-runner] exit code $rc not written: $_ajet_why"
fi
trap - INT TERM HUP
printf '\\n[ajet-runner] %(%F %T)T command exited with code %s; this pane closes in %s\\n' -1 "$rc" "$linger_shown"
[ -z "$_ajet_hangup" ] && [ "$linger" -gt 0 ] && {sleep} "$linger"
exit "$rc"
"""


def command_path(log_path: Path) -> Path:
    """Where an attempt's launch command is kept as a script: `<log_stem>.command.sh`."""
    return Path(log_path).with_name(Path(log_path).stem + ".command.sh")


def _command_script(command: str) -> str:
    """The launch command as the body of a script (`ajet_runner.statemachine.command_file`, which `check` shows)."""
    return command_script(command)


def _tool(name: str) -> str:
    """Absolute path of a tool the wrapper needs, resolved now: the job's PATH may not have it."""
    path = shutil.which(name)
    if path is None:
        raise TmuxRunnerError(f"`{name}` is not installed")
    return path


def _wrapper_text(
    session: str, command_file: Path, cwd: str, env: Mapping[str, str], log: Path, rc: Path, pid: Path, linger: int,
    *, logs_id: str, reserve: str = "",
) -> str:
    """The wrapper script. Log, rc, pid and command file share one directory, named relative to it
    here; `logs_id` is that directory's `st_dev:st_ino` as checked (a path may be seen differently
    by a session host in another mount namespace; the inode is the same); `reserve` is the reserve
    file relative to it, or ""."""
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError(f"not a valid environment variable name: {key!r}")
    q = shlex.quote
    return _WRAPPER.format(
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        session=session,
        logs_dir=q(os.path.abspath(log.parent)),
        logs_id=q(logs_id),
        stat=q(_tool("stat")),
        log=q(log.name),
        rc=q(rc.name),
        pid=q(pid.name),
        reserve=q(reserve),
        record_error=RECORD_ERROR,
        linger=int(linger),
        linger_shown=q(format_limit(int(linger))),
        command_file=q(command_file.name),
        cwd=q(cwd),
        exports="\n".join(f"    export {k}={q(v)}" for k, v in env.items()),
        mv=q(_tool("mv")),
        rm=q(_tool("rm")),
        tee=q(_tool("tee")),
        setsid=q(_tool("setsid")),
        env=q(_tool("env")),
        bash=q(_tool("bash")),
        sleep=q(_tool("sleep")),
        tee_steps=TEE_DRAIN_STEPS,
    )


def _job_processes(handle: RunHandle) -> dict[int, psutil.Process]:
    """The job: the command, its descendants, and anything left in its session (re-parented)."""
    found: dict[int, psutil.Process] = {}
    leader = handle.process()
    if leader is not None:
        found[leader.pid] = leader
        with contextlib.suppress(psutil.NoSuchProcess):
            found.update((c.pid, c) for c in leader.children(recursive=True))
    if handle.pid is not None and handle.pid_create_time is not None:
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == handle.pid and proc.create_time() >= handle.pid_create_time - 0.05:
                    found.setdefault(proc.pid, proc)
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                continue
    return {pid: p for pid, p in found.items() if not is_gone(p)}


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
    ) -> RunHandle:
        """Start `command` detached in a new session; returns once its pid is known.

        If the command could not start (e.g. `cwd` vanished) the handle has no pid and
        `exit_code()` tells why it ended; the log says more. The files go into the log's
        directory through a directory fd, confined to the allowed roots when `ajet_runner.resultdir.roots.
        confined` is active (OutsideRoots, a PermissionError, when it is not where it should be).
        `reserve_path` (in the result dir): the wrapper frees it if the disk is full when the
        command ends, to record the exit code.
        """
        if not Path(cwd).is_dir():
            raise NotADirectoryError(cwd)
        if self.exists(session):
            raise SessionExists(session)
        log_path, rc_path, pid_path = Path(log_path), Path(rc_path), Path(pid_path)
        if rc_path.parent != log_path.parent or pid_path.parent != log_path.parent:
            raise ValueError("the log, rc and pid files must share one directory")
        wrapper = log_path.with_name(log_path.stem + ".sh")
        command_file = command_path(log_path)
        dfd = open_dir(log_path.parent)
        try:
            st = os.fstat(dfd)
            logs_id = f"{st.st_dev}:{st.st_ino}"  # the directory that was opened and checked
            for stale in (rc_path, pid_path):  # a previous attempt's files must not be read as ours
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stale.name, dir_fd=dfd)
            write_at(dfd, log_path.name, b"", truncate=False)  # exists before start() returns; tee appends
            write_at(dfd, command_file.name, _command_script(command).encode())
            reserve = os.path.relpath(os.path.abspath(reserve_path), os.path.abspath(log_path.parent)) \
                if reserve_path is not None else ""
            write_at(dfd, wrapper.name, _wrapper_text(
                session, command_file, cwd, env, log_path, rc_path, pid_path, round(self.linger),
                logs_id=logs_id, reserve=reserve).encode(), mode=0o755)
        finally:
            os.close(dfd)
        handle = RunHandle(
            session=session,
            log_path=log_path,
            rc_path=rc_path,
            pid_path=pid_path,
            wrapper_path=wrapper,
            socket_path=self.socket_path,
        )
        # A raw new-session through libtmux's `cmd`: `Server.new_session()` returns a Session
        # whose pane must be fetched by a second query, which fails when a quick command has
        # already ended the session; `-P -F '#{pane_pid}'` gets it atomically (and 3x faster).
        # No `-c cwd`: tmux expands formats there (`#(cmd)` runs cmd), so the wrapper does the
        # `cd`; the shell command itself is not format-expanded (both checked on tmux 3.3a).
        shell_command = f"exec {shlex.quote(_tool('bash'))} {shlex.quote(str(wrapper))}"
        args = ["-d", "-P", "-F", "#{pane_pid}", "-s", session, "-x", "200", "-y", "50"]
        for _ in range(3):
            proc = self.server.cmd("new-session", *args, shell_command)
            # A server exits when its last session ends; a new-session that races that exit
            # fails with "server exited unexpectedly", and a retry starts a fresh server.
            if proc.returncode == 0 or "server exited unexpectedly" not in " ".join(proc.stderr):
                break
        if proc.returncode != 0 or not proc.stdout:
            raise TmuxRunnerError(f"tmux new-session failed: {' '.join(proc.stderr)}")
        handle.pane_pid = int(proc.stdout[0])
        if self.remote(refresh=True):
            handle.server_pid = self._ident.pid if self._ident else None
            handle.wait_for_pid(pid_timeout, local=False)
            return handle
        with contextlib.suppress(psutil.NoSuchProcess):
            handle.server_pid = psutil.Process(handle.pane_pid).ppid()
        handle.wait_for_pid(pid_timeout)
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
        return _read_int(handle.rc_path)

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
            _signal_group(handle.pgid, [leader], signal.SIGINT)
            wait_gone([leader], grace)
        seen.update(_job_processes(handle))
        alive = [p for p in seen.values() if not is_gone(p)]
        if alive:
            _signal_group(handle.pgid, alive, signal.SIGTERM)
            signal_all(alive, signal.SIGTERM)
            alive = wait_gone(alive, min(grace, TERM_WAIT))
            seen.update(_job_processes(handle))
            alive = [p for p in seen.values() if not is_gone(p)]
        if alive:
            _signal_group(handle.pgid, alive, signal.SIGKILL)
            signal_all(alive, signal.SIGKILL)
            wait_gone(alive, KILL_WAIT)
        rc = self.wait_for_exit(handle, RC_WAIT if handle.pid is not None else 0.0)
        self.kill_session(handle.session)
        self._reap_nudge(handle)
        leftover = wait_gone(wrapper_tree.values(), 2.0)
        if leftover:  # the wrapper and tee ignore nothing fatal: SIGKILL is a last resort
            signal_all(leftover, signal.SIGKILL)
            wait_gone(leftover, KILL_WAIT)
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
