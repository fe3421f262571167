"""Adoption never skips evidence silently (issue 25, item 7): `kill -9` of the worker while the command
writes 50 MB/s; the log grows by more than the old skip threshold (512 MB) before another worker adopts
the run; a fatal line written in that gap must still be found, and no byte range is left unscanned (or,
if one were, the report would name it).

Real worker processes, real tmux and Redis; the command is a small Python writer paced at 50 MB/s that
appends to its attempt log itself (O_APPEND, beside the wrapper's tee): through the tmux pane a loaded
2-core machine reaches only ~13 MB/s, and the rate under test is the scanner's, not tmux's.
"""

from __future__ import annotations

import json
import mmap
import re
import sys
import time
from pathlib import Path

import pytest

from ajet_runner.service.demo import materialize
from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from tests.integration.scenario import wait_for
from tests.integration.workers import kill_group, running_worker, start_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]

RATE = 50 << 20  # bytes per second
GAP = 600 << 20  # the log grows this much after the checkpoint before the next worker starts (> 512 MB)
FATAL = "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."

WRITER = r'''
import os, sys, time
work, rate, log = sys.argv[1], int(sys.argv[2]), sys.argv[4]
line = ("(TaskRunner pid=1) kv " + "x" * 1000 + "\n").encode()  # neither progress nor evidence
chunk = line * 1024  # ~1 MB
out = open(log, "ab", buffering=0)  # O_APPEND: whole writes land at the end, beside tee's
t0, sent, fatal_done = time.monotonic(), 0, False
while not os.path.exists(os.path.join(work, "stop")):
    if not fatal_done and os.path.exists(os.path.join(work, "fatal")):
        out.write(b"(TaskRunner pid=1) " + sys.argv[3].encode() + b"\n")
        fatal_done = True
    out.write(chunk)
    sent += len(chunk)
    ahead = sent / rate - (time.monotonic() - t0)
    if ahead > 0:
        time.sleep(ahead)
with open(os.path.join(work, "rate"), "w") as f:
    f.write(str(sent / (time.monotonic() - t0)))
while True:
    time.sleep(3600)
'''


def blueprint(work: Path) -> Path:
    bp = materialize("demo", work)
    writer = work / "writer.py"
    writer.write_text(WRITER)
    log = work / "results/logs/attempt-1.log"
    script = f"echo writing; exec {sys.executable} {writer} {work} {RATE} '{FATAL}' {log}"
    bp.write_text(re.sub(r"```bash\n.*?\n```", lambda _m: f"```bash\n{script}\n```", bp.read_text(), flags=re.S))
    return bp


@pytest.mark.timeout(600)  # ~1 GB is written and scanned on a shared 2-core machine
def test_a_worker_killed_under_a_50_mb_s_writer_is_adopted_and_the_gap_is_scanned(
        tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    work = tmp_path / "w"
    bp = blueprint(work)
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket)
    log = work / "results/logs/attempt-1.log"
    ckpt = work / "results/logs/attempt-1.scan.json"
    first = start_worker(env, "n1", "--gpus", "0")
    try:
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, bp.read_text(), node="n1")["id"]
        wait_for(lambda: ckpt.exists() and json.loads(ckpt.read_text())["offset"] >= 32 << 20, 120,
                 "a checkpoint past 32 MB")
    finally:
        kill_group(first)  # kill -9 of the supervisor and its watcher, mid-scan
    killed_size = log.stat().st_size
    saved = json.loads(ckpt.read_text())["offset"]
    (work / "fatal").touch()  # written after the last checkpoint: only a scan of the gap can see it
    wait_for(lambda: log.stat().st_size - saved >= GAP, 120, "the gap to grow past 512 MB", interval=0.2)
    t_adopt = time.monotonic()
    with running_worker(env, "n1", "--gpus", "0"):
        adopted = wait_for(lambda: [e for e in store.events.read(exp_id) if e["type"] == "adopted"], 60, "the adoption")
        resumed = wait_for(lambda: [e for e in store.events.read(exp_id) if e["type"] == "scan_resumed"], 30,
                           "the scan to resume from the checkpoint")
        time.sleep(2)  # the writer goes on a little while the adopter reads the gap
        (work / "stop").touch()
        failing = wait_for(lambda: [e for e in store.events.read(exp_id) if e.get("type") == "transition"
                                    and e.get("to") == "failing"], 240, "the fatal line in the gap to be seen")
        store.runs.request_cancel(exp_id)
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "finished")
    rate = float((work / "rate").read_text())
    events = store.events.read(exp_id)
    with log.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        fatal_at = m.find(FATAL.encode())
        size = m.size()
    gaps = [e for e in events if e["type"] == "unscanned"]
    print(f"writer {rate / 1e6:.1f} MB/s; killed at log {killed_size / 1e6:.0f} MB, checkpoint at {saved / 1e6:.0f} MB "
          f"(the log ahead of it by {(killed_size - saved) / 1e6:.0f} MB); adopter resumed at "
          f"{resumed[0]['offset'] / 1e6:.0f} MB of {resumed[0]['log_bytes'] / 1e6:.0f} MB; fatal line at "
          f"{fatal_at / 1e6:.0f} MB; failing {failing[0]['at'] - adopted[0]['at']:.1f}s after the adoption "
          f"({time.monotonic() - t_adopt:.0f}s with the stop); log {size / 1e6:.0f} MB; unscanned after the "
          f"verdict: {[(g['start'], g['end']) for g in gaps]}")
    assert rate >= 40e6, "the writer did not reach ~50 MB/s: the test proves less than it says"
    assert resumed[0]["offset"] == saved and resumed[0]["log_bytes"] - saved >= GAP
    assert fatal_at > saved  # in the gap after the checkpoint (the old adopter jumped over all of it)
    assert failing[0].get("signature") == "host_oom" and failing[0].get("rule") == "diagnosis", failing[0]
    # The run was stopped on the verdict with the rest of the log unread: named, never silent — in the
    # events and in the report, and never a range before the verdict's line.
    attempt = json.loads((work / "results/results.json").read_text())["attempts"][0]
    named = attempt.get("unscanned", [])
    assert [(g["start"], g["end"], g["reason"]) for g in gaps] == [(r["start"], r["end"], r["reason"]) for r in named]
    assert all(r["start"] > fatal_at and r["reason"] for r in named)
    report = (work / "results/experiment_report.md").read_text()
    assert all(f"bytes {r['start']}–{r['end']}" in report for r in named)
