"""Which process drives an experiment, and whether that process is provably gone.

A driver's owner id names its process uniquely on the machine: node, boot id
(/proc/sys/kernel/random/boot_id), PID namespace, pid, and the process's start time in clock ticks
since boot (/proc/<pid>/stat field 22), then a nonce for the drivers that share the process (a thread
each). A worker that starts on the same node, boot and PID namespace can prove such an owner dead:
its pid is gone, a zombie, or another process (other start time). Then the run is taken at once
(store.runs.end_dead_lease, a compare-and-set on that exact owner value) instead of waiting the lease out:
a `kill -9` followed by an immediate restart (systemd Restart=always, a pod restart with hostPID, as the
chart runs the worker) costs seconds, not the lease. An owner of another node, another boot, another PID
namespace, in the old format, or alive, is never proven dead: its lease is waited out as before.

The record also keeps driver_pid / driver_started / driver_pidns (driver_identity): a supervisor on the
same node sees its driver alive even while Redis was unreachable and the lease ran out.
"""

from __future__ import annotations

import functools
import os
import uuid
from typing import Any, NamedTuple

import psutil


class Owner(NamedTuple):
    node: str
    boot: str
    pidns: int
    pid: int
    start: int  # clock ticks after boot (/proc/<pid>/stat field 22)


@functools.cache
def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_namespace() -> int:
    """Our PID namespace (inode): a pid recorded in another one means nothing here."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def process_start(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time, ticks after boot); None when there is no such live
    process (gone, or a zombie: dead, only not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # the command name (field 2) may hold spaces and ")"
    try:
        state, start = fields[0], int(fields[19])  # fields 3 and 22
    except (IndexError, ValueError):
        return None
    return None if state in (b"Z", b"X") else start


def owner_id(node: str) -> str:
    """This process's owner id for a driver on `node`; "" parts when /proc cannot tell (never provable)."""
    pid = os.getpid()
    return f"{node}/{boot_id()}/{_pid_namespace()}/{pid}/{process_start(pid) or 0}/{uuid.uuid4().hex[:6]}"


def parse_owner(owner: str) -> Owner | None:
    """The parts of an owner id that owner_id() made; None for any other value (an older format)."""
    parts = owner.rsplit("/", 5)
    if len(parts) != 6:
        return None
    node, boot, pidns, pid, start, _nonce = parts
    try:
        parsed = Owner(node, boot, int(pidns), int(pid), int(start))
    except ValueError:
        return None
    return parsed if node and boot and parsed.pidns and parsed.pid > 0 and parsed.start > 0 else None


def owner_dead(owner: str, node: str, starts: dict[int, int | None] | None = None) -> bool:
    """True only when `owner` is provably gone: recorded on `node` in this boot and PID namespace, and
    its pid is gone, a zombie, or a process that started at another time (the pid was reused).

    `starts`: the start times already read in this scan, by pid (every run of a watcher has its pid)."""
    parsed = parse_owner(owner)
    if parsed is None or parsed.node != node or parsed.boot != boot_id() or parsed.pidns != _pid_namespace():
        return False
    if starts is None:
        return process_start(parsed.pid) != parsed.start
    if parsed.pid not in starts:
        starts[parsed.pid] = process_start(parsed.pid)
    return starts[parsed.pid] != parsed.start


def driver_identity() -> dict[str, Any]:
    """Who drives it, so a supervisor on the same node can see the driver is alive even while
    Redis was unreachable and the lease ran out (e.g. a network partition)."""
    me = psutil.Process()
    return {"driver_pid": me.pid, "driver_started": me.create_time(), "driver_pidns": _pid_namespace()}


def driver_alive(rec: dict[str, Any]) -> bool:
    if int(rec.get("driver_pidns") or 0) not in (0, _pid_namespace()):
        return False  # recorded by a worker in another PID namespace (another pod, or one since killed)
    try:
        proc = psutil.Process(int(rec.get("driver_pid") or 0))
        return abs(proc.create_time() - float(rec.get("driver_started") or 0)) < 0.01 and proc.status() != "zombie"
    except (psutil.Error, ValueError):
        return False
