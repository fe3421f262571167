"""Stop wins over an adviser ask (issue 25, item 6): a stop request while the LLM adviser is asked
aborts the ask at once and the run ends `cancelled`, not `failed` after the ask's deadline.

A real worker process, real tmux and Redis, the simulated AgentJet's unknown failure (only the adviser
has a plan for it), and the fake OpenAI-compatible server answering after 60 s.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from ajet_runner.workers.repair.adviser import AdviserConfig, AskCancelled, chat
from tests.integration.fake_llm import Reply, advice, fake_llm
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIX = {"kind": "yaml_set", "key": "ajet.rollout.tensor_model_parallel_size", "value": 4}
SLOW = 60.0  # the fake model answers after this long: far past the 2 s a stop may take


def test_a_stop_aborts_the_http_request_in_flight() -> None:
    with fake_llm() as llm:
        llm.answer = lambda body: Reply(advice([FIX]), delay=SLOW)
        stop = threading.Event()
        threading.Timer(0.5, stop.set).start()
        t0 = time.monotonic()
        with pytest.raises(AskCancelled):
            chat(AdviserConfig(url=llm.url, timeout=120), [{"role": "user", "content": "hi"}],
                 deadline=time.monotonic() + 120, cancelled=stop.is_set)
        took = time.monotonic() - t0
        assert len(llm.requests) == 1  # it was asked, then abandoned
    print(f"ask aborted {took - 0.5:.3f}s after the stop")
    assert took < 0.5 + 2.0


def test_a_stop_during_an_adviser_ask_ends_the_run_cancelled_within_2_s(
        tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    sc = make("unknown_failure", tmp_path)
    store = Store.from_url(redis_url)
    with fake_llm() as llm:
        llm.answer = lambda body: Reply(advice([FIX]), delay=SLOW)
        env = worker_env(redis_url, tmux_socket, AJET_RUNNER_LLM_URL=llm.url, AJET_RUNNER_LLM_MODEL="fake-slow",
                         AJET_RUNNER_LLM_TIMEOUT_SECONDS="120",
                         AJET_RUNNER_CATALOGUE_SUGGESTIONS=str(tmp_path / "suggestions.yaml"))
        with running_worker(env, "n1", "--gpus", "0"):
            wait_for(store.nodes.all, 30, "the worker to register")
            exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
            asking = wait_for(lambda: [e for e in store.events.read(exp_id)
                                       if e.get("type") == "adviser" and e.get("status") == "asking"],
                              120, "the adviser to be asked")
            wait_for(lambda: llm.requests, 30, "the request to reach the model")
            stopped_at = time.time()
            store.runs.request_cancel(exp_id)
            wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "the run to finish")
            finished_at = time.time()
    rec = store.records.raw(exp_id) or {}
    assert rec["outcome"] == "cancelled", rec.get("reason")
    events = store.events.read(exp_id)
    (cancel,) = [e for e in events if e.get("type") == "transition" and e.get("trigger") == "cancel"]
    assert cancel["from"] == "failing" and "while the adviser was asked" in cancel.get("reason", "")
    aborted = [e for e in events if e.get("type") == "adviser" and e.get("status") == "cancelled"]
    assert aborted and not [e for e in events if e.get("type") == "adviser" and e.get("status") == "answered"]
    assert not [e for e in events if e.get("trigger") in ("repair", "give_up", "relaunch")]
    to_cancel = cancel["at"] - stopped_at
    print(f"asked at +0, stop at +{stopped_at - asking[0]['at']:.2f}s; stop -> cancel transition "
          f"{to_cancel:.3f}s, stop -> finished (seen by the test) {finished_at - stopped_at:.3f}s")
    assert to_cancel < 2.0
    data = sc.results_json()
    assert data["outcome"] == "cancelled" and len(data["attempts"]) == 1
    (rep,) = data["repairs"]
    assert rep["advice_result"] == "cancelled" and rep["next"].startswith("stopped: a stop request arrived while")
