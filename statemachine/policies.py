"""Timing policies as pure functions of numbers: no clocks are read here, callers pass `now`."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ajet_runner.statemachine.metric_vocabulary import PLATEAU_METRICS
from ajet_runner.statemachine.models import Evaluation

DEFAULT_BACKOFF = (30.0, 60.0, 120.0, 240.0, 480.0, 960.0)


def parse_backoff(text: str) -> tuple[float, ...]:
    """`"30,60,120"` → (30.0, 60.0, 120.0); raises ValueError naming the bad item."""
    items = [p.strip() for p in text.split(",") if p.strip()]
    values = []
    for item in items:
        value = float(item)
        if not value > 0:
            raise ValueError(f"backoff interval must be > 0, got {item!r}")
        values.append(value)
    if not values:
        raise ValueError("backoff schedule is empty")
    return tuple(values)


def report_due_at(reports_sent: int, schedule: Sequence[float] = DEFAULT_BACKOFF) -> float:
    """Seconds after the start at which progress report number `reports_sent` (0-based) is due.

    A person watching a run looked at the screen after 30 s, then 1, 2, 4, 8, 16 min, and every
    16 min after that (docs/background.md#manual-workflow); the worker keeps that cadence for
    reports, not for watching.
    """
    if reports_sent < len(schedule):
        return float(sum(schedule[: reports_sent + 1]))
    return float(sum(schedule)) + (reports_sent - len(schedule) + 1) * float(schedule[-1])


def time_limit_phase(elapsed: float, max_seconds: float | None, grace: float) -> str:
    """"ok" before the limit, "stop" once it is reached, "kill" when the graceful stop overran."""
    if max_seconds is None or max_seconds <= 0:
        return "ok"
    if elapsed < max_seconds:
        return "ok"
    return "kill" if elapsed >= max_seconds + grace else "stop"


def stalled(now: float, last_output_at: float, last_eval_at: float | None, stall_seconds: float) -> bool:
    """No new output and no new evaluation for `stall_seconds`."""
    if stall_seconds <= 0:
        return False
    newest = max(last_output_at, last_eval_at or 0.0)
    return now - newest >= stall_seconds


def _judging(elapsed: float, max_seconds: float | None, after_fraction: float) -> bool:
    """Past `after_fraction` of a positive time limit (no limit: never)."""
    return not (not max_seconds or max_seconds <= 0 or elapsed < after_fraction * max_seconds)


def plateaued(
    evaluations: Sequence[Evaluation],
    *,
    elapsed: float,
    max_seconds: float | None,
    after_fraction: float = 0.5,
    window: int = 4,
    epsilon: float = 0.005,
    metrics: Sequence[str] = PLATEAU_METRICS,
) -> bool:
    """True when the run is past `after_fraction` of its time and the last `window` evaluations
    moved every watched metric by less than `epsilon` (max - min), like Ray Tune's plateau stopper.

    A metric absent from every evaluation in the window does not count; if none is present the
    answer is False (nothing to judge).
    """
    if not _judging(elapsed, max_seconds, after_fraction) or window < 2 or len(evaluations) < window:
        return False
    recent = evaluations[-window:]
    judged = False
    for name in metrics:
        values = [e.metrics[name] for e in recent if name in e.metrics and math.isfinite(e.metrics[name])]
        if len(values) < window:
            continue
        judged = True
        if max(values) - min(values) >= epsilon:
            return False
    return judged
