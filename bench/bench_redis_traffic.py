"""Redis traffic per watched run in steady state: commands/s and bytes/s, by command.

A real worker with K slots watches K runs that each print a line every 0.2 s (a verbose trainer).
Commands (client round trips: a script's inner calls are not counted again) are attributed from
MONITOR: those naming a run's keys (or the node's watch metrics) are per-run; the node's own
traffic (heartbeats, supervisor scans, RQ) is printed beside them. Before the runs, the idle
worker's own commands are counted the same way (by command, and by process: the supervisor and
its watcher).
Target: ≤ 3 commands/s per run; an idle worker ≤ 3 commands/s in all.

    python bench/bench_redis_traffic.py [runs] [seconds]
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from ajet_runner.service.submit import submit
from bench._harness import blueprint, cluster, wait

PY = sys.executable
SCRIPT = f"""{PY} -c '
import time
i = 0
while True:
    i += 1
    print("(TaskRunner pid=1) INFO rollout: task %06d finished with reward 1.0 in 12 turns" % i, flush=True)
    time.sleep(0.2)
'"""


def monitor(url: str, ids: list[str], seconds: float) -> tuple[dict[str, int], int, int, int]:
    """Every command Redis ran for `seconds` (MONITOR): per-run ones are those naming one of the runs
    (its record, events, tail, flags) or the node's watch metrics; the rest is the node's own."""
    import redis

    conn = redis.Redis.from_url(url)
    by_cmd: dict[str, int] = {}
    per_run = other = size = 0
    deadline = time.monotonic() + seconds
    with conn.monitor() as m:
        for cmd in m.listen():
            if time.monotonic() >= deadline:
                break
            text = cmd["command"]
            name = text.split(" ", 1)[0].lower()
            if name in ("monitor", "info") or cmd.get("client_type") == "lua":
                continue  # a script's inner calls are part of its one round trip
            if any(i in text for i in ids) or ":wm:" in text:
                per_run += 1
                size += len(text)
                by_cmd[name] = by_cmd.get(name, 0) + 1
            else:
                other += 1
    return by_cmd, per_run, other, size


def idle_monitor(url: str, seconds: float, procs: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Every command an idle worker sends for `seconds` (MONITOR), by command and by process
    (`procs`: label -> pid; a client's address is matched to its process' sockets)."""
    import redis

    conn = redis.Redis.from_url(url)
    ports: dict[int, str] = {}

    def owner(addr: str) -> str:
        port = int(addr.rpartition(":")[2] or 0)
        if port not in ports:
            for label, pid in procs.items():
                with contextlib.suppress(psutil.Error):
                    if any(c.laddr and c.laddr.port == port for c in psutil.Process(pid).net_connections("tcp")):
                        ports[port] = label
                        break
            else:
                ports[port] = "other"
        return ports[port]

    by_cmd: dict[str, int] = {}
    by_proc: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    with conn.monitor() as m:
        for cmd in m.listen():
            if time.monotonic() >= deadline:
                break
            name = cmd["command"].split(" ", 1)[0].lower()
            if name in ("monitor", "info") or cmd.get("client_type") == "lua":
                continue
            by_cmd[name] = by_cmd.get(name, 0) + 1
            who = owner(str(cmd.get("client_address", "")) + ":" + str(cmd.get("client_port", "")))
            by_proc[who] = by_proc.get(who, 0) + 1
    return by_cmd, by_proc


def watcher_pid(worker_pid: int) -> int:
    for p in psutil.Process(worker_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "node.watcher" in " ".join(p.cmdline()):
                return p.pid
    return 0


def redis_cpu(r, seconds: float) -> float:
    """Redis' own CPU seconds per second over `seconds` (INFO cpu)."""
    def used() -> float:
        info = r.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    a = used()
    time.sleep(seconds)
    return (used() - a) / seconds


def main(argv: list[str]) -> None:
    runs = int(argv[1]) if len(argv) > 1 else 4
    seconds = float(argv[2]) if len(argv) > 2 else 30.0  # two watch-metrics flushes (every 15 s)
    with cluster() as c:
        worker = c.worker(slots=runs)
        wait(lambda: c.store.nodes.all(), 30, "the worker")
        wait(lambda: watcher_pid(worker.pid), 30, "the watcher")
        time.sleep(3)  # the watcher's start (its first heartbeat, queue registration) is over
        idle_cpu = redis_cpu(c.store.r, seconds / 2)
        idle_cmds, idle_procs = idle_monitor(c.url, seconds, {"supervisor": worker.pid,
                                                             "watcher": watcher_pid(worker.pid)})
        ids = []
        for i in range(runs):
            bp = blueprint(c.work / f"run{i}", SCRIPT)
            ids.append(submit(c.store, bp.read_text(), node="bench")["id"])
        wait(lambda: all(c.state(e) == "running" for e in ids), 90, "all running")
        time.sleep(5)  # steady state: launch writes and first flushes are over
        busy_cpu = redis_cpu(c.store.r, seconds / 2)  # without MONITOR, which costs Redis CPU itself
        by_cmd, per_run, other, size = monitor(c.url, ids, seconds)
        for e in ids:
            c.store.runs.request_cancel(e)
        wait(lambda: all(c.state(e) == "finished" for e in ids), 120, "all stopped")
    idle = sum(idle_cmds.values()) / seconds
    print(f"idle worker ({runs} slots, no run), {seconds:.0f} s window: {idle:6.2f} commands/s "
          f"(target ≤ 3/s: ratio {idle / 3:4.2f}); by process: "
          + ", ".join(f"{k} {v / seconds:.2f}" for k, v in sorted(idle_procs.items(), key=lambda kv: -kv[1])))
    print("idle worker, by command (/s): " + ", ".join(
        f"{k} {v / seconds:.2f}" for k, v in sorted(idle_cmds.items(), key=lambda kv: -kv[1])))
    rate = per_run / runs / seconds
    print(f"redis traffic: {runs} runs printing 5 lines/s, {seconds:.0f} s window (MONITOR)")
    print(f"per run: {rate:6.2f} commands/s, {size / runs / seconds / 1000:6.2f} kB/s of arguments sent"
          f"   | node's own (heartbeats, scans, RQ): {other / seconds:6.2f} commands/s"
          f"   | target 3 commands/s per run: ratio {rate / 3:4.2f}")
    cpu = max(0.0, busy_cpu - idle_cpu) / runs
    print(f"Redis CPU per run: {cpu * 100:.3f} % of a core (idle node {idle_cpu * 100:.3f} %); at that rate "
          f"one Redis core would carry ~{1 / cpu if cpu else float('inf'):,.0f} watched runs (an extrapolation)")
    top = sorted(by_cmd.items(), key=lambda kv: -kv[1])
    print("per run, by command (/s): " + ", ".join(f"{k} {v / runs / seconds:.2f}" for k, v in top))


if __name__ == "__main__":
    main(sys.argv)
