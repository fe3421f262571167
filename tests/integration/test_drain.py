"""A node comes back by itself: the preStop drain of a worker pod is undone by the node's next worker;
an operator's `drain --sticky` is kept. /v1/nodes shows who drained and why."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.client.api_client import AjetRunnerClient
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.test_api import running_server
from tests.integration.workers import kill_group, running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def client(redis_url: str, tmp_path: Path) -> Iterator[AjetRunnerClient]:
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as c:
        yield c


def node(client: AjetRunnerClient, name: str) -> dict:
    return next((n for n in client.nodes() if n["name"] == name), {})


def drain(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([*CLI, "drain", "--node", "n1", *args], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return proc.stdout


def pod_restart(env: dict[str, str], client: AjetRunnerClient, *drain_args: str) -> dict:
    """What Kubernetes does to a worker pod: preStop (`drain`), then SIGTERM, then a new pod.
    Returns /v1/nodes' view of the node while drained (an idle worker that leaves is unlisted)."""
    with running_worker(env, "n1", "--gpus", "0") as first:
        wait_for(lambda: node(client, "n1").get("alive"), 30, "the first worker to register")
        drain(env, *drain_args)
        seen = wait_for(lambda: node(client, "n1") if node(client, "n1").get("drained_by") else None, 30,
                        "the node to show as drained")
        kill_group(first, signal.SIGTERM)
    return seen  # type: ignore[return-value]


def test_a_worker_started_after_a_prestop_drain_takes_new_work(client, redis_url, tmux_socket, tmp_path):
    env = worker_env(redis_url, tmux_socket)
    seen = pod_restart(env, client, "--reason", "preStop", "--by", "worker-pod-abc")
    assert seen["draining"] and seen["drained_by"] == "worker-pod-abc" and seen["drain_reason"] == "preStop"
    assert seen["drain_sticky"] is False and seen["drained_at"]

    sc = make("demo", tmp_path)
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: node(client, "n1").get("alive"), 30, "the new worker to register")
        exp_id = client.submit(sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: client.get(exp_id)["state"] == "finished", 120, "the new worker to run it")
        after = node(client, "n1")
    assert client.get(exp_id)["outcome"] == "completed"
    assert not after["draining"] and after["drained_by"] is None


def test_a_sticky_drain_survives_a_worker_restart(client, redis_url, tmux_socket, tmp_path):
    env = worker_env(redis_url, tmux_socket)
    pod_restart(env, client, "--sticky", "--reason", "bad GPU 3", "--by", "alice")
    sc = make("demo", tmp_path)
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: node(client, "n1").get("alive"), 30, "the second worker to register")
        exp_id = client.submit(sc.blueprint.read_text(), node="n1")["id"]
        first_beat = node(client, "n1")["last_seen"]
        wait_for(lambda: node(client, "n1")["last_seen"] > first_beat + 2, 30, "two more heartbeats")
        seen = node(client, "n1")
        assert seen["draining"] and seen["drain_sticky"] and seen["drained_by"] == "alice"
        assert seen["drain_reason"] == "bad GPU 3"
        assert client.get(exp_id)["state"] == "queued", "a sticky-drained node takes no work"
        drain(env, "--undo")
        wait_for(lambda: client.get(exp_id)["state"] == "finished", 120, "the undrained node to run it")
    assert client.get(exp_id)["outcome"] == "completed"
