"""`--with-ray-cluster`: the head/worker split of a multi-node run, as AgentJet's launch_utils does it.

Every node runs the same command with MASTER_ADDR and MASTER_PORT set. The node whose
`os.uname().nodename` equals MASTER_ADDR is the head (`ray start --head ... --block`, then it
trains); every other node "joins" (`ray start --address=MASTER_ADDR:MASTER_PORT --block`) and
blocks until a signal ends it. A joined worker is a file in the codebase's `.sim_state` (the
codebase is at the same path on every node), refreshed every second; the head's trainer
counts the fresh ones' GPUs, so training that starts before the workers joined fails with
`Total available GPUs N is less than total desired GPUs M`, as verl does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ajet.sim import console

CLUSTER_ENV = "AJET_SIM_RAY_CLUSTER"  # the head's trainer finds the joined workers here
FRESH_SECONDS = 5.0


class ClusterConfigError(RuntimeError):
    """MASTER_ADDR / MASTER_PORT missing: the real launcher fails the same way."""


def master() -> tuple[str, str]:
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not addr or not port:
        raise ClusterConfigError("--with-ray-cluster needs MASTER_ADDR and MASTER_PORT in the environment")
    return addr, port


def cluster_dir(cwd: Path, addr: str, port: str) -> Path:
    return cwd / ".sim_state" / "ray_cluster" / f"{addr}_{port}"


def is_head(addr: str) -> bool:
    return os.uname().nodename == addr


def start_head(cwd: Path, addr: str, port: str) -> Path:
    """The head: prints what `ray start --head` prints and tells its trainer where workers join."""
    where = cluster_dir(cwd, addr, port)
    where.mkdir(parents=True, exist_ok=True)
    console.emit(f"ray start --head --node-ip-address={addr} --port={port} --block")
    for line in (f"Local node IP: {addr}", "--------------------", "Ray runtime started.", "--------------------",
                 "  To add another node to this Ray cluster, run", f"    ray start --address='{addr}:{port}'"):
        console.emit(line)
    os.environ[CLUSTER_ENV] = str(where)
    return where


def join_and_block(cwd: Path, addr: str, port: str, gpus: int, lifetime: float) -> None:
    """A worker node: register, then block (refreshing the registration) until a signal ends it.

    Never returns normally; the caller's signal handling turns SIGINT/SIGTERM into an exit. It
    gives up after `lifetime` seconds so a forgotten worker cannot linger for ever.
    """
    host = os.uname().nodename
    where = cluster_dir(cwd, addr, port)
    where.mkdir(parents=True, exist_ok=True)
    member = where / f"{host}.json"
    console.emit(f"ray start --address={addr}:{port} --block")
    member.write_text(json.dumps({"host": host, "gpus": gpus, "pid": os.getpid()}), encoding="utf-8")
    for line in (f"Local node IP: {host}", "--------------------", "Ray runtime started.", "--------------------",
                 "--block", "This command will now block forever until terminated by a signal."):
        console.emit(line)
    deadline = time.monotonic() + lifetime
    try:
        while time.monotonic() < deadline:
            os.utime(member)
            time.sleep(1.0)
        raise SystemExit(1)
    finally:
        member.unlink(missing_ok=True)


def joined_gpus(now: float | None = None) -> int:
    """GPUs of the workers that joined this head's cluster and are still there."""
    where = os.environ.get(CLUSTER_ENV)
    if not where:
        return 0
    now = time.time() if now is None else now
    total = 0
    for member in Path(where).glob("*.json"):
        try:
            if now - member.stat().st_mtime > FRESH_SECONDS:
                continue
            total += int(json.loads(member.read_text(encoding="utf-8")).get("gpus", 0))
        except (OSError, ValueError):
            continue
    return total
