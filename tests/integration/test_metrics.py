"""Metrics move as a real simulated run progresses: the API's /metrics (computed from Redis) and a real
worker's own endpoint, scraped while `ajet-runner worker` drives the `long_run` sample to the end."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ajet_runner.service.cluster_metrics import metrics_response
from ajet_runner.service.embedded import free_port
from ajet_runner.service.metric_names import WORKER_METRICS
from ajet_runner.service.submit import submit
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Scrape = Callable[[], bytes]


def value(body: bytes, name: str, **labels: str) -> float | None:
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def names(body: bytes) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(body.decode()) for s in fam.samples}


@pytest.fixture()
def store(redis_url: str) -> Iterator[Store]:
    s = Store.from_url(redis_url)
    yield s
    s.r.close()


@pytest.fixture()
def api_scrape(store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scrape]:
    """GET /metrics on the real FastAPI app when it exists, else `metrics_response` itself."""
    try:
        from fastapi.testclient import TestClient

        from ajet_runner.service.api.application import create_app
    except ImportError:
        yield lambda: metrics_response(store)[0]
        return
    monkeypatch.setenv("REDIS_URL", redis_url)
    with TestClient(create_app(Settings(), insecure=True), base_url="http://127.0.0.1") as client:  # loopback: open API

        def scrape() -> bytes:
            resp = client.get("/metrics")
            assert resp.status_code == 200, resp.text
            return resp.content

        yield scrape


def scrape_until(scrape: Scrape, ready: Callable[[bytes], bool], timeout: float, what: str) -> bytes:
    found: list[bytes] = []

    def probe() -> bool:
        body = scrape()
        if ready(body):
            found.append(body)
            return True
        return False

    wait_for(probe, timeout, what)
    return found[0]


def wait_for_endpoint(port: int, timeout: float = 30) -> None:
    """Until the worker's HTTP server answers /healthz (the process needs a moment to start)."""

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for(up, timeout, f"the worker's metrics endpoint on port {port}")


def worker_scrape(port: int) -> Scrape:
    def scrape() -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read()

    return scrape


def submit_long_run(store: Store, tmp_path: Path) -> str:
    sc = make("long_run", tmp_path)
    return str(submit(store, sc.blueprint.read_text())["id"])


def cancel_and_wait(store: Store, exp_id: str) -> dict:
    store.runs.request_cancel(exp_id)
    wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 90, "the run to finish")
    rec = store.records.raw(exp_id)
    assert rec is not None
    return rec


def test_api_metrics_move_as_a_run_progresses(store: Store, api_scrape: Scrape, redis_url: str,
                                              tmux_socket: str, tmp_path: Path) -> None:
    exp_id = submit_long_run(store, tmp_path)  # before any worker: it waits queued
    body = api_scrape()
    cluster = {n for n in names(metrics_response(store)[0]) if "_http_" not in n}
    assert cluster <= names(body)  # the endpoint serves what the collector builds
    assert value(body, "ajet_runner_experiments", state="queued") == 1
    assert value(body, "ajet_runner_experiments", state="running") == 0
    assert value(body, "ajet_runner_queue_jobs", queue="default") == 1
    # Queued: an aggregate per target node, no per-experiment series until it is launched (issue 39).
    assert value(body, "ajet_runner_queued_experiments", node="") == 1
    assert value(body, "ajet_runner_experiment_state", experiment=exp_id, state="queued") is None
    assert value(body, "ajet_runner_experiment_elapsed_seconds", experiment=exp_id) is None
    before = {(f, t): value(body, "ajet_runner_transitions_total", from_state=f, to_state=t)
              for f, t in (("queued", "launching"), ("launching", "running"), ("collecting", "finished"))}
    assert before == {k: 0 for k in before}

    port = free_port()
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0", "--metrics-port", str(port)):
        running = scrape_until(api_scrape, lambda b: value(b, "ajet_runner_experiments", state="running") == 1,
                               60, "the experiment to be running")
        assert value(running, "ajet_runner_experiments", state="queued") == 0
        assert value(running, "ajet_runner_queue_jobs", queue="default") == 0
        assert value(running, "ajet_runner_transitions_total", from_state="launching", to_state="running") == 1
        assert value(running, "ajet_runner_experiment_state", experiment=exp_id, state="running") == 1
        assert value(running, "ajet_runner_experiment_attempt", experiment=exp_id) == 1
        assert value(running, "ajet_runner_experiment_max_seconds", experiment=exp_id) == 30
        assert value(running, "ajet_runner_queued_experiments", node="") == 0
        assert value(running, "ajet_runner_node_up", node="n1") == 1
        assert value(running, "ajet_runner_node_gpus", node="n1", state="total") == 0
        assert value(running, "ajet_runner_queue_jobs", queue="node:n1") == 0

        first = value(running, "ajet_runner_experiment_elapsed_seconds", experiment=exp_id)
        assert first is not None and first > 0
        wait_for(lambda: (value(api_scrape(), "ajet_runner_experiment_elapsed_seconds", experiment=exp_id) or 0)
                 > first + 0.5, 10, "elapsed time to grow")
        evaluated = scrape_until(
            api_scrape, lambda b: value(b, "ajet_runner_experiment_mean_reward", experiment=exp_id) is not None,
            60, "mean_reward after the first evaluation")
        assert value(evaluated, "ajet_runner_experiment_val_step", experiment=exp_id) is not None
        assert value(evaluated, "ajet_runner_experiment_task_pass_rate", experiment=exp_id, k="1") is not None

        # The worker's own endpoint: a live heartbeat, the run it drives, its process tree.
        wait_for_endpoint(port)
        wscrape = worker_scrape(port)
        wbody = scrape_until(wscrape, lambda b: value(b, "ajet_runner_worker_running_experiments", node="n1") == 1,
                             15, "the worker's running count")
        for name in ("ajet_runner_worker_watch_loop_seconds_bucket", "ajet_runner_worker_tree_cpu_seconds_total",
                     "ajet_runner_worker_tree_resident_memory_bytes", "ajet_runner_worker_heartbeat_timestamp_seconds"):
            assert name in names(wbody), name
        beat = value(wbody, "ajet_runner_worker_heartbeat_timestamp_seconds", node="n1")
        assert beat is not None
        wait_for(lambda: (value(wscrape(), "ajet_runner_worker_heartbeat_timestamp_seconds", node="n1") or 0) > beat,
                 15, "a newer heartbeat")
        tree_rss = value(wbody, "ajet_runner_worker_tree_resident_memory_bytes") or 0
        assert tree_rss > 50_000_000  # supervisor + watcher
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
            assert resp.status == 200

        rec = cancel_and_wait(store, exp_id)
        done = api_scrape()

    outcome = rec["outcome"]
    assert outcome in ("cancelled", "timed_out")  # the limit is 30 s: cancel normally wins
    assert value(done, "ajet_runner_experiments", state="finished") == 1
    assert value(done, "ajet_runner_experiments", state="running") == 0
    assert value(done, "ajet_runner_outcomes_total", outcome=outcome) == 1
    assert value(done, "ajet_runner_transitions_total", from_state="running", to_state="collecting") == 1
    assert value(done, "ajet_runner_transitions_total", from_state="collecting", to_state="finished") == 1
    assert value(done, "ajet_runner_transitions_total", from_state="queued", to_state="launching") == 1
    assert value(done, "ajet_runner_run_duration_seconds_count", outcome=outcome) == 1
    assert (value(done, "ajet_runner_run_duration_seconds_sum", outcome=outcome) or 0) > 0
    assert value(done, "ajet_runner_experiment_state", experiment=exp_id, state="finished") == 1
    frozen = value(done, "ajet_runner_experiment_elapsed_seconds", experiment=exp_id)
    assert frozen is not None and frozen > first
    assert value(api_scrape(), "ajet_runner_experiment_elapsed_seconds", experiment=exp_id) == frozen


def test_worker_watch_metrics_move_as_a_run_progresses(store: Store, redis_url: str, tmux_socket: str,
                                                       tmp_path: Path) -> None:
    port = free_port()
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0", "--metrics-port", str(port)):
        wait_for_endpoint(port)
        scrape = worker_scrape(port)
        assert value(scrape(), "ajet_runner_worker_running_experiments", node="n1") == 0
        exp_id = submit_long_run(store, tmp_path)
        first = wait_for(lambda: value(scrape(), "ajet_runner_worker_log_bytes_total", experiment=exp_id), 60,
                         "log bytes read")
        assert isinstance(first, float) and first > 0
        wait_for(lambda: (value(scrape(), "ajet_runner_worker_log_bytes_total", experiment=exp_id) or 0) > first,
                 30, "more log bytes")
        body = scrape()
        assert set(WORKER_METRICS) <= {n.removesuffix("_bucket") for n in names(body)}
        age = value(body, "ajet_runner_worker_last_output_age_seconds", experiment=exp_id)
        assert age is not None and 0 <= age < 30  # the sim writes a line per step
        assert (value(body, "ajet_runner_worker_watch_loop_seconds_count") or 0) > 5
        cancel_and_wait(store, exp_id)

