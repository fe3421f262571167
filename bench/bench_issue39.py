"""Issue 39's "Done when", side by side in one run: every figure next to its floor (measured in the same run) and
its target, with the load average at the start and the end of each part and of the whole.

Run: .venv/bin/python bench/bench_issue39.py [--toy] [--only stop,exit,stage,metrics,up,adoption]

The measuring is the other bench scripts' own (imported, not copied), at the issue's sizes:
  - stop -> `finished` on a 40 MB log without AgentJet's first lines, against the same log with them (the floor),
    and the time-limit overshoot of both (bench_watch.measure_biglog; a 20 s limit);
  - exit -> `finish.flag` (p95), against the wrapper's exit -> rc file (bench_watch.measure_exit);
  - a 200-run stage: `compare --stage` as a CLI process into a fresh dir and again into the same dir (the plot,
    drawn from the same comparison, kept: as after the outbox wrote the stage's report) against
    `ajet-runner --version`, the console's stage page against GET /healthz (bench_stage.measure_stage; the API's
    comparison beside them);
  - `/metrics` with 10,000 live + 5,000 queued against 10,000 live + 0 queued, scraped alternately
    (bench_metrics.fill and .interleaved);
  - `ajet-runner up` -> /healthz and the console page answer, against a bare uvicorn app (bench_up);
  - `kill -9` of a worker mid-run, a new one started at once -> the run adopted, against the first worker's start
    -> its first heartbeat (bench_adoption.one_run).
`make test`'s wall time (the issue's last figure) is printed by every `make test` run, not here.

`--toy` runs every part at a toy size (a 1 MB log, a 3 s limit, 8 runs in the stage, 300 records), for
`make bench-smoke` (tests/integration/test_bench_smoke.py): it checks that the script runs to its table, not the
figures. The bench and the processes it starts run at nice 10 (bench/_harness.py): on a shared machine, read the
ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: `bench` importable

from bench._harness import pct  # after the path; nice 10 from here on


@dataclass
class Figure:
    name: str
    ours: list[float]  # seconds
    floor: list[float]
    floor_name: str
    target: str
    met: bool | None  # None: no verdict (a figure shown for context)
    load: tuple[float, float]  # load average at the part's start and end


@dataclass
class Sizes:
    log_mb: float
    limit: int
    biglog_runs: int
    exit_runs: int
    stage_runs: int
    stage_evals: int
    stage_samples: int
    live: int
    queued: int
    scrapes: int
    up_runs: int
    adoption_runs: int


FULL = Sizes(log_mb=40, limit=20, biglog_runs=2, exit_runs=8, stage_runs=200, stage_evals=41, stage_samples=3,
             live=10_000, queued=5_000, scrapes=10, up_runs=3, adoption_runs=3)
TOY = Sizes(log_mb=1, limit=3, biglog_runs=1, exit_runs=1, stage_runs=8, stage_evals=5, stage_samples=1,
            live=200, queued=100, scrapes=2, up_runs=1, adoption_runs=1)


def _load() -> float:
    return os.getloadavg()[0]


def _ratio(ours: list[float], floor: list[float]) -> float:
    fm = statistics.median(floor)
    return statistics.median(ours) / fm if fm > 0 else float("inf")


def part_stop(z: Sizes, load0: float) -> list[Figure]:
    from bench.bench_watch import measure_biglog

    got = measure_biglog(z.biglog_runs, z.limit, z.log_mb)
    load = (load0, _load())
    ratio = _ratio(got["stop_without"], got["stop_with"])
    return [
        Figure(f"stop -> finished, {z.log_mb:g} MB log without AgentJet's lines ({ratio:.2f}x the floor)",
               got["stop_without"], got["stop_with"], "the same log with them", "<= 1.3x the floor", ratio <= 1.3,
               load),
        Figure(f"time-limit overshoot, without AgentJet's lines ({z.limit} s limit; p95)", got["over_without"],
               got["over_with"], "the same with them", "p95 <= 2 s", pct(got["over_without"], 0.95) <= 2.0, load),
    ]


def part_exit(z: Sizes, load0: float) -> list[Figure]:
    from bench.bench_watch import measure_exit

    got = measure_exit(z.exit_runs)
    load = (load0, _load())
    return [
        Figure("exit -> finish.flag (p95)", got["flag"], got["floor"], "the wrapper's exit -> rc file",
               "p95 <= 300 ms", pct(got["flag"], 0.95) <= 0.3, load),
        Figure("exit -> collecting, in Redis", got["collecting"], got["floor"], "the wrapper's exit -> rc file", "-",
               None, load),
    ]


def part_stage(z: Sizes, load0: float) -> list[Figure]:
    from ajet_runner.service.embedded import EmbeddedRedis
    from ajet_runner.store.store import Store
    from bench.bench_api import serving_api
    from bench.bench_stage import measure_stage

    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory(prefix="ajet-bench39-stage-") as tmp, \
            serving_api(redis.url) as url:
        got = measure_stage(url, Store.from_url(redis.url), Path(tmp), z.stage_runs, z.stage_samples, z.stage_evals)
    load = (load0, _load())
    runs = f"{z.stage_runs}-run stage"
    return [
        Figure(f"compare --stage, a {runs} (CLI process)", got["cli"], got["cli_floor"], "ajet-runner --version",
               "<= 2 s", statistics.median(got["cli"]) <= 2.0, load),
        Figure(f"compare --stage again, a {runs}: the plot kept", got["cli_kept"], got["cli_floor"],
               "ajet-runner --version", "<= 2 s", statistics.median(got["cli_kept"]) <= 2.0, load),
        Figure(f"console stage page, a {runs}", got["page"], got["http_floor"], "GET /healthz", "<= 2 s",
               statistics.median(got["page"]) <= 2.0, load),
        Figure(f"API stage comparison, a {runs}", got["api"], got["http_floor"], "GET /healthz", "<= 2 s",
               statistics.median(got["api"]) <= 2.0, load),
    ]


def part_metrics(z: Sizes, load0: float) -> list[Figure]:
    import redis

    from ajet_runner.service.embedded import EmbeddedRedis
    from bench.bench_metrics import fill, interleaved

    with EmbeddedRedis() as none, EmbeddedRedis() as queued:
        fill(redis.Redis.from_url(none.url), z.live, z.live, 0, 0)
        fill(redis.Redis.from_url(queued.url), z.live + z.queued, z.live + z.queued, 0, z.queued)
        plain, with_queue = interleaved(none.url, queued.url, z.scrapes)
    load = (load0, _load())
    ours, floor = [ms / 1000 for ms in with_queue], [ms / 1000 for ms in plain]
    ratio = _ratio(ours, floor)
    return [Figure(f"/metrics, {z.live:,} live + {z.queued:,} queued, warm ({ratio:.2f}x the floor)", ours, floor,
                   f"{z.live:,} live + 0 queued", "<= 1.5x the floor", ratio <= 1.5, load)]


def part_up(z: Sizes, load0: float) -> list[Figure]:
    from bench.bench_up import one_floor, one_up

    health, page, floor = [], [], []
    for _ in range(z.up_runs):
        with tempfile.TemporaryDirectory(prefix="ajet-bench39-up-") as tmp:
            h, p, _joined = one_up(Path(tmp) / "up")
        health.append(h)
        page.append(p)
        floor.append(one_floor())
    load = (load0, _load())
    return [
        Figure("up -> /healthz answers", health, floor, "a bare uvicorn app", "<= 3 s",
               statistics.median(health) <= 3.0, load),
        Figure("up -> console page answers", page, floor, "a bare uvicorn app", "<= 3 s",
               statistics.median(page) <= 3.0, load),
    ]


def part_adoption(z: Sizes, load0: float) -> list[Figure]:
    from bench.bench_adoption import one_run
    from bench.bench_stage import timed

    rows = []
    for _ in range(z.adoption_runs):
        with tempfile.TemporaryDirectory(prefix="ajet-bench39-adopt-") as tmp:
            rows.append(one_run(Path(tmp), 30.0))
    cli = [sys.executable, "-m", "ajet_runner", "--version"]
    floor = timed(lambda: subprocess.run(cli, capture_output=True, check=True), 3)
    load = (load0, _load())
    heartbeat, adopted = [r[0] for r in rows], [r[2] for r in rows]
    return [
        Figure("kill -9 of a worker -> run adopted by a new one", adopted, heartbeat,
               "a worker's start -> first heartbeat", "<= 2 s quiet", statistics.median(adopted) <= 2.0, load),
        Figure("worker start -> first heartbeat", heartbeat, floor, "ajet-runner --version", "<= 1 s quiet",
               statistics.median(heartbeat) <= 1.0, load),
    ]


PARTS: dict[str, Callable[[Sizes, float], list[Figure]]] = {
    "stop": part_stop, "exit": part_exit, "stage": part_stage, "metrics": part_metrics, "up": part_up,
    "adoption": part_adoption,
}


def _seconds(xs: list[float]) -> str:
    med, p95 = statistics.median(xs), pct(xs, 0.95)
    if p95 < 1.0:
        return f"{med * 1000:7.0f} / {p95 * 1000:7.0f} ms"
    return f"{med:7.2f} / {p95:7.2f} s "


def table(figures: list[Figure]) -> list[str]:
    out = [f"{'figure':<72} {'ours: median / p95':>22}   {'floor: median / p95':>22}  {'target':<18} {'met':<5} "
           "load start -> end (floor: what)"]
    for f in figures:
        met = "-" if f.met is None else "yes" if f.met else "NO"
        out.append(f"{f.name:<72} {_seconds(f.ours):>22}   {_seconds(f.floor):>22}  {f.target:<18} {met:<5} "
                   f"{f.load[0]:.1f} -> {f.load[1]:.1f} (floor: {f.floor_name}; n={len(f.ours)})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--toy", action="store_true", help="every part at a toy size (make bench-smoke)")
    parser.add_argument("--only", default=",".join(PARTS), help="the parts to run, comma-separated")
    args = parser.parse_args()
    sizes = TOY if args.toy else FULL
    wanted = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; expected some of {', '.join(PARTS)}")
    start, t0 = _load(), time.monotonic()
    print(f"issue 39, {'toy size' if args.toy else 'full size'}: {time.strftime('%Y-%m-%d %H:%M %Z')}, "
          f"{os.cpu_count()} cores, load average at start {start:.2f} (1 min; {os.getloadavg()[1]:.2f} over 5 min)",
          flush=True)
    figures: list[Figure] = []
    failed = []
    for name in wanted:
        load0 = _load()
        try:
            got = PARTS[name](sizes, load0)
        except Exception:  # noqa: BLE001 - one part's failure is reported; the others still run
            traceback.print_exc()
            failed.append(name)
            continue
        figures += got
        for text in table(got)[1:]:
            print(f"  [{name}] {text}", flush=True)
    print()
    print("\n".join(table(figures)))
    end = _load()
    print(f"load average at start {start:.2f}, at end {end:.2f} (1 min; {os.getloadavg()[1]:.2f} over 5 min); "
          f"{time.monotonic() - t0:.0f} s in all" + (f"; FAILED parts: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
