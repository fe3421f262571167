"""Swarm blueprints through `serve` + a worker: one swarm server per port per node (a second
experiment on the same port waits queued), each completing with its server stopped."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.client import AjetRunnerClient
from service.demo import materialize
from tests.integration.scenario import Scenario, wait_for
from tests.integration.test_api import running_server
from tests.integration.test_two_nodes import state_of, wait_nodes
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def client(redis_url: str, tmp_path: Path) -> Iterator[AjetRunnerClient]:
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_swarm_runs_on_one_port_take_turns(client, redis_url, tmux_socket, tmp_path) -> None:
    port = _free_port()
    first, second = (Scenario(tmp_path / n, materialize("swarm", tmp_path / n, swarm_port=port)) for n in ("a", "b"))
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_SLOTS="2", AJET_RUNNER_CAPACITY_WAIT_SECONDS="1")
    with running_worker(env, "swarmnode"):
        wait_nodes(client, {"swarmnode"})
        ids = [client.submit_file(sc.blueprint)["id"] for sc in (first, second)]
        a = wait_for(lambda: next((i for i in ids if state_of(client, i) == "running"), None), 60, "a swarm run")
        b = next(i for i in ids if i != a)
        seen_b = set()
        deadline = time.monotonic() + 60
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
