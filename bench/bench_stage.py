"""A stage of N finished runs, as a research lead's grid makes it: `compare --stage`, the API's comparison and
the console's stage page, through a real `ajet-runner serve` on a private Redis.

Run: .venv/bin/python bench/bench_stage.py [--sizes 50,200,800] [--samples 5] [--evals 41]

Each run has a result dir with a `results.json` (41 evaluations of mean_reward and task_pass_rate@1/2/4 over
40 steps by default) and the YAML it was given (`config.original.yaml`, the simulated AgentJet's 70-line YAML
with its sweep values), and a finished record in the stage: what a 5 lr x 4 temperature x 10 seed sweep leaves
(at 200; other sizes scale the seeds). Times, median and p95 of `--samples`:
  - `compare --stage`: the CLI process end to end (its facts over HTTP, results.json read again locally, the
    comparison, stage_report.md, stage_results.json and stage_plot.png written) into a fresh dir, next to
    `ajet-runner --version` (the floor: a CLI process that does nothing); then again into the same dir, where the
    plot drawn from the same comparison is kept (as when the outbox wrote the stage's report when it finished);
  - GET /v1/stages/{name}/comparison and GET /ui/stages/{name}, next to GET /healthz (the floor).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: `bench` importable

from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.store import Store
from bench.bench_api import TOKEN, serving_api

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "examples/agentjet_sim/tests/bench/benchmark_math/benchmark_math.yaml"
CLI = [sys.executable, "-m", "ajet_runner"]
LRS = ["1e-6", "2e-6", "5e-6", "1e-5", "2e-5"]
TEMPS = [0.6, 0.8, 1.0, 1.2]


def grid(size: int) -> list[dict[str, object]]:
    seeds = max(1, size // (len(LRS) * len(TEMPS)))
    cells = [{"ajet.trainer_common.lr": lr, "ajet.rollout.temperature": t, "ajet_sim.seed": s}
             for lr in LRS for t in TEMPS for s in range(1, seeds + 1)]
    return cells[:size]


def plant(store: Store, root: Path, stage: str, size: int, evals: int, cells: list[dict[str, object]] | None = None,
          purpose: str = "比较学习率与温度") -> list[str]:
    """`size` finished runs of one stage (the grid's first `size` cells, or `cells`): records in Redis,
    results.json and config.original.yaml on disk. Runs that differ only in their seed have curves that
    differ by a little noise; the level rises with lr and temperature."""
    base = yaml.safe_load(YAML.read_text())
    rng = random.Random(7)
    ids = []
    for n, values in enumerate(cells or grid(size)):
        exp_id = f"{zlib.crc32(stage.encode()) & 0xffff:04x}{n:08x}"
        label = ", ".join(f"{k}={v}" for k, v in values.items())
        result_dir = root / stage / label.replace(", ", ",")
        result_dir.mkdir(parents=True)
        (result_dir / "config.original.yaml").write_text(yaml.safe_dump(base))
        level = 0.4 + 0.05 * LRS.index(str(values["ajet.trainer_common.lr"])) + 0.02 * TEMPS.index(
            float(values.get("ajet.rollout.temperature", TEMPS[0])))  # type: ignore[arg-type]
        curve = [{"step": s, "dataset": "gsm8k", "metrics": {
            "mean_reward": round(level * (1 - 0.6 * 0.9 ** s) + rng.gauss(0, 0.01), 4),
            **{f"task_pass_rate@{k}": round(min(1.0, level * (1 + 0.1 * k) * (1 - 0.5 * 0.9 ** s)), 4)
               for k in (1, 2, 4)}, "num_all_success_tasks": 100 + s}} for s in range(evals)]
        doc = {"report_version": 1, "id": exp_id, "purpose": f"[{label}] {purpose}", "outcome": "completed",
               "reason": "the run completed", "attempt_count": 1, "repair_count": 0, "repairs": [],
               "elapsed_seconds": 3600.0, "train_steps": evals - 1, "evaluations": curve, "sweep": values,
               "result_dir": str(result_dir), "launch_command": "python -m ajet.launcher --conf x.yaml"}
        (result_dir / "results.json").write_text(__import__("json").dumps(doc))
        (result_dir / "experiment_report.md").write_text("# report\n")
        rec = store.records.create(exp_id, {"state": "queued", "lifecycle": Lifecycle.initial_dict(exp_id),
                                            "result_dir": str(result_dir), "purpose": doc["purpose"], "stage": stage,
                                            "blueprint_json": {"exp_sweep_values": values}},
                           {"message": "submitted"}, result_dir_key=str(result_dir))
        store.records.transition(exp_id, expected_version=int(rec["version"]), fields={
            "state": "finished", "outcome": "completed", "started_at": time.time() - 3600,
            "finished_at": time.time()}, event={"type": "transition", "to": "finished"})
        ids.append(exp_id)
    return ids


def timed(fn: object, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def row(label: str, xs: list[float], floor: list[float]) -> str:
    from bench._harness import pct  # here, not at import: it renices the process (tests import plant())

    return (f"{label:<30} median {statistics.median(xs) * 1000:8.0f} ms  p95 {pct(xs, 0.95) * 1000:8.0f} ms | floor "
            f"median {statistics.median(floor) * 1000:6.0f} ms")


def measure_stage(url: str, store: Store, root: Path, size: int, samples: int, evals: int) -> dict[str, list[float]]:
    """Seconds of `compare --stage` (a CLI process), GET /v1/stages/N/comparison and GET /ui/stages/N on a
    planted stage of `size` runs, `samples` each, against the server at `url` (bench/bench_issue39.py imports
    it)."""
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300)
    ui = httpx.Client(base_url=url, timeout=300)
    ui.post("/ui/login", data={"token": TOKEN})
    cli_env = {**os.environ, "AJET_RUNNER_URL": url, "AJET_RUNNER_TOKEN": TOKEN}
    stage = f"grid{size}"
    plant(store, root, stage, size, evals)
    outs = iter(range(1_000_000))
    out = root / f"out{size}"

    def cli(fresh: bool = True) -> None:
        nonlocal out
        if fresh:  # a dir without a stage report: everything drawn
            out = root / f"out{size}-{next(outs)}"
        done = subprocess.run([*CLI, "compare", "--stage", stage, "-o", str(out)], env=cli_env,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr

    def api() -> None:
        assert http.get(f"/v1/stages/{stage}/comparison").status_code == 200

    def page() -> None:
        got = ui.get(f"/ui/stages/{stage}")
        assert got.status_code == 200 and "stage-table" in got.text, got.status_code

    return {"cli": timed(cli, samples), "cli_kept": timed(lambda: cli(fresh=False), samples),
            "api": timed(api, samples), "page": timed(page, samples),
            "cli_floor": timed(lambda: subprocess.run([*CLI, "--version"], capture_output=True, check=True), 3),
            "http_floor": timed(lambda: http.get("/healthz"), 20),
            "plot_kb": [os.path.getsize(out / "stage_plot.png") / 1024],
            "page_kb": [len(ui.get(f"/ui/stages/{stage}").content) / 1024]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="50,200,800")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--evals", type=int, default=41)
    args = ap.parse_args()
    import bench._harness  # noqa: F401 - nice 10 for the bench and the server it starts (the machine is shared)

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    with EmbeddedRedis() as redis, tempfile.TemporaryDirectory(prefix="ajet-bench-stage-") as tmp:
        store = Store.from_url(redis.url)
        with serving_api(redis.url) as url:
            for size in [int(s) for s in args.sizes.split(",")]:
                got = measure_stage(url, store, Path(tmp), size, args.samples, args.evals)
                print(f"-- {size} runs x {args.evals} evaluations")
                print(row("compare --stage (CLI process)", got["cli"], got["cli_floor"]))
                print(row("  again: its plot kept", got["cli_kept"], got["cli_floor"]))
                print(row("GET /v1/stages/N/comparison", got["api"], got["http_floor"]))
                print(row("GET /ui/stages/N", got["page"], got["http_floor"]))
                print(f"   stage_plot.png {got['plot_kb'][0]:.0f} KB, stage page {got['page_kb'][0]:.0f} KB")


if __name__ == "__main__":
    main()
