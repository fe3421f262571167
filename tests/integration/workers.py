"""Start and kill real `ajet-runner worker` processes for tests."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psutil

from tests.integration.scenario import CLI


def worker_env(redis_url: str, tmux_socket: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "REDIS_URL": redis_url, "AJET_RUNNER_TMUX_SOCKET": tmux_socket, "AJET_RUNNER_LEASE_SECONDS": "3",
        "AJET_RUNNER_POLL_INTERVAL": "0.2", "AJET_RUNNER_STOP_GRACE_SECONDS": "5",
    })
    env.update(extra)
    return env


def start_worker(env: dict[str, str], node: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*CLI, "worker", "--node", node, *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Kill the worker and everything under it (its watcher). tmux and the experiments it runs are not
    descendants: they live on."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    for p in tree:
        with suppress(psutil.NoSuchProcess):
            p.send_signal(sig)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    psutil.wait_procs(tree, timeout=10)


@contextmanager
def running_worker(env: dict[str, str], node: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_worker(env, node, *args)
    try:
        yield proc
    finally:
        kill_group(proc)
