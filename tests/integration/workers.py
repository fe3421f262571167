"""Start and kill real `ajet-runner worker` processes for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
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


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL, wait: float = 10.0) -> bool:
    """Signal the worker and everything under it (its watcher), each once, and wait for them; returns whether
    they all ended on `sig`. Whatever is still running `wait` s later is SIGKILLed, and the test's output says
    so (a leaked worker outlives the test). tmux and the experiments it runs are not descendants: they live on.
    Once: the worker takes a second SIGTERM as "exit at once" (workers/node/stop_signals.py)."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the worker leads its own group (start_new_session)
    for p in tree:
        with suppress(psutil.NoSuchProcess, ProcessLookupError):
            if os.getpgid(p.pid) != proc.pid:  # outside the group: not signalled yet
                p.send_signal(sig)
    deadline = time.monotonic() + wait
    with suppress(subprocess.TimeoutExpired):
        proc.wait(wait)
    _, alive = psutil.wait_procs(tree, timeout=max(0.1, deadline - time.monotonic()))
    if proc.poll() is None or alive:
        left = sorted({p.pid for p in alive} | ({proc.pid} if proc.poll() is None else set()))
        message = (f"kill_group: pid(s) {left} still running {wait:.0f} s after {signal.Signals(sig).name} "
                   f"to worker {proc.pid}: SIGKILL")
        print(message, file=sys.stderr)
        warnings.warn(message, stacklevel=2)
        for p in alive:
            with suppress(psutil.NoSuchProcess):
                p.kill()
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        psutil.wait_procs(alive, timeout=10)
        return False
    return True


@contextmanager
def running_worker(env: dict[str, str], node: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_worker(env, node, *args)
    try:
        yield proc
    finally:
        kill_group(proc)
