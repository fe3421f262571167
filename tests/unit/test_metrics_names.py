"""The API and worker collectors export exactly the names of service/metric_names.py, with values that
follow the store, and bounded per-experiment cardinality. Real Redis (private server), real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import ajet_runner.workers.node.worker_metrics as wm
from ajet_runner.service import metric_names as metric_names_module
from ajet_runner.service.cluster_metrics import _http_registry, cluster_text, metrics_response, purpose_label
from ajet_runner.service.embedded import free_port
from ajet_runner.service.metric_names import API_METRICS, WORKER_METRICS
from ajet_runner.store.per_experiment.queue import queue
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.load import scaled

HISTOGRAMS = set(re.findall(r'"(\w+)",\s*#\s*histogram', Path(metric_names_module.__file__).read_text()))
HTTP_METRIC = "ajet_runner_http_request_duration_seconds"
LONG_PURPOSE = "Compare   GRPO against PPO\n on gsm8k with a 4B model, " + "and many more words " * 10


def samples(body: bytes) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(body.decode()) for s in fam.samples]


def value(body: bytes, name: str, **labels: str) -> float | None:
    for sample_name, sample_labels, v in samples(body):
        if sample_name == name and all(sample_labels.get(k) == want for k, want in labels.items()):
            return v
    return None


def exported_names(body: bytes) -> set[str]:
    """Metric names as metric_names.py spells them (histograms by their base name)."""
    names = set()
    for name, _, _ in samples(body):
        base = next((name.removesuffix(s) for s in ("_bucket", "_sum", "_count") if name.endswith(s)), None)
        names.add(base if base in HISTOGRAMS else name)
    return names


def check_names(body: bytes, wanted: tuple[str, ...]) -> None:
    for name in wanted:
        probe = f"{name}_bucket" if name in HISTOGRAMS else name
        assert probe in {s[0] for s in samples(body)}, f"{name} is not exported"
    stray = {n for n in exported_names(body) if n.startswith("ajet_runner_") and n not in wanted}
    assert not stray, f"names outside metric_names.py: {stray}"


def fill(store: Store, now: float) -> None:
    """Experiments in several states, counters, a node heartbeat and a waiting job."""
    metrics = {"mean_reward": 0.61, "task_pass_rate@1": 0.5, "task_pass_rate@4": 0.75,
               "task_pass_rate@4-all-pass": 0.25, "std_reward": 0.4, "step": 20.0}
    rows = {
        "q1": {"state": "queued"},
        "r1": {"state": "running", "node": "n1", "started_at": now - 300, "attempt": 2, "latest_metrics": metrics,
               "nnodes": 2, "stage": "s1"},
        "f1": {"state": "failing", "node": "n1", "started_at": now - 50, "attempt": 1},
        "done-new": {"state": "finished", "outcome": "completed", "node": "n1", "started_at": now - 500,
                     "finished_at": now - 100, "attempt": 1, "latest_metrics": metrics, "stage": "s1",
                     "best_metrics": {"mean_reward": {"value": 0.7, "step": 10}}},
        "done-old": {"state": "finished", "outcome": "failed", "node": "n1", "started_at": now - 90_000,
                     "finished_at": now - 80_000, "attempt": 3},
    }
    for exp_id, fields in rows.items():
        store.records.create(exp_id, {"purpose": LONG_PURPOSE, "max_seconds": 3600, "attempt": 0, **fields},
                             {"message": "test"})
    store.records.transition("done-new", expected_version=None, fields={}, event={"type": "transition"},
                             stats={"transition": "collecting>finished", "outcome": "completed", "duration": 400,
                                    "repair": "cuda_oom|applied", "advised": "qwen-7b|then completed"})
    store.records.transition("done-old", expected_version=None, fields={}, event={"type": "transition"},
                             stats={"transition": "failing>collecting", "outcome": "failed", "duration": 10_000})
    store.nodes.heartbeat("n1", {"gpus": 4, "gpus_busy": 1, "slots": 4, "running": ["r1", "f1"]}, ttl=2)
    queue(store.r, "default").enqueue("ajet_runner.workers.drive.jobs.drive", "q1", job_id="drive-q1")


@pytest.fixture()
def store(redis_url: str) -> Iterator[Store]:
    s = Store.from_url(redis_url)
    yield s
    s.r.close()


def test_cluster_metrics_export_every_api_name_with_store_values(store: Store) -> None:
    now = time.time()
    fill(store, now)
    body, content_type = metrics_response(store)
    assert content_type.startswith("text/plain; version=0.0.4")
    check_names(body, tuple(n for n in API_METRICS if n != HTTP_METRIC or _http_registry() is not None
                            and HTTP_METRIC + "_bucket" in body.decode()))

    for state, n in {"queued": 1, "launching": 0, "running": 1, "failing": 1, "repairing": 0, "collecting": 0,
                     "finished": 2}.items():
        assert value(body, "ajet_runner_experiments", state=state) == n, state
    elapsed = value(body, "ajet_runner_experiment_elapsed_seconds", experiment="r1")
    assert elapsed is not None and 300 <= elapsed < 330
    assert value(body, "ajet_runner_experiment_elapsed_seconds", experiment="done-new") == pytest.approx(400)
    # Queued experiments are aggregates, not per-experiment series (issue 39: thousands can wait).
    assert value(body, "ajet_runner_experiment_elapsed_seconds", experiment="q1") is None
    assert value(body, "ajet_runner_queued_experiments", node="") == 1
    waited = value(body, "ajet_runner_queued_oldest_age_seconds", node="")
    assert waited is not None and 0 <= waited < 60
    assert value(body, "ajet_runner_experiment_max_seconds", experiment="r1") == 3600
    assert value(body, "ajet_runner_experiment_mean_reward", experiment="r1") == pytest.approx(0.61)
    assert value(body, "ajet_runner_experiment_mean_reward", experiment="q1") is None  # no evaluation yet
    assert value(body, "ajet_runner_experiment_task_pass_rate", experiment="r1", k="4") == pytest.approx(0.75)
    ks = {lab["k"] for name, lab, _ in samples(body) if name == "ajet_runner_experiment_task_pass_rate"}
    assert ks == {"1", "4"}  # `4-all-pass` is not a k
    assert value(body, "ajet_runner_experiment_val_step", experiment="r1") == 20
    assert value(body, "ajet_runner_experiment_attempt", experiment="r1") == 2
    assert value(body, "ajet_runner_experiment_state", experiment="f1", state="failing") == 1
    assert value(body, "ajet_runner_experiment_state", experiment="f1", state="running") is None
    # purpose lives on the info series only (one per experiment), never on the gauges it describes.
    info = {lab["experiment"]: lab for name, lab, _ in samples(body) if name == "ajet_runner_experiment_info"}
    assert set(info) == {"r1", "f1", "done-new"}
    assert {lab["purpose"] for lab in info.values()} == {purpose_label(LONG_PURPOSE)}
    assert info["r1"]["node"] == "n1"
    assert value(body, "ajet_runner_experiment_info", experiment="r1") == 1
    with_purpose = {name for name, lab, _ in samples(body) if "purpose" in lab}
    assert with_purpose == {"ajet_runner_experiment_info"}
    # per stage: counts by state and outcome, and the best mean_reward (the report's best, over a running one's)
    assert value(body, "ajet_runner_stage_experiments", stage="s1", state="running") == 1
    assert value(body, "ajet_runner_stage_experiments", stage="s1", state="finished") == 1
    assert value(body, "ajet_runner_stage_outcomes", stage="s1", outcome="completed") == 1
    assert value(body, "ajet_runner_stage_best_mean_reward", stage="s1") == pytest.approx(0.7)
    assert value(body, "ajet_runner_experiment_attempt", experiment="r1", node="n1") == 2
    # A multi-node run is one experiment: one series, on its head's node, with its node count.
    assert [lab for name, lab, _ in samples(body) if name == "ajet_runner_experiment_nodes"
            and lab["experiment"] == "r1"] == [{"experiment": "r1", "node": "n1"}]
    assert value(body, "ajet_runner_experiment_nodes", experiment="r1") == 2
    assert value(body, "ajet_runner_experiment_nodes", experiment="f1") == 1
    assert len(purpose_label(LONG_PURPOSE)) == 60 and "\n" not in purpose_label(LONG_PURPOSE)
    assert purpose_label(LONG_PURPOSE).startswith("Compare GRPO against PPO on gsm8k")

    # The finished one past finished_metrics_ttl (default 3600 s) has no per-experiment series.
    assert not [lab for _, lab, _ in samples(body) if lab.get("experiment") == "done-old"]

    assert value(body, "ajet_runner_transitions_total", from_state="collecting", to_state="finished") == 1
    assert value(body, "ajet_runner_transitions_total", from_state="queued", to_state="launching") == 0
    assert value(body, "ajet_runner_repairs_total", signature="cuda_oom", result="applied") == 1
    assert value(body, "ajet_runner_advised_repairs_total", model="qwen-7b", result="then completed") == 1
    assert value(body, "ajet_runner_outcomes_total", outcome="failed") == 1
    assert value(body, "ajet_runner_outcomes_total", outcome="cancelled") == 0
    assert value(body, "ajet_runner_run_duration_seconds_bucket", outcome="completed", le="300.0") == 0
    assert value(body, "ajet_runner_run_duration_seconds_bucket", outcome="completed", le="900.0") == 1
    assert value(body, "ajet_runner_run_duration_seconds_count", outcome="failed") == 1
    assert value(body, "ajet_runner_run_duration_seconds_sum", outcome="failed") == 10_000
    assert value(body, "ajet_runner_queue_jobs", queue="default") == 1
    assert value(body, "ajet_runner_queue_jobs", queue="node:n1") == 0
    oldest = value(body, "ajet_runner_queue_oldest_job_age_seconds", queue="default")
    assert oldest is not None and 0 <= oldest < 60
    assert value(body, "ajet_runner_node_up", node="n1") == 1
    age = value(body, "ajet_runner_node_heartbeat_age_seconds", node="n1")
    assert age is not None and 0 <= age < 30
    assert value(body, "ajet_runner_node_gpus", node="n1", state="free") == 3


def test_api_metrics_endpoint_serves_every_api_name(store: Store, redis_url: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real FastAPI app: the cluster families plus the API's own request latency."""
    try:
        from fastapi.testclient import TestClient

        from ajet_runner.service.api.application import create_app
    except ImportError as exc:
        pytest.skip(f"the HTTP API is not importable: {exc}")
    fill(store, time.time())
    monkeypatch.setenv("REDIS_URL", redis_url)
    with TestClient(create_app(Settings(), insecure=True), base_url="http://127.0.0.1") as client:  # loopback: open API
        assert client.get("/healthz").status_code == 200  # one timed request at least
        resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    check_names(resp.content, API_METRICS)
    assert value(resp.content, "ajet_runner_experiments", state="running") == 1
    # The serving process's own standard metrics (ProcessCollector): this very process, not a sum of many.
    rss = value(resp.content, "process_resident_memory_bytes")
    assert rss is not None and abs(rss - psutil.Process().memory_info().rss) < 100_000_000
    started = value(resp.content, "process_start_time_seconds")
    assert started == pytest.approx(psutil.Process().create_time(), abs=2)
    assert not [n for n, _, _ in samples(resp.content) if n.startswith("ajet_runner_worker_tree_")]


def test_finished_experiment_leaves_per_experiment_gauges_after_the_ttl(store: Store) -> None:
    now = time.time()
    store.records.create("e1", {"state": "finished", "outcome": "completed", "purpose": "p", "node": "n1",
                                "started_at": now - 100, "finished_at": now,
                                "latest_metrics": {"mean_reward": 1.0}}, {})

    def scrape(at: float) -> bytes:
        return cluster_text(store, finished_ttl=600, now=at)

    soon, late = scrape(now + 599), scrape(now + 601)
    for name in ("elapsed_seconds", "max_seconds", "mean_reward", "state", "attempt"):
        assert value(soon, f"ajet_runner_experiment_{name}", experiment="e1") is not None, name
        assert value(late, f"ajet_runner_experiment_{name}", experiment="e1") is None, name
    assert value(soon, "ajet_runner_experiment_elapsed_seconds", experiment="e1") == pytest.approx(100)
    assert value(late, "ajet_runner_experiments", state="finished") == 1  # still counted


def test_a_node_whose_heartbeat_expired_is_reported_down(store: Store) -> None:
    store.nodes.heartbeat("gone", {"gpus": 2, "gpus_busy": 0}, ttl=2)
    store.r.delete("ajet:node:gone")  # what the heartbeat's TTL does after a minute of silence
    body, _ = metrics_response(store)
    assert value(body, "ajet_runner_node_up", node="gone") == 0
    assert value(body, "ajet_runner_queue_jobs", queue="node:gone") == 0


# -- worker ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def test_worker_collector_exports_every_worker_name_from_reported_watch_passes(store: Store) -> None:
    clock = Clock()
    report = wm.WatchReporter(store, "n1", clock=clock)
    for i in range(10):
        report("e1", 0.003 if i < 9 else 0.3, 100, 2.0)
        report("e2", 0.02, 0, 50.0)
        clock.t += 0.25
    report.flush()
    store.nodes.heartbeat("n1", {"gpus": 0}, ttl=2)
    registry = wm.worker_registry(store, "n1", lambda: ["e1", "e2"], os.getpid())
    collector = next(c for c in registry._collector_to_names if isinstance(c, wm.WorkerCollector))
    collector.clock = clock
    body = generate_latest(registry)
    check_names(body, WORKER_METRICS)

    assert value(body, "ajet_runner_worker_watch_loop_seconds_count") == 20
    assert value(body, "ajet_runner_worker_watch_loop_seconds_bucket", le="0.005") == 9
    assert value(body, "ajet_runner_worker_watch_loop_seconds_bucket", le="0.025") == 19
    assert value(body, "ajet_runner_worker_watch_loop_seconds_bucket", le="+Inf") == 20
    assert value(body, "ajet_runner_worker_watch_loop_seconds_sum") == pytest.approx(9 * 0.003 + 0.3 + 10 * 0.02)
    assert value(body, "ajet_runner_worker_log_bytes_total", experiment="e1") == 1000
    assert value(body, "ajet_runner_worker_log_bytes_total", experiment="e2") == 0
    assert value(body, "ajet_runner_worker_last_output_age_seconds", experiment="e2") == pytest.approx(50.25)
    assert value(body, "ajet_runner_worker_running_experiments", node="n1") == 2
    beat = value(body, "ajet_runner_worker_heartbeat_timestamp_seconds", node="n1")
    assert beat is not None and abs(beat - time.time()) < 30
    assert value(body, "ajet_runner_worker_tree_resident_memory_bytes") > 10_000_000  # type: ignore[operator]
    assert value(body, "ajet_runner_worker_tree_cpu_seconds_total") > 0  # type: ignore[operator]
    assert not [n for n, _, _ in samples(body) if n.startswith("process_")]  # standard names mean one process

    # Time passes without a report: the stall signal keeps growing; after the TTL the experiment leaves.
    clock.t += 30
    later = generate_latest(registry)
    assert value(later, "ajet_runner_worker_last_output_age_seconds", experiment="e2") == pytest.approx(80.25)
    clock.t += wm.EXP_TTL_SECONDS
    gone = generate_latest(registry)
    assert value(gone, "ajet_runner_worker_last_output_age_seconds", experiment="e2") is None
    assert value(gone, "ajet_runner_worker_log_bytes_total", experiment="e1") is None
    assert 0 < store.r.ttl(wm.exp_metrics_key("n1", "e1")) <= wm.EXP_TTL_SECONDS


def test_reporter_flushes_at_scrape_granularity(store: Store) -> None:
    clock = Clock()
    report = wm.WatchReporter(store, "n1", clock=clock)
    step = wm.FLUSH_SECONDS / 10

    def flushed_count() -> int:
        return int(store.r.hget(wm.watch_key("n1"), "count") or 0)

    report("e1", 0.01, 10, 0.0)  # the first pass flushes at once
    assert flushed_count() == 1
    for _ in range(9):
        clock.t += step
        report("e1", 0.01, 10, 0.0)
    assert flushed_count() == 1
    clock.t += step * 1.1
    report("e1", 0.01, 10, 0.0)
    assert flushed_count() == 11
    assert int(store.r.hget(wm.exp_metrics_key("n1", "e1"), "log_bytes")) == 110
    report("e1", 0.01, 5, 0.0)  # not due...
    assert flushed_count() == 11
    report.close()  # ...until the job ends
    assert flushed_count() == 12
    assert int(store.r.hget(wm.exp_metrics_key("n1", "e1"), "log_bytes")) == 115


def test_reporter_never_raises_when_redis_is_gone() -> None:
    dead = Store.from_url(f"redis://127.0.0.1:{free_port()}/0")
    clock = Clock()
    report = wm.WatchReporter(dead, "n1", clock=clock)
    started = time.monotonic()
    for _ in range(3):
        report("e1", 0.01, 10, 0.0)  # each call is due to flush, and each flush fails: counted, not raised
        clock.t += wm.FLUSH_SECONDS
    assert report.errors == 3
    assert time.monotonic() - started < 3 * wm.REPORTER_TIMEOUT_SECONDS + 1
    report("e1", 0.01, 10, 0.0)  # due again: a fourth failed flush
    report("e1", 0.01, 10, 0.0)  # not due: kept in memory
    assert report.errors == 4
    with pytest.raises(redis.ConnectionError):  # only the on_watch call and close() swallow errors
        report.flush()
    report("e1", 0.01, 10, 0.0)
    report.close()
    assert report.errors == 5


def test_process_tree_metrics_include_child_processes() -> None:
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(80_000_000); import time; time.sleep(60)"])
    try:
        proc = psutil.Process(child.pid)
        deadline = time.monotonic() + scaled(10)
        while proc.memory_info().rss < 80_000_000:
            assert time.monotonic() < deadline, "child never allocated its memory"
            time.sleep(0.05)
        body = generate_latest(wm.ProcessTreeCollector(os.getpid()))  # type: ignore[arg-type]
        own = psutil.Process().memory_info().rss
        tree = value(body, "ajet_runner_worker_tree_resident_memory_bytes")
        assert tree is not None and tree >= own + 80_000_000
    finally:
        child.kill()
        child.wait()


def test_worker_http_server_answers_metrics_and_healthz(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ajet_runner.workers.node.supervisor import NodeSupervisor

    sup = NodeSupervisor(Settings(), NodeInfo("n1", 0, 2), redis_url)
    ticks: list[int] = []
    sup.on_tick = lambda s: ticks.append(1)
    server = wm.serve_worker_metrics(sup, 0, addr="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            body = resp.read()
            assert resp.headers["Content-Type"].startswith("text/plain")
        assert value(body, "ajet_runner_worker_running_experiments", node="n1") == 0
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            assert resp.status == 200
        monkeypatch.setattr(wm, "HEALTH_STALE_SECONDS", 0.0)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/healthz", timeout=10)
        assert err.value.code == 503
        monkeypatch.setattr(wm, "HEALTH_STALE_SECONDS", 60.0)
        assert sup.on_tick is not None
        sup.on_tick(sup)  # the supervisor's loop ticks: healthy again, and the earlier hook still runs
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            assert resp.status == 200
        assert ticks == [1]
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/nope", timeout=10)
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
