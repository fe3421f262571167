"""Simulated swarm client (`python -m tutorial.example_swarm.agent_roll`), like AgentJet's
appworld `agent_roll.py`: configures its job in Python, reaches the server at
`AJET_SWARM_URL` (default http://localhost:10086), retries a dead server once after
`AJET_SIM_SWARM_RETRY_SECONDS` (16 s as in AgentJet), evaluates at step 0 and every
`SWARM_TEST_FREQ` steps as `## Step N` markdown blocks under `APPWORLD_RESULT_DIR`
(default ./appworld_swarm_results), and prints `[INFO] Training complete.` at the end.
`SWARM_VAL_BEFORE_TRAIN=1` asks for val_before_train, which the server refuses.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def _call(url: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _connect(url: str) -> dict[str, Any] | None:
    retry = float(os.environ.get("AJET_SIM_SWARM_RETRY_SECONDS", "16"))
    for attempt in (1, 2):
        try:
            return _call(url, "/health")
        except (urllib.error.URLError, OSError) as exc:
            print(f"[WARNING] Swarm server at {url} not reachable ({exc}); attempt {attempt}/2", flush=True)
            if attempt == 1:
                time.sleep(retry)
    return None


def _step(url: str, step: int) -> dict[str, Any] | None:
    for attempt in (1, 2):
        try:
            return _call(url, "/train_step", {"step": step})
        except (urllib.error.URLError, OSError):
            if attempt == 1:
                time.sleep(float(os.environ.get("AJET_SIM_SWARM_RETRY_SECONDS", "16")))
    return None


def _evaluate(out: Path, step: int, total: int) -> None:
    rate = 20.0 + 60.0 * step / max(total, 1)
    block = (f"## Step {step}\n- dataset: appworld_dev\n- pass@1: {rate:.2f}%\n"
             f"- pass@4: {min(rate + 10, 100):.2f}%\n\n")
    with out.open("a", encoding="utf-8") as fh:
        fh.write(block)
    print(f"[INFO] Evaluation at step {step}: pass@1 {rate:.2f}%", flush=True)


def main() -> int:
    url = os.environ.get("AJET_SWARM_URL", "http://localhost:10086").rstrip("/")
    total = int(os.environ.get("SWARM_STEPS", "6"))
    freq = int(os.environ.get("SWARM_TEST_FREQ", "2"))
    delay = float(os.environ.get("SWARM_STEP_SECONDS", "0.5"))
    out_dir = Path(os.environ.get("APPWORLD_RESULT_DIR", "./appworld_swarm_results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "val_results.md"
    print(f"[INFO] AgentJetJob(project_name=swarm_sim, total_steps={total}) -> {url}", flush=True)
    if _connect(url) is None:
        print("[ERROR] Unable to connect to swarm server.", flush=True)
        return 1
    try:
        _call(url, "/sync_train_config", {"project_name": "swarm_sim",
                                          "val_before_train": os.environ.get("SWARM_VAL_BEFORE_TRAIN") == "1"})
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}").get("error", str(exc))
        print(f"Traceback (most recent call last):\nValueError: {detail}", flush=True)
        return 1
    _evaluate(out, 0, total)
    for step in range(1, total + 1):
        time.sleep(delay)
        reply = _step(url, step)
        if reply is None:
            print("[ERROR] Unable to connect to swarm server.", flush=True)
            return 1
        print(f"Training Progress: {step}/{total} | kl_loss: {reply['kl_loss']:.5f}", flush=True)
        if step % freq == 0 or step == total:
            _evaluate(out, step, total)
    print("[INFO] Training complete.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
