"""GPU packing with fake GPU counts: an 8-GPU node runs two 4-GPU experiments at once, on disjoint GPUs."""

from __future__ import annotations

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_four_gpu_runs_share_an_eight_gpu_node(tmp_path, redis_url, tmux_socket) -> None:
    store = Store.from_url(redis_url)
    scenarios = []
    for name in ("a", "b"):
        sc = make("demo", tmp_path / name)
        yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
        yaml_path.write_text(yaml_path.read_text().replace("n_gpus_per_node: 8", "n_gpus_per_node: 4"))
        scenarios.append(sc)
    env = worker_env(redis_url, tmux_socket, AJET_SIM_GPUS="8")
    with running_worker(env, "gpu8", "--gpus", "8"):
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        ids = [submit(store, sc.blueprint.read_text())["id"] for sc in scenarios]
        assert [store.records.raw(i)["gpus_needed"] for i in ids] == ["4", "4"]  # type: ignore[index]

        def both_running() -> bool:
            return all((store.records.raw(i) or {}).get("state") == "running" for i in ids)

        wait_for(both_running, 60, "both experiments to run at the same time")
        gpus = [store.records.raw(i)["gpus"] for i in ids]  # type: ignore[index]
        assert all(len(g) == 4 for g in gpus) and not set(gpus[0]) & set(gpus[1])
        assert sorted(store.slots.gpu_owners("gpu8")) == list(range(8))
        wait_for(lambda: all((store.records.raw(i) or {}).get("state") == "finished" for i in ids), 120,
                 "both to finish")
    for sc, exp_id in zip(scenarios, ids, strict=True):
        data = sc.results_json()
        assert data["outcome"] == "completed", data["reason"]
        assert "--skip-check-avail-gpu" in data["attempts"][0]["command"]
        script = (sc.results / "logs" / "attempt-1.sh").read_text()
        expected = ",".join(str(g) for g in store.records.raw(exp_id)["gpus"])  # type: ignore[index]
        assert f"CUDA_VISIBLE_DEVICES={expected}" in script or f"CUDA_VISIBLE_DEVICES='{expected}'" in script
    assert store.slots.gpu_owners("gpu8") == {}  # released on finish


def test_gpus_of_experiments_that_ended_or_vanished_during_a_crash_are_recovered(redis_url) -> None:
    from ajet_runner.store.settings import Settings
    from ajet_runner.workers.identity.this_node import NodeInfo
    from ajet_runner.workers.node.supervisor import NodeSupervisor

    store = Store.from_url(redis_url)
    store.records.create("done", {"state": "finished", "node": "gpu8"}, {})
    store.records.create("live", {"state": "running", "node": "gpu8", "lease_until": store.server_time() + 60}, {})
    for exp_id in ("done", "live", "vanished"):
        assert store.slots.reserve_gpus("gpu8", exp_id, 2, 8) is not None
    sup = NodeSupervisor(Settings(redis_url=redis_url), NodeInfo(name="gpu8", gpus=8, slots=1), redis_url)
    sup.adopt_orphans()  # what a restarted worker does first
    assert set(store.slots.gpu_owners("gpu8").values()) == {"live"}  # the running one keeps its GPUs
