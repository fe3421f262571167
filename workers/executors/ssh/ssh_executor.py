"""The ssh executor: the attempt runs in a tmux server on the host the blueprint names (`tmux -L ajet-runner`,
the session named as a local one), started through the same attempt wrapper as everywhere; ssh is only
the control channel (workers/executors/ssh/channel.py). A dropped link is not a dead run: the run lives in
tmux on the host, so the next call reconnects and the log is read on from its offset, never relaunched.

Files: when the host shares our filesystem (a token written here into the logs dir is read back there),
the result dir is read in place; otherwise each `sync()` brings the log, the rc and pid files and the
handle's `files` (validation results) over in one call, from the offsets already copied, into the same
paths here (a blueprint's paths are the host's, and the report is written beside them here).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.durations import format_duration, format_limit
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.naming import session_name
from ajet_runner.workers.executors.handle import RunHandle, read_int
from ajet_runner.workers.executors.protocol import Capabilities, ExecutorError, ProcessesSurvived, SessionExists
from ajet_runner.workers.executors.ssh import host_scripts as scripts
from ajet_runner.workers.executors.ssh.channel import HostRefused, SshChannel, SshError
from ajet_runner.workers.executors.wrapper import WrapperError, command_path, command_text, host_tool, wrapper_text

TERM_WAIT = 3.0
KILL_WAIT = 5.0
RC_WAIT = 8.0
FRESH = 1.0  # seconds a probe's answer stands for `is_running` (the watch syncs, then asks, each tick)
_START_ERRORS = {
    "nocwd": "the codebase directory {cwd} does not exist on {host}",
    "notmux": "tmux is not installed on {host} (the run lives in a tmux server there): install it",
    "nodir": "cannot create the logs directory {logs} on {host}",
    "notstarted": "tmux on {host} could not start the session",
}


class SshExecutorError(ExecutorError):
    """The host answered, but the attempt could not be started or found there."""


class _Seen:
    """What the last probe of one run said."""

    def __init__(self) -> None:
        self.at = 0.0
        self.alive = True
        self.session = True
        self.down_since: float | None = None
        self.why = ""


def _read_pids(handle: RunHandle, words: list[str]) -> None:
    """The pane's pid and the job's (its process group) from the start script's answer, when it gave them."""
    handle.pane_pid = int(words[3]) if len(words) > 3 and words[3].isdigit() else None
    if len(words) > 4 and words[4].isdigit():
        handle.pid = handle.pgid = int(words[4])


def _copied_files(handle: RunHandle) -> list[tuple[Path, bool]]:
    """The files copied from a host without a shared disk, each with whether it is read on incrementally
    (appended: the log, the results) or whole (the rc and pid files); none with a shared disk."""
    if handle.remote_dir is None:
        return []
    return [(handle.log_path, True), (handle.rc_path, False), (handle.pid_path, False),
            *((Path(f), True) for f in handle.files)]


class SshExecutor:
    """Starts, watches and stops attempts in a tmux server on one ssh host."""

    socket_path: str | None = None

    def __init__(self, host: str, *, config: str = "", linger: float = 300.0, unreachable_after: float = 300.0,
                 channel: SshChannel | None = None) -> None:
        self.host = host
        self.channel = channel or SshChannel(host, config=config)
        self.linger = linger
        self.unreachable_after = unreachable_after
        self.shared: bool | None = None
        self.sock = scripts.tmux_socket()
        self._seen: dict[str, _Seen] = {}
        self._notices: list[dict[str, Any]] = []
        self._reconnects = self.channel.reconnects

    # --- what it is -----------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(name="ssh", shared_files=bool(self.shared), local_pids=False, host_environment=True)

    def remote(self, refresh: bool = False) -> bool:
        return True

    def attach_command(self, handle: RunHandle) -> str:
        words = ["ssh", *(["-F", self.channel.config] if self.channel.config else []), "-t",
                 *self.channel.target.ssh_args()[:-2], self.channel.target.destination(),
                 "tmux", "-L", handle.socket_path or self.sock, "attach", "-t", f"={handle.session}"]
        return " ".join(shlex.quote(w) for w in words)

    # --- sessions -------------------------------------------------------------------------
    def exists(self, session: str) -> bool:
        """Whether the session is there; False when ssh refuses the host (start() then says why)."""
        try:
            return self.channel.run(scripts.session_script(self.sock, session, "has")).out.strip() == b"1"
        except HostRefused:
            return False

    def kill_session(self, session: str) -> None:
        with contextlib.suppress(SshError):  # an unreachable host: nothing can be closed there now
            self.channel.run(scripts.session_script(self.sock, session, "kill"))

    def start(self, session: str, command: str, *, cwd: str, env: Mapping[str, str], log_path: Path,
              rc_path: Path, pid_path: Path, pid_timeout: float = 10.0,
              reserve_path: Path | None = None, base_env: Mapping[str, str] | None = None) -> RunHandle:
        """Start `command` in a tmux session on the host; returns once its pid is known there.

        `base_env` is ignored: the job starts from the host's login environment (`bash -l`) plus `env`."""
        log_path, rc_path, pid_path = Path(log_path), Path(rc_path), Path(pid_path)
        if rc_path.parent != log_path.parent or pid_path.parent != log_path.parent:
            raise ValueError("the log, rc and pid files must share one directory")
        logs_dir = os.path.abspath(log_path.parent)
        wrapper = log_path.with_name(log_path.stem + ".sh")
        command_file = command_path(log_path)
        token = secrets.token_hex(16)
        probe = Path(logs_dir) / scripts.PROBE_NAME
        Path(logs_dir).mkdir(parents=True, exist_ok=True)
        probe.write_text(token)
        try:
            reserve = os.path.relpath(os.path.abspath(reserve_path), logs_dir) if reserve_path is not None else ""
            text = wrapper_text(session, command_file, cwd, env, log_path, rc_path, pid_path, round(self.linger),
                                logs_id=scripts.LOGS_ID, reserve=reserve, tools=host_tool)
        except WrapperError as exc:
            raise SshExecutorError(str(exc)) from exc
        try:
            result = self.channel.run(scripts.start_script(sock=self.sock,
                session=session, cwd=cwd, logs_dir=logs_dir, token=token, log=log_path.name, rc=rc_path.name,
                pid=pid_path.name, files={command_file.name: command_text(command).encode(),
                                          wrapper.name: text.encode()},
                wrapper=wrapper.name, pid_wait=pid_timeout), timeout=60 + pid_timeout, retry=True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                probe.unlink()
        words = result.out.decode("utf-8", "replace").split()
        if not words or words[0] != "ok":
            raise self._start_error(words, result, session, cwd, logs_dir)
        self.shared = words[1] == "1"
        handle = RunHandle(session=session, log_path=log_path, rc_path=rc_path, pid_path=pid_path,
                           wrapper_path=wrapper, executor="ssh", host=self.host, socket_path=self.sock,
                           remote_dir=None if self.shared else logs_dir)
        _read_pids(handle, words)
        if not self.shared:
            self._fresh_copy(handle)
        return handle

    def _start_error(self, words: list[str], result: Any, session: str, cwd: str, logs_dir: str) -> Exception:
        """What the start script's first word says went wrong (`exists`: the session is already there)."""
        if words and words[0] == "exists":
            return SessionExists(session)
        why = _START_ERRORS.get(words[0] if words else "", "the start script failed on {host} (exit {rc}): {err}")
        return SshExecutorError(why.format(cwd=cwd, host=self.host, logs=logs_dir, rc=result.rc,
                                           err=result.err.strip()[-300:]))

    def _fresh_copy(self, handle: RunHandle) -> None:
        """No shared disk: the local copies start empty (an earlier attempt's rc and pid files go) and are
        filled from the host at once."""
        for stale in (handle.rc_path, handle.pid_path):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        handle.log_path.touch()
        self.sync(handle)

    def adopt(self, session: str, paths: Mapping[str, Path]) -> RunHandle | None:
        """The attempt a crashed worker started on the host but did not record."""
        log = Path(paths["log"])
        logs_dir = os.path.abspath(log.parent)
        token = secrets.token_hex(16)
        probe = Path(logs_dir) / scripts.PROBE_NAME
        with contextlib.suppress(OSError):
            probe.write_text(token)
        try:
            # A refused host cannot hold a run of ours (start() will say why); an unreachable one may: raised.
            out = self.channel.run(scripts.adopt_script(sock=self.sock, session=session, logs_dir=logs_dir, token=token,
                                                        rc=paths["rc"].name, pid=paths["pid"].name)).out.split()
        except HostRefused:
            return None
        finally:
            with contextlib.suppress(FileNotFoundError):
                probe.unlink()
        shared, has_pid, has_rc, has_session = (w == b"1" for w in out[:4])
        if not has_pid or (not has_rc and not has_session):
            return None
        self.shared = shared
        handle = RunHandle(session=session, log_path=log, rc_path=paths["rc"], pid_path=paths["pid"],
                           wrapper_path=log.with_suffix(".sh"), executor="ssh", host=self.host, socket_path=self.sock,
                           remote_dir=None if shared else logs_dir)
        self.sync(handle)
        return handle

    # --- files and liveness ---------------------------------------------------------------
    def sync(self, handle: RunHandle) -> None:
        """One probe over the connection: alive or not, and (no shared disk) the files' new bytes.

        A failed probe is remembered, not raised: the run goes on on the host; past `unreachable_after`
        the run counts as lost (`lost()`), named so."""
        seen = self._seen.setdefault(handle.session, _Seen())
        if handle.pid is None:
            handle.pid = handle.pgid = read_int(handle.pid_path) if handle.remote_dir is None else None
        files = _copied_files(handle)
        offsets = [(str(p), _size(p) if incremental else 0) for p, incremental in files]
        try:
            result = self.channel.run(scripts.probe_script(sock=handle.socket_path or self.sock,
                                                           session=handle.session, pid=handle.pid, files=offsets))
        except SshError as exc:
            self._went_away(seen, exc)
            return
        if seen.down_since is not None or self.channel.reconnects != self._reconnects:
            self._came_back(handle, seen)
        self._read_probe(handle, seen, result.out, [p for p, _ in files])

    def _went_away(self, seen: _Seen, exc: SshError) -> None:
        """A failed probe: remembered (and said once), not raised."""
        now = time.time()
        if seen.down_since is None:
            seen.down_since = now
            self._notices.append({"type": EventType.host, "state": "unreachable", "host": self.host, "message": (
                f"ssh {self.host} does not answer ({exc}); the run goes on there, retrying")})
        seen.why = str(exc)

    def _came_back(self, handle: RunHandle, seen: _Seen) -> None:
        """The probe answered after a failure or a reconnect: say so, with how long the link was away."""
        down = time.time() - seen.down_since if seen.down_since is not None else 0.0
        self._notices.append({"type": EventType.host, "state": "reconnected", "host": self.host, "message": (
            f"ssh connection to {self.host} re-established" + (f" after {format_duration(down)}" if down else "")
            + f"; the run went on, its log read on from byte {_size(handle.log_path)}")})
        seen.down_since = None
        self._reconnects = self.channel.reconnects

    def _read_probe(self, handle: RunHandle, seen: _Seen, out: bytes, paths: list[Path]) -> None:
        head, _, rest = out.partition(b"\n")
        parts = head.split()
        seen.at = time.monotonic()
        seen.alive = len(parts) > 1 and parts[1] == b"1"
        seen.session = len(parts) > 2 and parts[2] == b"1"
        for path in paths:
            line, _, rest = rest.partition(b"\n")
            if not line.startswith(b"F "):
                continue
            _, offset_s, n_s = line.split()
            offset, n = int(offset_s), int(n_s)
            data, rest = rest[:n], rest[n:]
            _write_from(path, offset, data)
        if handle.pid is None:
            handle.pid = handle.pgid = read_int(handle.pid_path)

    def notices(self) -> list[dict[str, Any]]:
        """Events since the last call (the link went away, came back): the watch publishes them."""
        out, self._notices = self._notices, []
        return out

    def lost(self, handle: RunHandle) -> str:
        """Why the run is given up without an exit code (the host unreachable past the limit), or ""."""
        seen = self._seen.get(handle.session)
        if seen is None or seen.down_since is None or time.time() - seen.down_since < self.unreachable_after:
            return ""
        return (f"host {self.host} unreachable for {format_duration(time.time() - seen.down_since)} "
                f"(over the {format_limit(self.unreachable_after)} limit): {seen.why}; "
                "the run may still be running there")

    def is_running(self, handle: RunHandle) -> bool:
        if handle.rc_path.exists():
            return False
        seen = self._seen.get(handle.session)
        if seen is None or time.monotonic() - seen.at > FRESH:
            self.sync(handle)
            seen = self._seen[handle.session]
        if seen.down_since is not None:
            return not self.lost(handle)
        if handle.rc_path.exists():
            return False
        return seen.alive if handle.pid is not None else seen.session

    def exit_code(self, handle: RunHandle) -> int | None:
        return read_int(handle.rc_path)

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while (rc := self.exit_code(handle)) is None:
            if self.lost(handle) or time.monotonic() >= deadline:
                return None
            if handle.remote_dir is not None:
                self.sync(handle)
                if (rc := self.exit_code(handle)) is not None:
                    return rc
            time.sleep(0.2)
        return rc

    # --- stopping -------------------------------------------------------------------------
    def stop(self, handle: RunHandle, grace: float) -> int | None:
        """INT, then TERM, then KILL to the job's process group on the host; the session closed."""
        if handle.pid is None:
            self.sync(handle)
        try:
            out = self._stop_on_host(handle, grace)
        except SshError as exc:
            self._notices.append({"type": EventType.host, "state": "unreachable", "host": self.host,
                                  "message": f"could not stop the run on {self.host}: {exc}"})
            return self.exit_code(handle)
        if handle.remote_dir is not None:
            self.sync(handle)
        rc = self.exit_code(handle)
        if out.startswith("survived"):
            raise ProcessesSurvived([int(p) for p in out.split()[1:] if p.isdigit()] or [handle.pgid or 0])
        return rc

    def _stop_on_host(self, handle: RunHandle, grace: float) -> str:
        return self.channel.run(scripts.stop_script(sock=handle.socket_path or self.sock,
            session=handle.session, pgid=handle.pgid, rc_path=os.path.join(
                handle.remote_dir or str(handle.rc_path.parent), handle.rc_path.name),
            grace=grace, term_wait=min(grace, TERM_WAIT), kill_wait=KILL_WAIT,
            rc_wait=RC_WAIT), timeout=grace + TERM_WAIT + KILL_WAIT + RC_WAIT + 60).out.decode()

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        """The scoped cleanup, on the host: processes whose environment has `name=value`; their pids there."""
        try:
            out = self.channel.run(scripts.kill_marked_script(name, value, grace), timeout=grace + 60).out.decode()
        except SshError as exc:
            self._notices.append({"type": EventType.host, "state": "unreachable", "host": self.host,
                                  "message": f"could not clean up on {self.host}: {exc}"})
            return []
        return [int(p) for p in out.split() if p.isdigit()]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _write_from(path: Path, offset: int, data: bytes) -> None:
    """Put `data` at `offset` of the local copy: appended to what was copied, or a rewritten file replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if offset == 0:
        if path.exists() and path.read_bytes() == data:
            return
        tmp = path.with_name(f".{path.name}.ajet-sync")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # a reader never sees half an rc or pid file
        return
    if data:
        with path.open("ab") as fh:
            fh.write(data)


__all__ = ["HostRefused", "SshExecutor", "SshExecutorError", "session_name"]
