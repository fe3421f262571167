"""Counters a worker leaves in Redis for /metrics: transitions, outcomes, repairs by signature and result."""

from __future__ import annotations

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_repaired_run_is_counted(tmp_path, redis_url, tmux_socket) -> None:
    sc = make("oom_first_attempt", tmp_path)
    store = Store.from_url(redis_url)
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text())["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    stats = store.counters.read()
    assert stats["repairs"] == {"cuda_oom|relaunched": 1.0}
    assert stats["outcomes"] == {"completed": 1.0}
    assert stats["transitions"]["running>failing"] == 1 and stats["transitions"]["repairing>launching"] == 1
    assert stats["transitions"]["launching>running"] == 2


def test_a_blueprint_the_node_cannot_run_is_rejected_there_with_a_report_and_no_launch(
        tmp_path, redis_url, tmux_socket) -> None:
    sc = make("demo", tmp_path)
    text = sc.blueprint.read_text().replace(str(sc.codebase), str(tmp_path / "not-on-this-node"))
    store = Store.from_url(redis_url)
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        exp_id = submit(store, text, check_disk=False)["id"]  # an API host that cannot see the disk
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "the rejection")
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "failed" and "exp_codebase_dir" in rec["reason"]
    assert [e for e in store.events.read(exp_id) if e.get("trigger") == "launched"] == []
    assert sc.flag()["outcome"] == "failed"
    assert "exp_codebase_dir" in (sc.results / "repair_log.md").read_text()
