"""Two simulated nodes (two real workers with different names on this machine) behind a real `serve`:
node targeting, stop of a running experiment, delete, capacity waits and the 409 refusal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.client.api_client import AjetRunnerClient, ApiError
from tests.integration.scenario import Scenario, make, marked_processes, short_sim, wait_for
from tests.integration.test_api import running_server
from tests.integration.workers import running_worker, worker_env
from tests.load import scaled

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def client(redis_url: str, tmp_path: Path) -> Iterator[AjetRunnerClient]:
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as c:
        yield c


def state_of(client: AjetRunnerClient, exp_id: str) -> str:
    try:
        return str(client.get(exp_id)["state"])
    except ApiError as exc:
        if exc.status == 404:
            return "gone"
        raise


def wait_nodes(client: AjetRunnerClient, names: set[str]) -> None:
    wait_for(lambda: names <= {n["name"] for n in client.nodes() if n["alive"]}, 30, f"nodes {names} to register")


def test_node_targeting_stop_and_delete_of_running_experiments(client, redis_url, tmux_socket, tmp_path) -> None:
    env = worker_env(redis_url, tmux_socket)
    demo, long_a, long_b = make("demo", tmp_path / "d"), make("long_run", tmp_path / "la"), make("long_run",
                                                                                                  tmp_path / "lb")
    with running_worker(env, "nodeA", "--gpus", "0"), running_worker(env, "nodeB", "--gpus", "0"):
        wait_nodes(client, {"nodeA", "nodeB"})
        d = client.submit_file(demo.blueprint, node="nodeB")["id"]
        la = client.submit_file(long_a.blueprint, node="nodeA")["id"]
        lb = client.submit_file(long_b.blueprint, node="nodeB")["id"]
        wait_for(lambda: all(state_of(client, i) == "running" for i in (d, la, lb)), 60, "all three to run")
        assert [client.get(i)["node"] for i in (d, la, lb)] == ["nodeB", "nodeA", "nodeB"]
        wait_for(lambda: {d, lb} <= set(next(n for n in client.nodes() if n["name"] == "nodeB")["running"]),
                 15, "nodeB's heartbeat to list its running experiments")

        # Stop a running one once it has reported an evaluation: 202, then a graceful stop and collection.
        # (both long runs: a stop is acted on at once, so one without an evaluation yet would have none)
        wait_for(lambda: client.get(la)["latest_metrics"] and client.get(lb)["latest_metrics"], 30,
                 "a first evaluation of both long runs")
        stopping = client.stop(la)
        assert stopping["state"] != "finished" and stopping["cancel_requested"] is True
        # Delete a running one: it is stopped first, and its record dropped once it is finished.
        pending = client.delete(lb)
        assert pending["deleted"] is False

        wait_for(lambda: state_of(client, la) == "finished", 30, "the stopped run to be collected")
        stopped = client.get(la)
        assert stopped["outcome"] == "cancelled" and stopped["history"][-1]["to"] == "finished"
        assert [h["trigger"] for h in stopped["history"]][-2:] == ["cancel", "collected"]
        assert_cancelled_with_results(long_a, la)
        assert marked_processes(la) == []
        log = client.log(la, tail=5)  # read from the attempt's log file (this server shares the disk)
        assert log.source == "file" and log.path.endswith("logs/attempt-1.log") and log.text.count("\n") == 5
        assert log.offset == (long_a.results / "logs" / "attempt-1.log").stat().st_size
        assert client.log(la, since=log.offset).text == ""

        wait_for(lambda: state_of(client, lb) == "gone", 30, "the deleted run's record to be dropped")
        assert_cancelled_with_results(long_b, lb)

        wait_for(lambda: state_of(client, d) == "finished", 60, "the demo on nodeB to finish")
        assert client.get(d)["outcome"] == "completed" and demo.flag()["outcome"] == "completed"

        # Delete a finished one: the record goes, the result dir stays as it was.
        before = sorted(p.name for p in long_a.results.iterdir())
        assert client.delete(la)["deleted"] is True
        assert state_of(client, la) == "gone"
        assert sorted(p.name for p in long_a.results.iterdir()) == before
        assert {e["id"] for e in client.iter_experiments()} == {d}


def assert_cancelled_with_results(sc: Scenario, exp_id: str) -> None:
    flag = sc.flag()
    assert flag["id"] == exp_id and flag["outcome"] == "cancelled"
    data = sc.results_json()
    assert len(data["attempts"]) == 1 and data["evaluations"], data
    assert (sc.results / "experiment_report.md").exists() and (sc.results / "logs" / "attempt-1.log").exists()


def four_gpu_demo(tmp_path: Path, name: str, gpus: int = 4) -> Scenario:
    sc = make("demo", tmp_path / name)
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("n_gpus_per_node: 8", f"n_gpus_per_node: {gpus}"))
    short_sim(sc)  # two runs one after the other: a few seconds each
    return sc


def test_capacity_waits_and_too_big_is_refused(client, redis_url, tmux_socket, tmp_path) -> None:
    first, second = four_gpu_demo(tmp_path, "first"), four_gpu_demo(tmp_path, "second")
    huge = four_gpu_demo(tmp_path, "huge", gpus=16)
    env = worker_env(redis_url, tmux_socket, AJET_SIM_GPUS="4", AJET_RUNNER_CAPACITY_WAIT_SECONDS="1")
    with running_worker(env, "gpu4", "--gpus", "4"):
        wait_nodes(client, {"gpu4"})
        with pytest.raises(ApiError) as refused:
            client.submit_file(huge.blueprint)
        assert refused.value.status == 409
        assert any("16 GPUs" in p["message"] and "at most 4" in p["message"] for p in refused.value.problems)
        assert client.list_experiments()["total"] == 0  # refused: nothing recorded, nothing queued

        ids = [client.submit_file(sc.blueprint)["id"] for sc in (first, second)]
        # Slots take jobs concurrently, so either may win the GPUs: the other must wait queued.
        a = wait_for(lambda: next((i for i in ids if state_of(client, i) == "running"), None), 60,
                     "a 4-GPU run to start")
        b = next(i for i in ids if i != a)
        assert client.get(a)["gpus"] == [0, 1, 2, 3]
        seen_b = set()
        deadline = time.monotonic() + scaled(60)
        # Until the first is collected (its GPUs are released while collecting): it ends in a few seconds.
        while state_of(client, a) not in ("collecting", "finished"):
            seen_b.add(state_of(client, b))
            assert time.monotonic() < deadline, "the first run did not finish"
            time.sleep(0.2)
        assert seen_b == {"queued"}, f"the second run did not wait for the GPUs: {seen_b}"
        wait_for(lambda: state_of(client, b) == "finished", 90, "the second run to start and finish")
        assert client.get(b)["outcome"] == "completed" and client.get(b)["gpus"] == [0, 1, 2, 3]
        for sc in (first, second):
            assert json.loads((sc.results / "finish.flag").read_text())["outcome"] == "completed"
