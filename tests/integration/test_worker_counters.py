"""Counters a worker leaves in Redis for /metrics: transitions, outcomes, repairs by signature and result."""

from __future__ import annotations

import pytest

from service.store import Store
from service.submit import submit
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_repaired_run_is_counted(tmp_path, redis_url, tmux_socket) -> None:
    sc = make("oom_first_attempt", tmp_path)
    store = Store.from_url(redis_url)
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        wait_for(lambda: store.nodes(), 30, "the worker to register")
        exp_id = submit(store, store.r, sc.blueprint.read_text())["id"]
        wait_for(lambda: (store.get(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    stats = store.stats()
    assert stats["repairs"] == {"cuda_oom|relaunched": 1.0}
    assert stats["outcomes"] == {"completed": 1.0}
    assert stats["transitions"]["running>failing"] == 1 and stats["transitions"]["repairing>launching"] == 1
    assert stats["transitions"]["launching>running"] == 2
