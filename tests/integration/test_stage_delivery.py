"""The outbox's deliverer (workers/notify/deliverer.py) against a webhook receiver on loopback and a real Redis:
signed posts, retries with backoff recorded in the experiment's events, giving up without touching the
outcome, the stage report written before the stage's post, a stage's own URL, and a notice held by a
deliverer that died delivered by the next one."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis
from pydantic import SecretStr

from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.cluster.outbox import Outbox
from ajet_runner.store.cluster.stages import define_stage, stage_meta
from ajet_runner.store.keys import OUTBOX
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.notify.deliverer import Deliverer
from tests.integration.scenario import CLI, wait_for
from tests.integration.webhook_receiver import WebhookReceiver
from tests.integration.workers import worker_env

pytestmark = pytest.mark.integration
SECRET = "k3y"


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store(redis.Redis.from_url(redis_url), retention_seconds=0)


def settings(url: str, **extra: object) -> Settings:
    return Settings(webhook_url=url, webhook_secret=SecretStr(SECRET), webhook_backoff_cap_seconds=0.05,
                    webhook_max_attempts=3, webhook_timeout_seconds=5, **extra)  # type: ignore[arg-type]


def finished(store: Store, exp_id: str, stage: str = "", result_dir: str = "/r") -> None:
    rec = store.records.create(exp_id, {"state": "queued", "lifecycle": Lifecycle.initial_dict(exp_id),
                                        "purpose": exp_id, "result_dir": f"{result_dir}/{exp_id}",
                                        **({"stage": stage} if stage else {})},
                               {"message": "submitted"})
    store.records.transition(exp_id, expected_version=int(rec["version"]), event={"type": "transition"}, fields={
        "state": "finished", "outcome": "completed", "latest_metrics": {"mean_reward": 0.7, "step": 4.0},
        "best_metrics": {"mean_reward": {"value": 0.75, "step": 2}}})


def drain(deliverer: Deliverer, until: object, timeout: float = 20.0) -> None:
    """Run the deliverer's steps until `until()` holds (tasks that are due later are waited for)."""
    def step() -> object:
        deliverer.step()
        return until()  # type: ignore[operator]

    wait_for(step, timeout, "the deliveries", interval=0.02)


def types(store: Store, exp_id: str) -> list[str]:
    return [e["type"] for e in store.events.read(exp_id)]


def test_a_post_that_fails_is_retried_with_backoff_and_each_try_is_an_event(store: Store) -> None:
    with WebhookReceiver(fail_first=2) as hook:
        finished(store, "e1")
        d = Deliverer(store, settings(hook.url))
        drain(d, lambda: hook.received)
        got = hook.received[0]
        assert got.signed_by(SECRET) and not got.signed_by("other")
        body = got.json
        assert body["type"] == "experiment_finished" and body["id"] == "e1" and body["outcome"] == "completed"
        assert body["final"] == {"mean_reward": 0.7, "step": 4.0} and body["best"]["mean_reward"]["value"] == 0.75
        assert hook.refused == 2
        events = [e for e in store.events.read("e1") if e["type"].startswith("webhook_")]
        assert [e["type"] for e in events] == ["webhook_failed", "webhook_failed", "webhook_delivered"]
        assert [e["attempt"] for e in events] == [1, 2, 3] and "HTTP 503" in events[0]["error"]
        assert {e["delivery"] for e in events} == {body["delivery"]}
        assert Outbox(store.r).pending() == 0


def test_failed_posts_back_off_exponentially_up_to_the_cap(store: Store) -> None:
    """Each failed POST is due again 2 s later, then 4, 8, ... never more than the cap (issue 37 item 3); the
    test makes the task due at once after reading its due time instead of waiting the delays out."""
    cap, attempts = 10.0, 6
    with WebhookReceiver(fail_first=99) as hook:
        finished(store, "e1")
        d = Deliverer(store, Settings(webhook_url=hook.url, webhook_secret=SecretStr(SECRET),
                                      webhook_backoff_cap_seconds=cap, webhook_max_attempts=attempts,
                                      webhook_timeout_seconds=5))
        windows: list[tuple[float, float, float]] = []  # (earliest, due, latest) for each failed attempt
        expected = [2.0, 4.0, 8.0, cap, cap]
        for delay in expected:
            before = time.time()
            assert d.step()
            after = time.time()
            ((task_id, due),) = store.r.zrange(OUTBOX, 0, -1, withscores=True)
            windows.append((before + delay, due, after + delay))
            store.r.zadd(OUTBOX, {task_id: time.time()})  # due now
        assert all(lo <= due <= hi for lo, due, hi in windows), (expected, windows)
        assert d.step() and hook.refused == attempts  # the last attempt gives up: a dead letter, nothing due
        assert Outbox(store.r).pending() == 0 and Outbox(store.r).dead()[0]["attempts"] == attempts


def test_an_unreachable_receiver_is_given_up_and_the_outcome_stays(store: Store, tmp_path: Path) -> None:
    with WebhookReceiver(fail_first=99) as hook:
        finished(store, "e1")
        d = Deliverer(store, settings(hook.url))
        drain(d, lambda: "webhook_gave_up" in types(store, "e1"))
        assert hook.refused == 3 and Outbox(store.r).pending() == 0
        assert Outbox(store.r).dead()[0]["id"] == "e1"
        rec = store.records.raw("e1")
        assert rec["state"] == "finished" and rec["outcome"] == "completed"  # a failed delivery changes nothing


def test_without_a_url_nothing_is_posted_and_nothing_is_recorded(store: Store) -> None:
    finished(store, "e1")
    d = Deliverer(store, settings(""))
    assert d.step() and not d.step()
    assert Outbox(store.r).pending() == 0 and not any(t.startswith("webhook") for t in types(store, "e1"))


def test_the_last_experiment_of_a_stage_brings_its_report_then_its_own_webhook(store: Store, tmp_path: Path) -> None:
    with WebhookReceiver() as everyone, WebhookReceiver() as stage_hook:
        stage_dir = tmp_path / "stage"
        define_stage(store, "s1", directory=str(stage_dir), webhook_url=stage_hook.url)
        for i in ("a", "b"):
            finished(store, i, "s1", str(tmp_path / "runs"))
        finished(store, "other", "", str(tmp_path / "runs"))
        d = Deliverer(store, settings(everyone.url))
        drain(d, lambda: len(stage_hook.of_type("stage_finished")) == 1 and len(everyone.received) == 1)
        assert {r.json["id"] for r in stage_hook.of_type("experiment_finished")} == {"a", "b"}  # the stage's URL
        assert [r.json["id"] for r in everyone.received] == ["other"]
        event = stage_hook.of_type("stage_finished")[0].json
        assert event["report"] == str(stage_dir / "stage_report.md") and (stage_dir / "stage_report.md").is_file()
        assert event["experiments"] == 2 and event["outcomes"] == {"completed": 2} and event["succeeded"]
        assert event["best"] == {"metric": "mean_reward", "id": "a", "value": 0.75, "step": 2}
        assert stage_meta(store, "s1")["report_written"] == str(stage_dir / "stage_report.md")
        assert "stage_report" in types(store, "a") and "webhook_delivered" in types(store, "b")
        assert "not finished" not in (stage_dir / "stage_report.md").read_text()


def test_a_stage_report_that_cannot_be_written_is_retried_then_the_webhook_still_goes(store: Store,
                                                                                      tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with WebhookReceiver() as hook:
        define_stage(store, "s1", directory=str(blocker / "stage"))
        finished(store, "a", "s1")
        d = Deliverer(store, settings(hook.url))
        drain(d, lambda: hook.of_type("stage_finished"))
        assert hook.of_type("stage_finished")[0].json["report"] is None
        assert [e["attempt"] for e in store.events.read("a") if e["type"] == "stage_report_failed"] == [1, 2, 3]
        assert stage_meta(store, "s1")["report_error"]


def test_a_notice_a_dead_deliverer_held_is_delivered_by_the_next(store: Store) -> None:
    with WebhookReceiver() as hook:
        finished(store, "e1")
        held = Outbox(store.r).claim(lease_seconds=1.0)  # a deliverer took it ... and died
        assert held is not None
        d = Deliverer(store, settings(hook.url))
        assert not d.step()  # still held
        stopping = threading.Event()
        runner = threading.Thread(target=d.run, args=(stopping,))
        runner.start()
        try:
            wait_for(lambda: hook.received, 10, "the redelivery")
        finally:
            stopping.set()
            runner.join(10)
        assert [r.json["delivery"] for r in hook.received] == [held[1]["delivery"]]
        assert time.time() - hook.received[0].json["sent_at"] < 60


@pytest.mark.parametrize("url", ["http://hooks.example.com/a", "ftp://hooks.example.com/a",
                                 "https://hooks.example.com/a\r\nX-Injected: 1"])
def test_a_worker_refuses_a_webhook_url_it_may_not_post_to(redis_url: str, tmux_socket: str, url: str) -> None:
    """AJET_RUNNER_WEBHOOK_URL is checked when the worker starts (exit 2 naming it), like a stage's at submission."""
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_WEBHOOK_URL=url)
    done = subprocess.run([*CLI, "worker", "--node", "hookcheck", "--gpus", "0"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "AJET_RUNNER_WEBHOOK_URL" in done.stderr and "Traceback" not in done.stderr
    assert Store.from_url(redis_url).nodes.all() == []  # never registered
