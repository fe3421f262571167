"""The watch loop end to end: a fatal line in a live process, progress after a fatal-looking line,
and a re-adopting worker that goes on from the scan checkpoint instead of re-reading the log.

Real worker processes, real tmux, real Redis; the launch commands are small bash scripts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ajet_runner.service.demo import materialize
from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from ajet_runner.workers.watching.scan_checkpoint import SAVE_BYTES
from tests.integration.scenario import wait_for
from tests.integration.workers import kill_group, running_worker, start_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CORPUS = Path(__file__).parents[1] / "corpus" / "logs"
FILLER = "(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns xxxxxxxxxxxxxxxxxx"


def blueprint(workdir: Path, script: str) -> Path:
    bp = materialize("demo", workdir)
    text = re.sub(r"```bash\n.*?\n```", lambda _m: f"```bash\n{script.strip()}\n```", bp.read_text(), flags=re.S)
    bp.write_text(text)
    return bp


def transitions(store: Store, exp_id: str, dest: str) -> list[dict]:
    return [e for e in store.events.read(exp_id) if e.get("type") == "transition" and e.get("to") == dest]


def test_a_fatal_line_in_a_process_that_hangs_fails_the_run_without_waiting_for_the_stall(
        tmp_path, redis_url, tmux_socket) -> None:
    oom = CORPUS / "cuda_oom_ray.log"
    bp = blueprint(tmp_path / "w", f"cat {oom}\nexec sleep 600")  # prints the OOM, then hangs
    store = Store.from_url(redis_url)
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, bp.read_text(), node="n1")["id"]
        failing = wait_for(lambda: transitions(store, exp_id, "failing"), 90, "the run to be failing")
        store.runs.request_cancel(exp_id)
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 90, "finished")
    first = failing[0]
    assert first["trigger"] == "anomaly" and first.get("rule") == "diagnosis" and first.get("signature") == "cuda_oom"


def test_training_that_goes_on_after_a_fatal_looking_line_is_left_to_finish(tmp_path, redis_url, tmux_socket) -> None:
    oom = CORPUS / "cuda_oom_ray.log"
    steps = "\n".join(f"echo 'Training Progress: {i * 10}%|#   | {i}/10 [00:0{i}<00:10]'; sleep 1"
                      for i in range(4, 11))
    bp = blueprint(tmp_path / "w", f"cat {oom}\n{steps}\nexit 0")  # an actor's OOM that Ray survived
    store = Store.from_url(redis_url)
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, bp.read_text(), node="n1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "finished")
    rec = store.records.raw(exp_id) or {}
    assert rec["outcome"] == "completed", rec.get("reason")
    assert not transitions(store, exp_id, "failing")


def test_a_readopting_worker_goes_on_from_the_checkpoint_and_never_rereads_the_log(
        tmp_path, redis_url, tmux_socket) -> None:
    """The middle of the log is rewritten (same size, same first bytes) with a CUDA OOM line after
    the first worker checkpointed past it: only a worker that reads the log again from byte 0 can
    see it. The run then prints a host OOM: that must be the cause the adopting worker reports."""
    work = tmp_path / "w"
    go = work / "go"
    # The fatal line lands in the middle, 1.5 x SAVE_BYTES before the checkpoint at the end: further back than
    # an adopter may ever read again (was 24 MiB; writing and scanning it was most of this test's time).
    size = 3 * SAVE_BYTES
    script = (f"yes '{FILLER}' | head -c {size}\n"
              f"while [ ! -e {go} ]; do sleep 0.05; done\n"
              f"cat {CORPUS / 'host_oom_ray.log'}\nexec sleep 600")
    bp = blueprint(work, script)
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket)
    first = start_worker(env, "n1", "--gpus", "0")
    log = work / "results/logs/attempt-1.log"
    ckpt = work / "results/logs/attempt-1.scan.json"
    try:
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, bp.read_text(), node="n1")["id"]
        wait_for(lambda: log.exists() and log.stat().st_size >= size, 90, "the log to be written")
        wait_for(lambda: ckpt.exists() and json.loads(ckpt.read_text())["offset"] == size, 90,
                 "a checkpoint at the end of the log")
    finally:
        kill_group(first)
    line = len(FILLER) + 1
    with log.open("r+b") as f:  # a whole line in the middle becomes a fatal one
        f.seek((size // 2 // line) * line)
        f.write(b"torch.OutOfMemoryError: CUDA out of memory. Tried".ljust(line - 1, b" ") + b"\n")
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: any(e["type"] == "adopted" for e in store.events.read(exp_id)), 60, "the adoption")
        go.touch()
        failing = wait_for(lambda: transitions(store, exp_id, "failing"), 90, "the host OOM to be seen")
        store.runs.request_cancel(exp_id)
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 90, "finished")
    assert failing[0].get("signature") == "host_oom", failing[0]
    assert not ckpt.exists()  # removed once the attempt ended
