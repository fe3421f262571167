"""/metrics is written in one way per family: the per-experiment gauges as hand-written text, which must read
back as what was meant (labels with quotes, backslashes, newlines and CJK; NaN, inf and signed zeros) and pass
Prometheus' own linter (`promtool check metrics`) together with the rest of the body."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ajet_runner.service.cluster_metrics import EXPERIMENT_GAUGES, experiment_text, metrics_response
from ajet_runner.store.cluster.snapshot import RowCache, Snapshot, read_snapshot
from ajet_runner.store.keys import exp_key
from ajet_runner.store.store import Store

ODD = 'a "quoted"\\ purpose\nwith 中文 `ticks`'
SNAP = Snapshot(now=1000.0, states={"running": 2, "finished": 1, "weird": 1}, experiments=[
    {"id": "e1", "node": "n1", "purpose": ODD, "state": "running", "started_at": "100", "max_seconds": "3600",
     "attempt": "2", "latest_metrics": {"mean_reward": 0.5, "step": 40, "task_pass_rate@1": 0.25,
                                        "task_pass_rate@4": math.nan, "task_pass_rate@x": 1}},
    {"id": 'e"2', "node": "", "purpose": "", "state": "finished", "started_at": "", "finished_at": "900",
     "max_seconds": "", "attempt": "", "latest_metrics": {"mean_reward": math.inf}},
    {"id": "e3", "node": "n\\2", "purpose": "p", "state": "queued", "latest_metrics": ["not", "a", "dict"]},
    {"id": "e4", "state": "running", "latest_metrics": {"mean_reward": 0.0, "task_pass_rate@2": -0.0}},
])


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_text_reads_back_as_the_records_say() -> None:
    text = experiment_text(SNAP)
    got = _samples(text)
    families = [f.name for f in text_string_to_metric_families(text)]
    assert families == [name for name, _ in EXPERIMENT_GAUGES]  # every family once, headers even when empty
    purpose = " ".join(ODD.split())  # one line, as purpose_label makes it
    assert got[("ajet_runner_experiment_info", (("experiment", "e1"), ("node", "n1"), ("purpose", purpose)))] == 1
    assert got[("ajet_runner_experiment_mean_reward", (("experiment", 'e"2'), ("node", "")))] == math.inf
    assert got[("ajet_runner_experiment_state", (("experiment", "e3"), ("node", "n\\2"), ("state", "queued")))] == 1
    assert got[("ajet_runner_experiment_elapsed_seconds", (("experiment", "e1"), ("node", "n1")))] == 900.0
    assert got[("ajet_runner_experiment_val_step", (("experiment", "e1"), ("node", "n1")))] == 40.0
    rates = {dict(labels)["k"]: v for (name, labels), v in got.items() if name.endswith("_task_pass_rate")}
    assert rates.keys() == {"1", "4", "2"} and rates["1"] == 0.25 and math.isnan(rates["4"])
    assert math.copysign(1.0, rates["2"]) == -1.0  # a signed zero is written as it was
    assert not [k for k in got if dict(k[1]).get("experiment") == "e3" and k[0].endswith("_mean_reward")]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH (Debian package `prometheus`; "
                    "scripts/ensure-test-deps.sh installs it as root)")
def test_promtool_finds_nothing_wrong_with_a_whole_scrape(store: Store) -> None:
    now = time.time()
    store.records.create("p1", {"state": "running", "purpose": ODD, "node": "n1", "started_at": now - 100,
                        "latest_metrics": {"mean_reward": 0.5, "step": 3, "task_pass_rate@1": 0.25}}, {})
    store.nodes.heartbeat("n1", {"gpus": 2, "gpus_busy": 1}, ttl=30)
    body, _ = metrics_response(store)
    assert b'ajet_runner_experiment_mean_reward{experiment="p1",node="n1"} 0.5' in body
    done = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


@pytest.fixture()
def store(redis_url: str) -> Iterator[Store]:
    s = Store.from_url(redis_url)
    yield s
    s.r.close()


def test_rows_reused_between_scrapes_give_the_text_of_a_fresh_read(store: Store) -> None:
    """A scrape reuses the previous scrape's decoded rows and series text only while a record's fields
    are the same bytes: a changed, a new and a deleted experiment all show at once, the elapsed time
    moves with the clock, and the text is what a scrape without the cache writes."""
    now = time.time()
    for i, state in enumerate(["running", "queued", "finished"]):
        store.records.create(f"e{i}", {"state": state, "purpose": f"p{i}", "node": "n1", "started_at": now - 100,
                                       "finished_at": now - 10 if state == "finished" else "",
                                       "latest_metrics": {"mean_reward": 0.5, "step": 3}}, {})
    cache = RowCache()

    def text(at: float, rows: RowCache | None) -> str:
        return experiment_text(read_snapshot(store, 600, at, rows))

    assert text(now, cache) == text(now, None)
    store.r.hset(exp_key("e0"), "latest_metrics", json.dumps({"mean_reward": 0.75, "step": 4}))
    store.records.create("e3", {"state": "running", "purpose": "new", "node": "n2", "started_at": now - 5}, {})
    store.records.delete("e1")
    later = text(now + 30, cache)
    assert later == text(now + 30, None)
    assert 'ajet_runner_experiment_mean_reward{experiment="e0",node="n1"} 0.75' in later
    assert 'ajet_runner_experiment_elapsed_seconds{experiment="e0",node="n1"} 130.0' in later
    assert 'ajet_runner_experiment_elapsed_seconds{experiment="e2",node="n1"} 90.0' in later  # frozen at finish
    assert 'experiment="e3"' in later and 'experiment="e1"' not in later
    assert sorted(cache.rows) == [b"e0", b"e2", b"e3"]  # a deleted experiment's row is dropped


def test_the_api_fills_the_row_cache_before_the_first_scrape(store: Store, redis_url: str) -> None:
    """The API decodes and formats every record once at start, so its first scrape finds them cached
    (at 10,000 live experiments a cold scrape costs ~3x a warm one) and writes the same text."""
    from fastapi.testclient import TestClient

    from ajet_runner.service.api.application import create_app
    from ajet_runner.service.cluster_metrics import ROWS
    from ajet_runner.store.settings import Settings
    from tests.integration.scenario import wait_for

    now = time.time()
    ids = [f"warm{i}" for i in range(3)]
    for i, exp_id in enumerate(ids):
        store.records.create(exp_id, {"state": "running", "purpose": f"p{i}", "node": "n1", "started_at": now - 100,
                                      "latest_metrics": {"mean_reward": 0.5, "step": 3}}, {})
    ROWS.rows.clear()
    with TestClient(create_app(Settings(redis_url=redis_url), insecure=True), base_url="http://127.0.0.1") as client:
        wait_for(lambda: all((row := ROWS.rows.get(i.encode())) is not None and row.lines for i in ids),
                 10, "the warm-up to fill the row cache")
        warmed = {i: ROWS.rows[i.encode()] for i in ids}
        body = client.get("/metrics").text
    assert all(ROWS.rows[i.encode()] is row for i, row in warmed.items())  # reused, not decoded again
    assert 'ajet_runner_experiment_mean_reward{experiment="warm1",node="n1"} 0.5' in body


def test_a_scrape_that_waits_for_another_answers_with_its_body(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scrapes run one at a time; one that arrives while another computes (an HA Prometheus pair, a
    scrape racing the start's warm-up) waits and answers with that one's body: one computation."""
    import sys
    import threading

    import ajet_runner.service.cluster_metrics as metrics
    from tests.integration.scenario import wait_for

    store.records.create("sf1", {"state": "running", "purpose": "p", "node": "n1", "started_at": time.time()}, {})
    computing, release, made = threading.Event(), threading.Event(), []
    real = metrics._metrics_response

    def slow(s: Store) -> tuple[bytes, str]:
        computing.set()
        release.wait(10)
        made.append(real(s))
        return made[-1]

    monkeypatch.setattr(metrics, "_metrics_response", slow)
    got: dict[str, bytes] = {}
    first = threading.Thread(target=lambda: got.__setitem__("first", metrics.metrics_response(store)[0]))
    second = threading.Thread(target=lambda: got.__setitem__("second", metrics.metrics_response(store)[0]))
    first.start()
    wait_for(computing.is_set, 10, "the first scrape to compute")
    second.start()
    wait_for(lambda: (frame := sys._current_frames().get(second.ident or -1)) is not None
             and frame.f_code.co_name == "_one_scrape", 10, "the second scrape to wait for the first")
    release.set()
    first.join(10)
    second.join(10)
    assert len(made) == 1 and got["second"] is got["first"] and b'experiment="sf1"' in got["first"]
