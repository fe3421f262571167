"""Scoped process cleanup: find and kill only one experiment's processes.

This replaces AgentJet's `--autokill`, which kills every process on the host whose command
line mentions python/ray/vllm (other experiments and our worker included). Instead, every
attempt runs with an environment marker (e.g. `AJET_RUNNER_EXPERIMENT=<id>`); children and
daemons that escape the process tree (a `ray start` from `--with-ray`, a `nohup` helper)
inherit it, so `/proc/<pid>/environ` still names the experiment they belong to.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

import psutil

POLL = 0.02
PROC = "/proc"
KILL_WAIT = 5.0


def _protected() -> set[int]:
    """This process and its ancestors: never ours to kill, whatever their environment says."""
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}


def is_gone(proc: psutil.Process) -> bool:
    """True when the process has exited (a zombie counts as exited: it runs nothing)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until all `procs` have exited or `timeout` passed; return those still alive.

    psutil.wait_procs would wait on a zombie forever when we are not its parent, so this
    polls `is_gone` instead.
    """
    alive = [p for p in procs if not is_gone(p)]
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(POLL)
        alive = [p for p in alive if not is_gone(p)]
    return alive


def processes_with_marker(name: str, value: str) -> list[psutil.Process]:
    """Live processes whose environment has `name=value` (not this process or its parents)."""
    pids = _marked_pids(f"{name}={value}".encode()) if os.path.isdir(PROC) else None
    if pids is None:  # no /proc to read: psutil's own walk
        pids = [p.pid for p in psutil.process_iter() if _environ_has(p, name, value)]
    if not pids:
        return []
    protected = _protected()
    found: list[psutil.Process] = []
    for pid in pids:
        if pid in protected:
            continue
        try:
            proc = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        if _environ_has(proc, name, value) and not is_gone(proc):  # again on the object: a pid reused since
            found.append(proc)
    return found


def _environ_has(proc: psutil.Process, name: str, value: str) -> bool:
    try:
        return bool(proc.environ().get(name) == value)
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        return False


def _read_all(fd: int) -> bytes:
    """To the end: /proc hands out a page a read, whatever the size asked for."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _marked_pids(entry: bytes) -> list[int]:
    """Pids whose `/proc/<pid>/environ` holds `entry` (NAME=value) as a whole entry, read as raw bytes.

    Every attempt's end scans the whole process table (twice, with the collecting state's look): through
    psutil that was an object and a dict of the environment per process, ~10 ms of CPU on a node of a few
    hundred processes and 50-120 ms of wall time at load, on the way to `finish.flag`. A byte search finds
    the few candidates for a quarter of that; psutil then checks each one on its object. Other users'
    processes cannot be read (EACCES) and are skipped, as psutil's AccessDenied was."""
    nul = b"\0"
    whole, last = entry + nul, nul + entry
    pids: list[int] = []
    with os.scandir(PROC) as it:
        for d in it:
            if not d.name.isdigit():
                continue
            try:
                fd = os.open(f"{PROC}/{d.name}/environ", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                data = _read_all(fd)
            except OSError:
                continue
            finally:
                os.close(fd)
            if data.startswith(whole) or nul + whole in data or data.endswith(last) or data == entry:
                pids.append(int(d.name))
    return pids


def signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    """Send `sig` to each process that still exists; vanished ones are skipped."""
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def kill_processes(procs: Iterable[psutil.Process], grace: float) -> list[int]:
    """SIGTERM, wait up to `grace`, SIGKILL the rest; return the pids that were signalled and are gone.

    A pid still alive after SIGKILL (uninterruptible sleep) is not in the result.
    """
    protected = _protected()
    targets = [p for p in procs if p.pid not in protected and not is_gone(p)]
    if not targets:
        return []
    signal_all(targets, signal.SIGTERM)
    alive = wait_gone(targets, grace)
    if alive:
        signal_all(alive, signal.SIGKILL)
        alive = wait_gone(alive, KILL_WAIT)
    survivors = {p.pid for p in alive}
    return sorted(p.pid for p in targets if p.pid not in survivors)


def kill_marked(name: str, value: str, grace: float) -> list[int]:
    """Kill every process carrying the marker `name=value`; return the pids killed."""
    return kill_processes(processes_with_marker(name, value), grace)
