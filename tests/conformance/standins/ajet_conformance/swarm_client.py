"""Stand-in swarm client, shaped after AgentJet's `tutorial/example_appworld_swarm/agent_roll.py`.

Environment (the tutorial's names): AJET_SWARM_URL (http://localhost:10086),
APPWORLD_RESULT_DIR (./appworld_swarm_results), APPWORLD_EVAL_INTERVAL (10),
APPWORLD_EVAL_K (1), APPWORLD_TOTAL_TRAINING_STEPS (200); AJET_CONF_SWARM_RETRY_S (16): the
wait before the one retry of an unreachable server; AJET_CONF_EVAL_TASKS (20); the curve
knobs of ajet_conformance.knobs (AJET_CONF_CURVE, ...).

Evaluates at step 0 and every EVAL_INTERVAL steps: a summary line `[EVAL @ step N] ...` on the
console and a `## Step N` markdown block appended to <RESULT_DIR>/val_results.md (pass rates
as percentages), then prints `[INFO] Training complete.`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request

from ajet_conformance import knobs as knobs_mod
from ajet_conformance.trainer import _uniform

URL = os.environ.get("AJET_SWARM_URL", "http://localhost:10086").rstrip("/")


def _call(method: str, path: str) -> dict:
    req = urllib.request.Request(URL + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


def _connect() -> dict:
    retry_s = float(os.environ.get("AJET_CONF_SWARM_RETRY_S", "16"))
    for attempt in (1, 2):
        try:
            return _call("GET", "/status")
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            if attempt == 1:
                print(f"[WARN] swarm server at {URL} not reachable ({exc}); retrying in {retry_s:g} s", flush=True)
                time.sleep(retry_s)
    print("Unable to connect to swarm server.", flush=True)
    raise SystemExit(1)


def main() -> None:
    result_dir = os.environ.get("APPWORLD_RESULT_DIR", "./appworld_swarm_results")
    interval = int(os.environ.get("APPWORLD_EVAL_INTERVAL", "10"))
    k = int(os.environ.get("APPWORLD_EVAL_K", "1"))
    total = int(os.environ.get("APPWORLD_TOTAL_TRAINING_STEPS", "200"))
    n_tasks = int(os.environ.get("AJET_CONF_EVAL_TASKS", "20"))
    knobs = knobs_mod.read(None)

    status = _connect()
    print(f"[INFO] swarm server engine status: {status.get('engine_status')}", flush=True)
    started = urllib.request.Request(URL + "/start", method="POST", data=b"")
    try:
        urllib.request.urlopen(started, timeout=30).read()
    except urllib.error.HTTPError as exc:
        print(json.loads(exc.read() or b"{}").get("error", str(exc)), flush=True)
        raise SystemExit(1) from None

    os.makedirs(result_dir, exist_ok=True)
    val_path = os.path.join(result_dir, "val_results.md")
    log_path = os.path.join(result_dir, "eval_results.log")
    print(f"[INFO] Loaded {n_tasks} eval tasks (split=dev)", flush=True)

    def run_eval(step: int) -> None:
        p = knobs_mod.success_probability(knobs, step, total)
        per_task = [[1.0 if _uniform("swarm", t, j, step) < p else 0.0 for j in range(k)] for t in range(n_tasks)]
        flat = [r for rs in per_task for r in rs]
        avg = sum(flat) / len(flat)
        std = statistics.pstdev(flat) if len(flat) > 1 else 0.0
        pass1 = sum(1 for r in flat if r >= 1.0) / len(flat)
        all_ok = sum(1 for rs in per_task if all(r >= 1.0 for r in rs))
        any_ok = sum(1 for rs in per_task if any(r >= 1.0 for r in rs))
        passk = any_ok / len(per_task)
        summary = (f"[EVAL @ step {step}] mean_reward={avg:.4f} std_reward={std:.4f} "
                   f"task_pass_rate@1={pass1*100:.2f}% task_pass_rate@{k}={passk*100:.2f}% "
                   f"n_tasks={len(per_task)} n_rollouts={len(flat)}")
        print(summary, flush=True)
        with open(log_path, "a") as fh:
            fh.write(summary + "\n")
        with open(val_path, "a") as fh:
            fh.write(f"\n## Step {step}\n- pass_n: {k}\n- total_tasks: {len(per_task)}\n"
                     f"- num_all_success_tasks: {all_ok}\n- num_pass_n_tasks: {any_ok}\n"
                     f"- task_pass_rate@1: {pass1*100:.2f}%\n- task_pass_rate@{k}: {passk*100:.2f}%\n"
                     f"- mean_reward: {avg:.4f}\n- std_reward: {std:.4f}\n- n_rollouts: {len(flat)}\n")

    run_eval(0)
    last_eval = 0
    step = 0
    while step < total:
        try:
            step = int(_call("POST", "/step")["global_step"])
        except (urllib.error.URLError, ConnectionError, OSError, KeyError) as exc:
            print(f"[ERROR] swarm server stopped answering: {exc}", flush=True)
            raise SystemExit(1) from None
        if step >= last_eval + interval:
            run_eval(step)
            last_eval = step
    print("[INFO] Training complete.", flush=True)


if __name__ == "__main__":
    sys.exit(main())
