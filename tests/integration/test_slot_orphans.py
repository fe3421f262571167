"""The watcher dies with its supervisor (issue 18): SIGKILL of the supervisor alone leaves no watcher
behind with ppid 1, while the experiment lives on in tmux and is re-adopted, launched once.
And queued work for a node that is gone is reported (event once, gauge)."""

from __future__ import annotations

import contextlib
import os
import signal

import psutil
import pytest

from ajet_runner.service.cluster_metrics import cluster_text
from ajet_runner.service.submit import SubmissionRejected, submit
from ajet_runner.store.store import Store
from ajet_runner.workers.executors.handle import RunHandle
from tests.integration.scenario import make, wait_for
from tests.integration.workers import kill_group, running_worker, start_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigkilled_supervisor_leaves_no_orphan_watcher_and_the_run_is_readopted(tmp_path, redis_url, tmux_socket):
    sc = make("demo", tmp_path)
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("step_seconds: 1.0", "step_seconds: 0.5"))
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket)
    first = start_worker(env, "n1", "--gpus", "0", "--slots", "2")
    try:
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 60, "the run to start")
        supervisor = psutil.Process(first.pid)
        # The watcher, whose thread drives the run (two slots: still one process).
        tree = wait_for(lambda: [p for p in supervisor.children(recursive=True)
                                 if "ajet_runner.workers.node.watcher" in p.cmdline()], 30, "the watcher")
        pids = [p.pid for p in tree]  # type: ignore[union-attr]
        assert len(supervisor.children(recursive=True)) == 1, "one watcher process, not a process per slot or run"
        os.kill(first.pid, signal.SIGKILL)  # the supervisor only: nobody stops its watcher for it
        first.wait(10)
        with contextlib.suppress(AssertionError):  # bounded wait; the assertion below says what is left
            wait_for(lambda: not any(_alive(p) for p in pids), 15, "the watcher to die with it", interval=0.2)
        orphans = [(p, psutil.Process(p).ppid()) for p in pids if _alive(p)]
        assert orphans == [], f"left behind (pid, ppid): {orphans}"
    finally:
        kill_group(first)
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["state"] == "running"
    handle = RunHandle.from_dict(rec["handle"])
    assert handle.process() is not None  # the experiment itself lives on in tmux

    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "completed", rec
    events = store.events.read(exp_id)
    assert len([e for e in events if e.get("trigger") == "launched"]) == 1
    assert any(e["type"] == "adopted" for e in events)
    assert sc.flag()["outcome"] == "completed"


def test_a_node_no_worker_serves_is_refused_unless_waiting_and_then_reported(tmp_path, redis_url, tmux_socket):
    sc = make("demo", tmp_path)
    store = Store.from_url(redis_url)
    with running_worker(worker_env(redis_url, tmux_socket, AJET_RUNNER_NODE_ABSENT_REPORT_SECONDS="1"),
                        "n1", "--gpus", "0"):
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        with pytest.raises(SubmissionRejected) as err:
            submit(store, sc.blueprint.read_text(), node="ghost")
        assert err.value.problems[0].field == "node" and "no live worker serves node ghost" in str(err.value)
        assert store.indexes.count() == 0
        exp_id = submit(store, sc.blueprint.read_text(), node="ghost", wait_for_node=True)["id"]
        event = wait_for(lambda: [e for e in store.events.read(exp_id) if e.get("type") == "node_absent"], 30,
                         "the absent node to be reported")
    assert len(event) == 1 and event[0]["node"] == "ghost"  # type: ignore[index]
    assert (store.records.raw(exp_id) or {}).get("state") == "queued"
    body = cluster_text(store, absent_after=1)
    assert b'ajet_runner_queued_for_absent_node{node="ghost"} 1.0' in body
