"""Which process drives an experiment: lets a supervisor on the same node see that its driver is
alive even when Redis was unreachable and the lease ran out (e.g. a network partition)."""

from __future__ import annotations

import os
from typing import Any

import psutil


def _pid_namespace() -> int:
    """Our PID namespace (inode): a pid recorded in another one means nothing here."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


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
