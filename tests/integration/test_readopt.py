"""A worker killed with SIGKILL mid-run: the next worker re-adopts the tmux session, never relaunches."""

from __future__ import annotations

import time

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.keys import exp_key
from ajet_runner.store.store import Store
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from tests.integration.scenario import make, wait_for
from tests.integration.workers import kill_group, running_worker, start_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def start_then_kill_the_worker(tmp_path, redis_url, tmux_socket, step_seconds: str, until: str, **env_extra: str):
    """Run the demo on node n1, SIGKILL the worker (supervisor and watcher) once `until` holds."""
    sc = make("demo", tmp_path)
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("step_seconds: 1.0", f"step_seconds: {step_seconds}"))
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket, **env_extra)
    first = start_worker(env, "n1", "--gpus", "0")
    try:
        wait_for(lambda: store.nodes.all(), 30, "the first worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        checks = {"evaluated": lambda: (store.records.raw(exp_id) or {}).get("latest_metrics"),
                  "running": lambda: (store.records.raw(exp_id) or {}).get("state") == "running"}
        wait_for(checks[until], 60, f"the run to be {until}")
        rec = store.records.raw(exp_id)
        assert rec is not None and rec["state"] == "running"
    finally:
        kill_group(first)
    return sc, store, env, exp_id, rec


def test_sigkilled_worker_is_replaced_and_the_run_completes_with_one_launch(tmp_path, redis_url, tmux_socket):
    """The dead driver's lease (60 s here) is not waited out: its owner id names a process of this node and
    boot that is gone, so the worker started right after the kill re-adopts the run as soon as it is up."""
    sc, store, env, exp_id, rec = start_then_kill_the_worker(tmp_path, redis_url, tmux_socket, "0.5", "evaluated",
                                                             AJET_RUNNER_LEASE_SECONDS="60")
    session = rec["tmux_session"]
    assert TmuxRunner(tmux_socket).exists(session)  # the run itself lives on in tmux
    dead_owner, lease_until = rec["owner"], float(rec["lease_until"])

    started = time.monotonic()
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("owner") not in (None, "", dead_owner), 50,
                 "the new worker to adopt the run")
        took, adopted_at = time.monotonic() - started, store.server_time()
        print(f"adopted {took:.2f} s after the new worker started")
        assert adopted_at < lease_until, "the dead owner's lease was waited out"
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "completed"
    events = store.events.read(exp_id)
    launches = [e for e in events if e.get("trigger") == "launched"]
    assert len(launches) == 1, "the re-adopting worker must not launch a second copy"
    assert any(e["type"] == "adopted" for e in events)
    assert rec["attempt"] == "1" and not (sc.results / "logs" / "attempt-2.log").exists()
    assert sc.flag()["outcome"] == "completed" and sc.flag()["id"] == exp_id
    log = (sc.results / "logs" / "attempt-1.log").read_text()
    assert log.count("Final validation metrics") == 1


def test_a_run_that_ended_while_no_worker_watched_is_judged_from_its_log_and_exit_code(
        tmp_path, redis_url, tmux_socket) -> None:
    sc, store, env, exp_id, _ = start_then_kill_the_worker(tmp_path, redis_url, tmux_socket, "0.3", "running")
    rc_file = sc.results / "logs" / "attempt-1.rc"
    wait_for(rc_file.exists, 90, "the run to end on its own, unwatched")
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "the run to be collected")
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "completed" and rec["attempt"] == "1"
    assert sc.results_json()["attempts"][0]["exit_code"] == 0
    assert sc.flag()["outcome"] == "completed"


def test_an_attempt_that_ended_before_its_launch_was_recorded_is_collected_not_run_again(
        tmp_path, redis_url, tmux_socket) -> None:
    """A worker died between starting the attempt in tmux and recording `launched` (or a Redis restart
    lost that record), and the command ran to its end before the next worker came: that worker must
    collect the ended attempt from its rc file, not start the command again into the same log."""
    import json

    sc, store, env, exp_id, _ = start_then_kill_the_worker(tmp_path, redis_url, tmux_socket, "0.3", "running")
    rc_file = sc.results / "logs" / "attempt-1.rc"
    wait_for(rc_file.exists, 90, "the run to end on its own, unwatched")
    rec = store.records.raw(exp_id) or {}
    lifecycle = json.loads(rec["lifecycle"]) if isinstance(rec["lifecycle"], str) else dict(rec["lifecycle"])
    lifecycle["state"] = "launching"
    key = exp_key(exp_id)
    assert store.r.exists(key)
    store.r.hset(key, mapping={"state": "launching", "lifecycle": json.dumps(lifecycle)})
    store.r.hdel(key, "handle", "tmux_session")  # as before `launched` was recorded
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "the run to be collected")
    rec = store.records.raw(exp_id) or {}
    assert rec["outcome"] == "completed" and rec["attempt"] == "1", rec.get("reason")
    log = (sc.results / "logs" / "attempt-1.log").read_text()
    assert log.count("Final validation metrics") == 1, "the command ran a second time"
    assert not (sc.results / "logs" / "attempt-2.log").exists()
    assert sc.flag()["outcome"] == "completed"
