"""How fast the console validation parser reads an AgentJet log (`parse_log_lines`), and how
much a LogScanner tailing the same bytes pays for feeding it.

A synthetic log shaped like a console-only run: Ray-prefixed, coloured chatter and progress
bars, a verl step line per step (with `val-core/...` keys every 10th), pprint-wrapped
`Initial/Final validation metrics`. Usage: python bench/bench_logmetrics.py [--mb 50]
"""

from __future__ import annotations

import argparse
import pprint
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ajet_runner.statemachine.failures.diagnose import LogScanner  # noqa: E402
from ajet_runner.statemachine.logs.metrics import LogMetrics, parse_log_lines  # noqa: E402

RAY = "\x1b[36m(TaskRunner pid=40211)\x1b[0m "


def record(which: str, p: float) -> list[str]:
    text = f"{which} validation metrics: " + repr({f"val-core/gsm8k/TGC@{k}": p for k in (1, 2, 4)}
                                                 | {"val-core/gsm8k/reward/mean@4": p, "val-aux/num_tasks": 1319})
    return [RAY + ln for ln in pprint.pformat(text).splitlines()]


def synthetic(mb: float) -> str:
    lines = record("Initial", 0.3)
    step = 0
    size = 0
    while size < mb * 1e6:
        step += 1
        chunk = [f"{RAY}[rollout] step {step}: 32 tasks x 4 repeats submitted to 64 env workers",
                 f"{RAY}step:{step} - actor/kl_loss:0.001 - critic/score/mean:0.5 - response_length/mean:420.0"
                 + (f" - val-core/gsm8k/TGC@1:{step / 1e6:.4f}" if step % 10 == 0 else ""),
                 f"{RAY}Training Progress:  50%|█████     | {step}/1000000 [00:10<00:10,  1.0it/s]"]
        size += sum(len(c) + 1 for c in chunk)
        lines += chunk
    lines += record("Final", 0.8)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50)
    args = parser.parse_args()
    text = synthetic(args.mb)
    mb = len(text.encode()) / 1e6
    t0 = time.perf_counter()
    summary = parse_log_lines(text.splitlines(keepends=True))
    parse = time.perf_counter() - t0
    data = text.encode()
    timings = {}
    for name, metrics in (("scanner alone", None), ("scanner + metrics", LogMetrics())):
        scanner = LogScanner(metrics=metrics)
        t0 = time.perf_counter()
        for i in range(0, len(data), 1 << 20):
            scanner.feed(data[i : i + (1 << 20)])
        scanner.close()
        timings[name] = time.perf_counter() - t0
    print(f"log: {mb:.1f} MB, {len(summary.evaluations)} evaluations")
    print(f"parse_log_lines: {mb / parse:.1f} MB/s")
    for name, seconds in timings.items():
        print(f"{name}: {mb / seconds:.1f} MB/s")


if __name__ == "__main__":
    main()
