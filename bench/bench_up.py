"""`ajet-runner up` on a fresh dir: seconds from the command's start until the console answers (/healthz,
then the experiments page with the token), and until its local worker has joined (its node listed),
next to the floor: a bare uvicorn app started the same way answering its first request.

    .venv/bin/python bench/bench_up.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._harness import line, wait

FLOOR_APP = """
import uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
uvicorn.run(app, host="127.0.0.1", port=int(__import__("sys").argv[1]), log_level="warning")
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        return httpx.get(url, headers=headers or {}, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def one_up(work: Path) -> tuple[float, float, float]:
    """(to /healthz, to the console page, to the worker's node listed) in seconds."""
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_") and k != "REDIS_URL"}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ajet_runner", "up", "--dir", str(work), "--port", str(port)],
                            env=env, cwd=work.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: _answers(f"{base}/healthz") or proc.poll() is not None, 120, "/healthz", 0.02)
        health = time.monotonic() - t0
        token = wait(lambda: (work / "token").exists() and (work / "token").read_text().strip(), 30, "the token")
        auth = {"Authorization": f"Bearer {token}", "Accept": "text/html"}
        wait(lambda: _answers(f"{base}/ui/", auth), 60, "the console page", 0.02)
        page = time.monotonic() - t0
        bearer = {"Authorization": f"Bearer {token}"}
        wait(lambda: _answers(f"{base}/v1/nodes", bearer)
             and httpx.get(f"{base}/v1/nodes", headers=bearer, timeout=5).json(), 120, "the worker to join", 0.05)
        joined = time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return health, page, joined


def one_floor() -> float:
    port = _port()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", FLOOR_APP, str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait(lambda: _answers(f"http://127.0.0.1:{port}/"), 60, "the bare app", 0.02)
        return time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    health, page, joined, floor = [], [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-up-") as tmp:
            h, p, j = one_up(Path(tmp) / "up")
        health.append(h)
        page.append(p)
        joined.append(j)
        floor.append(one_floor())
    print(f"`ajet-runner up` on a fresh dir (embedded Redis, demo submitted): {args.runs} runs, load average "
          f"{os.getloadavg()[0]:.1f}; floor = a bare uvicorn app from a fresh interpreter (target: answers ≤ 3 s)")
    print(line("up -> /healthz answers", health, floor, unit="s", scale=1.0))
    print(line("up -> console page answers", page, floor, unit="s", scale=1.0))
    print(line("up -> its worker joined", joined, floor, unit="s", scale=1.0))


if __name__ == "__main__":
    main()
