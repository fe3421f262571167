"""What reading and writing events through their models (store/events.py) costs, per event.

Run: .venv/bin/python bench/bench_events.py [--events 10000]
`checked` is what every EventLog.publish/Records.transition adds before its Redis call; `parse_event(...).to_dict()` is
what a reader (the client, the CLI, the console) pays per event it types. Prints microseconds per event.
"""

from __future__ import annotations

import argparse
import time

from ajet_runner.store.events import checked, parse_event

SAMPLES = [
    {"type": "transition", "from": "running", "to": "failing", "trigger": "anomaly", "reason": "fatal log signature",
     "attempt": 2, "at": 1.0, "signature": "cuda_oom"},
    {"type": "evaluation", "step": 120, "dataset": "val", "metrics": {"mean_reward": 0.41, "task_pass_rate@1": 0.3},
     "at": 2.0},
    {"type": "progress", "elapsed": 612.4, "max_seconds": 3600, "metrics": {"mean_reward": 0.4}, "at": 3.0},
    {"type": "warning", "message": "stop left processes behind", "at": 4.0},
]


def per_event(fn, events: list[dict]) -> float:
    start = time.perf_counter()
    for e in events:
        fn(e)
    return (time.perf_counter() - start) / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    events = [dict(SAMPLES[i % len(SAMPLES)], event_id=f"{i}-0") for i in range(args.events)]
    per_event(checked, events[:200])  # warm-up
    print(f"{args.events} events, 4 types mixed")
    print(f"checked (each write)            {per_event(checked, events):7.1f} µs/event")
    print(f"parse_event().to_dict() (read)  {per_event(lambda e: parse_event(e).to_dict(), events):7.1f} µs/event")


if __name__ == "__main__":
    main()
