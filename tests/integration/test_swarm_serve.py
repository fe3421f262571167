"""Swarm blueprints through `serve` + a worker: one swarm server per port per node (a second
experiment on the same port waits queued), each completing with its server stopped."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.client.api_client import AjetRunnerClient
from ajet_runner.service.demo import materialize
from tests.integration.scenario import Scenario, wait_for
from tests.integration.swarm_helpers import free_port
from tests.integration.test_api import running_server
from tests.integration.test_two_nodes import state_of, wait_nodes
from tests.integration.workers import running_worker, worker_env
from tests.load import scaled

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def client(redis_url: str, tmp_path: Path) -> Iterator[AjetRunnerClient]:
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as c:
        yield c


def test_two_swarm_runs_on_one_port_take_turns(client, redis_url, tmux_socket, tmp_path) -> None:
    port = free_port()
    first, second = (Scenario(tmp_path / n, materialize("swarm", tmp_path / n, swarm_port=port)) for n in ("a", "b"))
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_SLOTS="2", AJET_RUNNER_CAPACITY_WAIT_SECONDS="1")
    with running_worker(env, "swarmnode"):
        wait_nodes(client, {"swarmnode"})
        ids = [client.submit_file(sc.blueprint)["id"] for sc in (first, second)]
        a = wait_for(lambda: next((i for i in ids if state_of(client, i) == "running"), None), 60, "a swarm run")
        b = next(i for i in ids if i != a)
        seen_b = set()
        deadline = time.monotonic() + scaled(60)
        while state_of(client, a) not in ("collecting", "finished"):
            seen_b.add(state_of(client, b))
            assert time.monotonic() < deadline, "the first swarm run did not finish"
            time.sleep(0.2)
        assert seen_b == {"queued"}, f"the second run did not wait for the port: {seen_b}"
        wait_for(lambda: state_of(client, b) == "finished", 120, "the second swarm run to finish")
        for sc in (first, second):
            flag = json.loads((sc.results / "finish.flag").read_text())
            assert flag["outcome"] == "completed"
            data = sc.results_json()
            assert len(data["evaluations"]) >= 3
            assert "Swarm server stopped." in (sc.results / "logs" / "server-1.log").read_text()


def test_stale_swarm_port_reservations_are_freed_when_a_worker_starts(client, redis_url, tmux_socket,
                                                                       tmp_path) -> None:
    """A worker that died left ports held by experiments that then finished or vanished: the next
    worker frees them (a live holder keeps its own), so a swarm run on that port is not queued for ever."""
    from ajet_runner.store.store import Store

    store = Store.from_url(redis_url)
    port, live_port = free_port(), free_port()
    store.records.create("swarm-done", {"state": "finished", "node": "portnode"}, {})
    store.records.create("swarm-live", {"state": "running", "node": "portnode",
                                        "lease_until": store.server_time() + 600}, {})
    assert store.slots.reserve_swarm_port("portnode", "swarm-done", port)
    assert store.slots.reserve_swarm_port("portnode", "swarm-vanished", port + 1 if port < 65535 else port - 1)
    assert store.slots.reserve_swarm_port("portnode", "swarm-live", live_port)
    sc = Scenario(tmp_path / "next", materialize("swarm", tmp_path / "next", swarm_port=port))
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_CAPACITY_WAIT_SECONDS="1")
    with running_worker(env, "portnode"):
        wait_for(lambda: set(store.slots.swarm_port_owners("portnode").values()) == {"swarm-live"},
                 30, "the stale swarm port reservations to be freed")
        assert store.slots.swarm_port_owners("portnode").get(live_port) == "swarm-live"
        exp_id = client.submit_file(sc.blueprint)["id"]
        wait_for(lambda: state_of(client, exp_id) == "finished", 120, "the swarm run on the freed port")
        assert json.loads((sc.results / "finish.flag").read_text())["outcome"] == "completed"
        assert store.slots.swarm_port_owners("portnode") == {live_port: "swarm-live"}


def test_a_server_dying_mid_run_is_restarted_through_a_worker(client, redis_url, tmux_socket, tmp_path) -> None:
    port = free_port()
    sc = Scenario(tmp_path / "dies", materialize("swarm_server_dies", tmp_path / "dies", swarm_port=port))
    env = worker_env(redis_url, tmux_socket)
    with running_worker(env, "swarmdies"):
        wait_nodes(client, {"swarmdies"})
        exp_id = client.submit_file(sc.blueprint)["id"]
        wait_for(lambda: state_of(client, exp_id) == "finished", 120, "the swarm run to finish")
    assert json.loads((sc.results / "finish.flag").read_text())["outcome"] == "completed"
    data = sc.results_json()
    assert len(data["attempts"]) == 2 and [r["signature"] for r in data["repairs"]] == ["swarm_server_died"]
    assert "swarm server restarted" in (sc.results / "repair_log.md").read_text()
    assert "Swarm server stopped." in (sc.results / "logs" / "server-2.log").read_text()


def test_a_killed_worker_leaves_a_swarm_run_the_next_worker_finishes(redis_url, tmux_socket, tmp_path) -> None:
    """SIGKILL the worker mid-run: server and client live on in tmux; the next worker re-adopts both
    (watches the server again, finds the results from the launch offsets), then stops the server."""
    from ajet_runner.service.submit import submit
    from ajet_runner.store.store import Store
    from tests.integration.workers import kill_group, start_worker

    port = free_port()
    sc = Scenario(tmp_path / "adopt", materialize("swarm_found_results", tmp_path / "adopt", swarm_port=port))
    sc.blueprint.write_text(sc.blueprint.read_text().replace("SWARM_STEP_SECONDS=0.5", "SWARM_STEP_SECONDS=1"))
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket)
    first = start_worker(env, "adoptnode")
    try:
        wait_for(lambda: store.nodes.all(), 30, "the first worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="adoptnode")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("latest_metrics"), 60, "a first evaluation")
    finally:
        kill_group(first)
    assert (store.records.raw(exp_id) or {})["state"] == "running"
    with running_worker(env, "adoptnode"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 1 and data["repairs"] == []
    assert [e["step"] for e in data["evaluations"]] == [0, 2, 4, 6]
    assert [h["what"] for h in data["swarm"]["history"]] == ["started", "stopped"]
    assert "Swarm server stopped." in (sc.results / "logs" / "server-1.log").read_text()
    assert not (sc.results / "logs" / "server-2.log").exists()
    assert store.slots.swarm_port_owners("adoptnode") == {}
