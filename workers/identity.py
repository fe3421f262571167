"""Which process drives an experiment: lets a supervisor on the same node see that its driver is
alive even when Redis was unreachable and the lease ran out (e.g. a network partition)."""

from __future__ import annotations

from typing import Any

import psutil


def driver_identity() -> dict[str, Any]:
    """Who drives it, so a supervisor on the same node can see the driver is alive even while
    Redis was unreachable and the lease ran out (e.g. a network partition)."""
    me = psutil.Process()
    return {"driver_pid": me.pid, "driver_started": me.create_time()}


def driver_alive(rec: dict[str, Any]) -> bool:
    try:
        proc = psutil.Process(int(rec.get("driver_pid") or 0))
        return abs(proc.create_time() - float(rec.get("driver_started") or 0)) < 0.01 and proc.status() != "zombie"
    except (psutil.Error, ValueError):
        return False
