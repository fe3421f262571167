"""The watch loop against its floors, end to end (embedded Redis, a real worker, real tmux).

    python bench/bench_watch.py stop   [runs]   stop → finished while the command writes 50 MB/s
    python bench/bench_watch.py exit   [runs]   command exit → collecting and → finish.flag
    python bench/bench_watch.py adopt  [GB]     worker restart → watching again, with a big log
    python bench/bench_watch.py fatal  [runs]   a CUDA OOM line in a process that hangs → failing
    python bench/bench_watch.py backlog [MB]    a restarted worker catching up a backlog written while it was down
    python bench/bench_watch.py biglog [runs]   stop → finished and the time-limit overshoot on a 40 MB log
                                                without AgentJet's first lines, against the same with them

Floors, measured in the same run: `stop` — the same command in the same tmux wrapper stopped
directly (TmuxRunner.stop, no worker); `exit` — the wrapper's own exit → rc-file time;
`adopt` — the same adoption with a 1 MB log; `fatal` — the signature's settle time from the
catalogue (what the policy itself waits); `biglog` — the same log starting with AgentJet's
`Experiment Name:` and `Training from scratch` lines (the resume facts found at once), run back to
back; `backlog` — the same log read by AttemptWatch.read_log in a loop in the bench's process (the
reader's own speed). BENCH_WRITE_MBPS sets the writer's rate (50);
BENCH_TEARDOWN_SECONDS (0) a pause between the simulated AgentJet's end and the exit, as a real
run's teardown after its final validation (the report's plot is then drawn before the exit).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ajet_runner.service.submit import submit
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from bench._harness import blueprint, cluster, line, wait

PY = sys.executable
RATE = float(os.environ.get("BENCH_WRITE_MBPS", "50"))
TEARDOWN = float(os.environ.get("BENCH_TEARDOWN_SECONDS", "0"))  # `exit`: seconds from the last evaluation to the exit
WRITER = f"""{PY} -c '
import sys, time
line = b"(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns " + b"x" * 40 + b"\\n"
block = line * (1048576 // len(line))
rate, t0, sent, out = {RATE} * 1e6, time.monotonic(), 0, sys.stdout.buffer
while True:
    out.write(block); out.flush(); sent += len(block)
    ahead = sent / rate - (time.monotonic() - t0)
    if ahead > 0: time.sleep(ahead)
'"""


def _mbps(log: Path, seconds: float = 2.0) -> float:
    a = log.stat().st_size
    time.sleep(seconds)
    return (log.stat().st_size - a) / seconds / 1e6


def bench_stop(runs: int) -> None:
    ours, floor, rates = [], [], []
    with cluster() as c:
        c.worker()
        wait(lambda: c.store.nodes.all(), 30, "the worker")
        runner = TmuxRunner(c.sock)
        for i in range(runs):
            # floor: the same command in the same wrapper, stopped directly
            logs = c.work / f"floor{i}"
            h = runner.start(f"ajet_floor_{i}", WRITER, cwd=str(c.work), env={"PYTHONUNBUFFERED": "1"},
                             log_path=logs / "a.log", rc_path=logs / "a.rc", pid_path=logs / "a.pid")
            time.sleep(3)
            t0 = time.monotonic()
            runner.stop(h, 5.0)
            floor.append(time.monotonic() - t0)
            # ours: submitted, watched by the worker, stopped through the cancel flag
            bp = blueprint(c.work / f"run{i}", WRITER)
            exp_id = submit(c.store, bp.read_text(), node="bench")["id"]
            wait(lambda e=exp_id: c.state(e) == "running", 60, "running")
            log = c.work / f"run{i}/results/logs/attempt-1.log"
            wait(log.exists, 10, "the log")
            rates.append(_mbps(log, 1.0))
            time.sleep(2)
            t0 = time.monotonic()
            c.store.runs.request_cancel(exp_id)
            wait(lambda e=exp_id: c.state(e) == "finished", 60, "finished", interval=0.005)
            ours.append(time.monotonic() - t0)
            log.unlink(missing_ok=True)
    print(f"stop under a writer: {runs} runs, target {RATE:.0f} MB/s, measured "
          f"{min(rates):.0f}-{max(rates):.0f} MB/s into the log; default poll interval")
    print(line("stop -> finished", ours, floor))


def measure_exit(runs: int) -> dict[str, list[float]]:
    """Seconds from the command's exit to `collecting` in Redis and to `finish.flag`, and the floor (the
    wrapper's exit -> rc file), per run (bench/bench_issue39.py imports it)."""
    to_collect, to_flag, floor = [], [], []
    with cluster() as c:
        c.worker()
        wait(lambda: c.store.nodes.all(), 30, "the worker")
        for i in range(runs):
            wd = c.work / f"run{i}"
            script = (f"{PY} -m ajet.launcher --conf tests/bench/benchmark_math/benchmark_math.yaml --backbone verl\n"
                      + (f"sleep {TEARDOWN}\n" if TEARDOWN else "")
                      + f"{PY} -c 'import os, sys, time; sys.stdout.write(\"BENCH_EXIT_AT %r\\n\" % time.time()); "
                      "sys.stdout.flush(); os._exit(0)'")
            bp = blueprint(wd, script)
            y = wd / "codebase/tests/bench/benchmark_math/benchmark_math.yaml"
            y.write_text(y.read_text().replace("step_seconds: 1.0", "step_seconds: 0.05")
                         .replace("total_training_steps: 10", "total_training_steps: 2"))
            exp_id = submit(c.store, bp.read_text(), node="bench")["id"]
            wait(lambda e=exp_id: c.state(e) == "finished", 90, "finished")
            results = wd / "results"
            assert json.loads((results / "finish.flag").read_text())["outcome"] == "completed"
            text = (results / "logs/attempt-1.log").read_text()
            exit_at = float(text.rsplit("BENCH_EXIT_AT ", 1)[1].split()[0])
            rc_at = (results / "logs/attempt-1.rc").stat().st_mtime
            collecting = next(e for e in c.store.events.read(exp_id)
                              if e.get("type") == "transition" and e.get("to") == "collecting")
            redis_at = int(collecting["event_id"].split("-")[0]) / 1000  # when Redis stored it
            floor.append(rc_at - exit_at)
            to_collect.append(redis_at - exit_at)
            to_flag.append((results / "finish.flag").stat().st_mtime - exit_at)
    return {"collecting": to_collect, "flag": to_flag, "floor": floor}


def bench_exit(runs: int) -> None:
    got = measure_exit(runs)
    to_collect, to_flag, floor = got["collecting"], got["flag"], got["floor"]
    print(f"exit: {runs} runs of the simulated AgentJet (2 steps, evaluations plotted); default poll interval; "
          + (f"{TEARDOWN:g} s between the last evaluation and the exit (a real run's teardown)" if TEARDOWN
             else "the exit right after the last evaluation"))
    print(line("exit -> collecting (in Redis)", to_collect, floor))
    print(line("exit -> finish.flag", to_flag, floor))


def _adopt_once(c, name: str, size: int) -> tuple[float, float, float]:
    """Start a run whose log reaches `size` bytes, then idles; kill its worker once the log is
    complete and checkpointed, let the lease run out, and time a new worker's start → adopted and
    adopted → a stop honoured. A big log's middle is a sparse hole made with `truncate` (writing
    5 GB through tee takes minutes here); its first and last 32 MiB are real lines."""
    log = c.work / f"{name}/results/logs/attempt-1.log"
    filler = "(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns xxxxxxxxxx"
    real = min(size, 32 << 20)
    script = f"yes '{filler}' | head -c {real}\n"
    if size > 2 * real:
        script += f"truncate -s +{size - 2 * real} {log}\nyes '{filler}' | head -c {real}\n"
    bp = blueprint(c.work / name, script + "exec sleep 600")
    first = c.worker()
    wait(lambda: c.store.nodes.all(), 30, "the worker")
    exp_id = submit(c.store, bp.read_text(), node="bench")["id"]
    wait(lambda: c.state(exp_id) == "running", 60, "running")
    wait(lambda: log.exists() and log.stat().st_size >= size - 4096, 120, "the log to be written", interval=0.1)
    ckpt = log.with_name("attempt-1.scan.json")
    wait(lambda: ckpt.exists() and json.loads(ckpt.read_text())["offset"] >= log.stat().st_size, 120,
         "the watcher to checkpoint at the end", interval=0.1)
    c.kill(first)
    wait(lambda: float((c.store.records.raw(exp_id) or {}).get("lease_until") or 0) < c.store.server_time(), 60,
         "the dead worker's lease to run out", interval=0.05)
    t0 = time.time()
    second = c.worker()
    adopted = wait(lambda: next((e["at"] for e in c.store.events.read(exp_id) if e.get("type") == "adopted"), None),
                   120, "adopted", interval=0.005)
    c.store.runs.request_cancel(exp_id)
    wait(lambda: c.state(exp_id) == "finished", 120, "finished", interval=0.005)
    done = time.time()
    c.kill(second)
    log.unlink(missing_ok=True)
    return adopted - t0, done - adopted, size


def bench_adopt(gigabytes: float) -> None:
    with cluster(AJET_RUNNER_LEASE_SECONDS="3") as c:  # the dead worker's lease runs out quickly
        small = _adopt_once(c, "small", 1 << 20)
        big = _adopt_once(c, "big", int(gigabytes * (1 << 30)))
    print(f"adoption: a run whose log is {big[2] / 2**30:.1f} GiB vs one of 1 MiB; worker killed with SIGKILL; "
          "the new worker starts once the dead one's lease ran out")
    print(line("new worker start -> adopted", [big[0]], [small[0]]))
    print(line("adopted -> stop honoured (finished)", [big[1]], [small[1]]))
    print(line("new worker start -> finished", [big[0] + big[1]], [small[0] + small[1]]))


def bench_fatal(runs: int) -> None:
    from ajet_runner.statemachine.failures.signatures import signature

    oom = Path(__file__).resolve().parent.parent / "tests/corpus/logs/cuda_oom_ray.log"
    settle = signature("cuda_oom").settle_seconds or 0.0
    ours = []
    with cluster() as c:
        c.worker()
        wait(lambda: c.store.nodes.all(), 30, "the worker")
        for i in range(runs):
            script = (f"{PY} -c 'import time; print(\"BENCH_FATAL_AT %r\" % time.time(), flush=True)'\n"
                      f"cat {oom}\nexec sleep 600")
            wd = c.work / f"run{i}"
            exp_id = submit(c.store, blueprint(wd, script).read_text(), node="bench")["id"]
            failing = wait(lambda e=exp_id: next((x for x in c.store.events.read(e) if x.get("type") == "transition"
                                                  and x.get("to") == "failing"), None), 120, "failing")
            text = (wd / "results/logs/attempt-1.log").read_text()
            at = float(text.split("BENCH_FATAL_AT ", 1)[1].split()[0])
            ours.append(int(failing["event_id"].split("-")[0]) / 1000 - at)
            c.store.runs.request_cancel(exp_id)
            wait(lambda e=exp_id: c.state(e) == "finished", 120, "finished")
    print(f"fatal line in a live, hanging process: {runs} runs (cuda_oom, catalogue settle {settle:.0f} s)")
    print(line("fatal line -> failing (in Redis)", ours, [settle], unit="s", scale=1.0))


def bench_backlog(megabytes: int) -> None:
    """MB/s of a new worker's catch-up on a backlog written while no worker watched (from the adoption to
    the `scan_caught_up` event), next to the reader's own speed on the same file, measured right after."""
    filler = "(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns xxxxxxxxxx"
    size = megabytes * 1_000_000
    with cluster(AJET_RUNNER_LEASE_SECONDS="3") as c:
        first = c.worker()
        wait(lambda: c.store.nodes.all(), 60, "the worker")
        bp = blueprint(c.work / "b", f"sleep 5\nyes '{filler}' | head -c {size}\nexec sleep 600")
        exp_id = submit(c.store, bp.read_text(), node="bench")["id"]
        log = c.work / "b/results/logs/attempt-1.log"
        wait(lambda: c.state(exp_id) == "running", 60, "running", 0.05)
        c.kill(first)
        wait(lambda: log.exists() and log.stat().st_size >= size, 120, "the backlog written", 0.05)
        c.worker()
        caught = wait(lambda: next((e for e in c.store.events.read(exp_id) if e.get("type") == "scan_caught_up"), None),
                      1200, "the catch-up", 0.2)
        ours = float(caught["seconds"])
        load = os.getloadavg()[0]
        c.store.runs.request_cancel(exp_id)
        wait(lambda: c.state(exp_id) == "finished", 120, "finished")
        from ajet_runner.workers.executors.handle import RunHandle
        from ajet_runner.workers.watching.watch import AttemptWatch

        h = RunHandle(session="s", log_path=log, rc_path=log.with_suffix(".rc"), pid_path=log.with_suffix(".pid"),
                      wrapper_path=log.with_suffix(".sh"), started_at=time.time())
        watch = AttemptWatch(h, None)
        t0 = time.monotonic()
        watch.read_log(time.time())
        while watch.behind:
            watch.read_log(time.time())
        floor = time.monotonic() - t0
        watch.close()
        log.unlink(missing_ok=True)
    print(f"backlog of {megabytes} MB written while no worker watched; a new worker adopts and scans it "
          f"(bytes {caught['from']}-{caught['to']}); load average {load:.1f}; floor = the reader alone, same file")
    print(line("backlog catch-up", [ours], [floor], unit="s", scale=1.0)
          + f" | {megabytes / ours:.1f} MB/s vs {megabytes / floor:.1f} MB/s")


BIGLOG_MB = float(os.environ.get("BENCH_BIGLOG_MB", "40"))
AGENTJET_HEAD = "printf 'Experiment Name: bench_biglog_20260101_0000\\nTraining from scratch\\n'\n"


def _biglog_script(with_head: bool, mb: float = BIGLOG_MB) -> str:
    """A log of `mb` MB of rollout lines (with or without AgentJet's first lines), then idle."""
    filler = "(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns xxxxxxxxxx"
    return ((AGENTJET_HEAD if with_head else "") + f"yes '{filler}' | head -c {int(mb * 1e6)}\n"
            + "exec sleep 600")


def _caught_up(log: Path, mb: float = BIGLOG_MB) -> bool:
    ckpt = log.with_name("attempt-1.scan.json")
    try:
        return json.loads(ckpt.read_text())["offset"] >= log.stat().st_size >= mb * 1e6 - 4096
    except (OSError, ValueError, KeyError):
        return False


def _biglog_stop(c, name: str, with_head: bool, mb: float = BIGLOG_MB) -> float:
    """Seconds from the stop request to `finished`, once the watch has read the whole log."""
    bp = blueprint(c.work / name, _biglog_script(with_head, mb))
    exp_id = submit(c.store, bp.read_text(), node="bench")["id"]
    log = c.work / f"{name}/results/logs/attempt-1.log"
    wait(lambda: _caught_up(log, mb), 180, "the log written and scanned", interval=0.05)
    t0 = time.monotonic()
    c.store.runs.request_cancel(exp_id)
    wait(lambda: c.state(exp_id) == "finished", 120, "finished", interval=0.005)
    took = time.monotonic() - t0
    log.unlink(missing_ok=True)
    return took


def _biglog_overshoot(c, name: str, with_head: bool, limit: int, mb: float = BIGLOG_MB) -> float:
    """Seconds from the time limit (the record's start + the blueprint's max time) to `finished`."""
    bp = blueprint(c.work / name, _biglog_script(with_head, mb), max_time=f"{limit} seconds")
    exp_id = submit(c.store, bp.read_text(), node="bench")["id"]
    wait(lambda: c.state(exp_id) == "finished", limit + 180, "finished", interval=0.005)
    done = time.time()
    rec = c.store.records.raw(exp_id) or {}
    assert rec.get("outcome") == "timed_out", rec.get("outcome")
    (c.work / f"{name}/results/logs/attempt-1.log").unlink(missing_ok=True)
    return done - (float(rec["started_at"]) + limit)


def measure_biglog(runs: int, limit: int, mb: float = BIGLOG_MB) -> dict[str, list[float]]:
    """Stop -> finished and the time-limit overshoot (seconds) on an `mb` MB log without AgentJet's first lines
    and with them (the floor), `runs` of each, alternating (bench/bench_issue39.py imports it)."""
    stop_with, stop_without, over_with, over_without = [], [], [], []
    with cluster() as c:
        c.worker()
        wait(lambda: c.store.nodes.all(), 60, "the worker")
        for i in range(runs):  # back to back, alternating, so the machine's load falls on both alike
            stop_with.append(_biglog_stop(c, f"sw{i}", True, mb))
            stop_without.append(_biglog_stop(c, f"so{i}", False, mb))
            over_with.append(_biglog_overshoot(c, f"tw{i}", True, limit, mb))
            over_without.append(_biglog_overshoot(c, f"to{i}", False, limit, mb))
    return {"stop_with": stop_with, "stop_without": stop_without, "over_with": over_with,
            "over_without": over_without}


def bench_biglog(runs: int) -> None:
    limit = int(os.environ.get("BENCH_TIME_LIMIT", "20"))
    got = measure_biglog(runs, limit)
    stop_with, stop_without, over_with, over_without = (got[k] for k in ("stop_with", "stop_without", "over_with",
                                                                         "over_without"))
    print(f"a {BIGLOG_MB:g} MB log, idle once written (scanned to its end before acting): {runs} runs each, "
          f"alternating; time limit {limit} s; load average {os.getloadavg()[0]:.1f}; floor = the same log "
          "starting with AgentJet's `Experiment Name:` line")
    print(line("stop -> finished, no AgentJet lines", stop_without, stop_with))
    print(line("time-limit overshoot, no AgentJet", over_without, over_with, unit="s", scale=1.0))
    print(f"time-limit overshoot p95: without {max(over_without):.2f} s, with {max(over_with):.2f} s")


def main(argv: list[str]) -> None:
    what = argv[1] if len(argv) > 1 else "stop"
    arg = argv[2] if len(argv) > 2 else None
    if what == "stop":
        bench_stop(int(arg or 6))
    elif what == "exit":
        bench_exit(int(arg or 8))
    elif what == "fatal":
        bench_fatal(int(arg or 5))
    elif what == "backlog":
        bench_backlog(int(arg or 200))
    elif what == "biglog":
        bench_biglog(int(arg or 3))
    elif what == "adopt":
        bench_adopt(float(arg or 5))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
