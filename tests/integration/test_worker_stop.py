"""`ajet-runner worker` always ends after SIGTERM/SIGINT: an orderly stop, a second signal ends it at once, and
a stop stuck on a thread or a watcher ends at the deadline (workers/node/stop_signals.py). Real worker
processes, real signals, a private redis-server (stopped with SIGSTOP to make a thread hang), real tmux."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from ajet_runner.service.submit import submit
from ajet_runner.statemachine.durations import format_duration
from ajet_runner.store.redis_server import EmbeddedRedis
from ajet_runner.store.store import Store
from ajet_runner.workers.node.stop_signals import STOP_DEADLINE_SECONDS
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.workers import kill_group, worker_env
from tests.load import scaled

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STARTED = 5.0  # a process's own start-up and exit on a quiet machine, beyond the product's bound


@pytest.fixture()
def own_redis() -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own: one test stops it (SIGSTOP), which no other test may see."""
    with EmbeddedRedis(private=True) as server:
        yield server
        if server.process is not None:
            with suppress(ProcessLookupError):
                os.kill(server.process.pid, signal.SIGCONT)


def start(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], psutil.Process]:
    """A worker as a pod or the tests run it (its own process group), once registered with its watcher up."""
    with open(log, "ab") as out:
        proc = subprocess.Popen([*CLI, "worker", "--node", "nodeB", "--gpus", "0"], env=env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=out)
    store = Store.from_url(env["REDIS_URL"])
    wait_for(lambda: [n for n in store.nodes.all() if n["name"] == "nodeB"], 30, "the worker to register")
    # its stop handling is in place once the supervisor's loop says hello (before: a signal's default action)
    wait_for(lambda: "node nodeB: 0 GPU(s)" in log.read_text(), 30, "the supervisor's loop")
    watcher = wait_for(lambda: next(iter(psutil.Process(proc.pid).children()), None), 30, "the watcher")
    store.close()
    return proc, watcher  # type: ignore[return-value]


def ended_within(proc: subprocess.Popen[bytes], seconds: float) -> int:
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker {proc.pid} still runs {seconds:.0f} s after its stop signal")


def test_sigterm_to_the_group_with_a_run_in_flight_ends_the_worker_in_order(own_redis, tmux_socket, tmp_path):
    """What the multi-node test and Kubernetes do: SIGTERM to worker and watcher at once, a run going on."""
    env = worker_env(own_redis.url, tmux_socket, AJET_RUNNER_LEASE_SECONDS="60")
    proc, watcher = start(env, tmp_path / "worker.log")
    try:
        store = Store.from_url(own_redis.url)
        exp_id = submit(store, make("demo", tmp_path).blueprint.read_text(), node="nodeB")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 60, "the run to start")
        os.killpg(proc.pid, signal.SIGTERM)
        assert ended_within(proc, STOP_DEADLINE_SECONDS + scaled(STARTED)) == 0
        assert not watcher.is_running() or watcher.status() == psutil.STATUS_ZOMBIE
        rec = store.records.raw(exp_id) or {}
        assert rec["state"] == "running" and float(rec["lease_until"]) == 0.0, rec  # handed back, not cut
    finally:
        kill_group(proc)


def test_a_second_signal_ends_a_stopping_worker_at_once(own_redis, tmux_socket, tmp_path):
    """Its watcher stuck (SIGSTOP): the orderly stop would wait for it; a second signal (Ctrl-C again) does not."""
    log = tmp_path / "worker.log"
    proc, watcher = start(worker_env(own_redis.url, tmux_socket), log)
    try:
        watcher.suspend()
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "SIGTERM: stopping" in log.read_text(), 10, "the worker to start stopping")
        proc.send_signal(signal.SIGINT)
        assert ended_within(proc, 5.0) == 128 + signal.SIGINT  # not the 10 s the watcher is waited for
        assert "second stop signal (SIGINT): exiting now" in log.read_text()
        assert psutil.wait_procs([watcher], timeout=scaled(STARTED))[1] == []  # killed with it, not left behind
    finally:
        kill_group(proc)


def test_a_stop_stuck_on_redis_and_on_its_watcher_ends_at_the_deadline(own_redis, tmux_socket, tmp_path):
    """Redis frozen (every Redis call of the loop and of the leaving waits out its socket timeout) and the
    watcher frozen: the worker still ends, STOP_DEADLINE_SECONDS after the signal, and says where it hung."""
    log = tmp_path / "worker.log"
    proc, watcher = start(worker_env(own_redis.url, tmux_socket), log)
    try:
        watcher.suspend()
        assert own_redis.process is not None
        os.kill(own_redis.process.pid, signal.SIGSTOP)
        proc.send_signal(signal.SIGTERM)
        assert ended_within(proc, STOP_DEADLINE_SECONDS + scaled(STARTED)) == 1
        text = log.read_text()
        assert f"still running {format_duration(STOP_DEADLINE_SECONDS)} after the stop signal: exiting now" in text
        assert "Thread" in text  # the stacks, to see what hung
        assert psutil.wait_procs([watcher], timeout=scaled(STARTED))[1] == []
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        kill_group(proc)


def test_kill_group_sigkills_what_ignores_its_signal(tmp_path):
    """The helper leaks nothing: a process that ignores SIGTERM is SIGKILLed after the wait, and it says so."""
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    with pytest.warns(UserWarning, match="still running 1 s after SIGTERM"):
        assert kill_group(proc, signal.SIGTERM, wait=1.0) is False
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()
