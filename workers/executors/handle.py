"""The neutral handle of one attempt, whichever executor runs it, and the files its wrapper writes.

Every executor runs the same attempt wrapper (workers/executors/wrapper.py), which records the command's
pid and exit code in files beside the log: those files are the truth about how an attempt ended (tmux
loses exit codes on this platform; a scheduler's job state says FAILED for a stop we asked for). The
handle is stored in the experiment's record, so any worker of the same executor can adopt the run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import psutil

from ajet_runner.workers.executors.local.procs import is_gone

POLL = 0.005


def read_int(path: Path) -> int | None:
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
    # Which executor ran it and what that executor needs to find it again (workers/executors/__init__.py).
    executor: str = "local"
    host: str | None = None  # ssh: the host alias or user@host[:port] the blueprint names
    job_id: str | None = None  # slurm: the job id
    remote_dir: str | None = None  # where the attempt's files live on the host when it does not share ours
    files: list[str] = field(default_factory=list)  # more files the runner reads (results), brought back by sync()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("log_path", "rc_path", "pid_path", "wrapper_path"):
            data[key] = str(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunHandle:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}  # a newer runner's extra fields are not an error
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
            pid = read_int(self.pid_path)
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
