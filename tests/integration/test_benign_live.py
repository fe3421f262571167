"""Verdicts in a live run (issue 25, item 1): the benign corpus printed by a running trainer leaves the
run `running` and it ends `completed` with one attempt; a real fatal line in a live process that then
prints nothing is `failing` once the signature's settle has passed — not before, not at the stall rule.

A real worker process, real tmux and Redis, the simulated AgentJet printing the corpus files through its
`benign` injection (examples/agentjet_sim/README.md) at its training steps.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from ajet_runner.service.submit import submit
from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CORPUS = Path(__file__).parents[1] / "corpus" / "logs"
BENIGN = CORPUS / "benign"
YAML_REL = "tests/bench/benchmark_math/benchmark_math.yaml"
SETTLE = 4.0  # the worker's default settle (AJET_RUNNER_DIAGNOSIS_SETTLE_SECONDS); cuda_oom's own is 5 s
SILENCE = 6.0  # no output at all after a look-alike: longer than any settle that applies to it
# Look-alikes rejected by their shape: printed, then silence — a verdict would have settled by then.
SHAPE_ONLY = ["echoed_env.log", "vllm_advice.log", "startup_docs.log", "retried_connection.log",
              "caught_oom_retried.log"]
# Evidence that the run goes on after: printed slowly, so the phase without a training step lasts
# longer than the settle (10+ s).
GOES_ON = ["logged_oom_then_eval.log", "long_rollout_phase.log"]


def sim_yaml(sc, **sim: object) -> None:
    path = sc.codebase / YAML_REL
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["ajet_sim"].update({"step_seconds": 0.3, "val_seconds": 0.1, "startup_seconds": 0.3, **sim})
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")


def transitions(store: Store, exp_id: str) -> list[dict]:
    return [e for e in store.events.read(exp_id) if e.get("type") == "transition"]


def test_the_benign_corpus_in_a_live_run_ends_completed_with_one_attempt(
        tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    sc = make("demo", tmp_path)
    inject = [{"signature": "benign", "at_step": i, "file": str(BENIGN / name), "then_seconds": SILENCE}
              for i, name in enumerate(SHAPE_ONLY, 1)]
    inject += [{"signature": "benign", "at_step": len(SHAPE_ONLY) + i, "file": str(BENIGN / name),
                "line_seconds": 0.5} for i, name in enumerate(GOES_ON, 1)]
    inject.append({"signature": "benign", "at_end": True, "file": str(BENIGN / "final_metrics_actor_died.log"),
                   "then_seconds": SILENCE})
    sim_yaml(sc, fail=inject)
    assert len(inject) == len(list(BENIGN.glob("*.log")))  # every corpus file is printed
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_DIAGNOSIS_SETTLE_SECONDS=str(SETTLE))
    t0 = time.monotonic()
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 240, "the run to finish")
    took = time.monotonic() - t0
    rec = store.records.raw(exp_id) or {}
    moves = [(e.get("from"), e.get("to"), e.get("trigger")) for e in transitions(store, exp_id)]
    print(f"benign live run: {took:.1f}s, transitions {moves}")
    assert rec["outcome"] == "completed", (rec.get("reason"), moves)
    assert not [m for m in moves if m[1] == "failing"]
    assert [m[2] for m in moves].count("launched") == 1  # 0 relaunches
    data = sc.results_json()
    assert len(data["attempts"]) == 1 and data["attempts"][0]["exit_code"] == 0 and data["repairs"] == []
    log = (sc.results / "logs" / "attempt-1.log").read_bytes().decode("utf-8", "replace")
    for name in [*SHAPE_ONLY, *GOES_ON, "final_metrics_actor_died.log"]:  # each file really went through
        first = (BENIGN / name).read_text(encoding="utf-8").splitlines()[0]
        assert first in log, name


def test_a_real_fatal_line_in_a_live_process_is_failing_once_its_settle_has_passed(
        tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    sc = make("demo", tmp_path)
    oom = CORPUS / "cuda_oom_ray.log"
    sim_yaml(sc, fail=[{"signature": "benign", "at_step": 3, "file": str(oom), "then_seconds": 600}])
    settle = signature("cuda_oom").settle_seconds
    assert settle == 5.0
    store = Store.from_url(redis_url)
    log = sc.results / "logs" / "attempt-1.log"
    needle = "Set the environment variable HYDRA_FULL_ERROR=1"  # the OOM file's last lines are out
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: log.exists() and needle in log.read_text(errors="replace"), 120, "the OOM to be printed",
                 interval=0.02)
        printed_at = time.time()
        failing = wait_for(lambda: [e for e in transitions(store, exp_id) if e.get("to") == "failing"], 60,
                           "the run to be failing")
        store.runs.request_cancel(exp_id)
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 90, "finished")
    (first,) = failing
    after = first["at"] - printed_at
    print(f"cuda_oom printed -> failing: {after:.2f}s (settle {settle:.0f}s)")
    assert first.get("rule") == "diagnosis" and first.get("signature") == "cuda_oom", first
    assert settle - 0.5 <= after <= settle + 5.0  # confirmed by its settle, not by the 30-min stall rule
