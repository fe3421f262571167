"""A worker on this machine for the one-machine commands (`run`, `up`): started beside the command, awaited
until it registers, and ended with its store and embedded Redis when the command ends."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from ajet_runner.statemachine.durations import format_limit


def start_local_worker(env: Mapping[str, str], node: str, *, quiet: bool = True) -> subprocess.Popen[bytes]:
    """`ajet-runner worker --node NODE` in its own session (a Ctrl-C here must not reach it)."""
    return subprocess.Popen([sys.executable, "-m", "ajet_runner", "worker", "--node", node],
                            env={**env, "AJET_RUNNER_NODE": node}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)


def wait_for_node(store: Any, node: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Until the worker's heartbeat names `node`; RuntimeError when it exits or never registers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with code {proc.returncode} before it started")
        if any(n["name"] == node for n in store.nodes.all()):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the worker did not register within {format_limit(timeout)}")


def stop_local(worker: subprocess.Popen[bytes], store: Any, embedded: Any | None) -> None:
    """End the worker (SIGTERM: its drivers hand their runs back), then the store's connection and the
    embedded Redis, if this command started one."""
    worker.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(20)
    if worker.poll() is None:
        worker.kill()
    store.close()
    if embedded:
        embedded.stop()
