"""Evaluations as the report reads them: one normalised row per step and dataset, baselines, deltas.

Metric keys are normalised by the results parser's own `normalize_key` (statemachine/logs/results.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ajet_runner.statemachine.logs.results import normalize_key
from ajet_runner.store.records import plain
from ajet_runner.workers.report.markdown import finite, number
from ajet_runner.workers.report.report_consts import COUNT_METRICS, DELTA_METRICS, RATE_RE


@dataclass
class Eval:
    """One evaluation, normalised: metric keys without `(pass@4)` suffixes, values as floats or None."""

    step: int | None
    dataset: str
    metrics: dict[str, float | None] = field(default_factory=dict)
    attempt: int | None = None  # the attempt that produced it (when the runner could tell)

    def get(self, metric: str) -> float | None:
        return finite(self.metrics.get(metric))


def _as_int(value: Any) -> int | None:
    x = finite(value)
    return int(x) if x is not None else None


def normalize_evaluations(raw: Iterable[Any]) -> list[Eval]:
    """Whatever the driver passed → sorted :class:`Eval` rows (rows that are not dicts are dropped)."""
    out: list[Eval] = []
    for item in raw or []:
        item = plain(item)
        if not isinstance(item, dict):
            continue
        metrics_raw = item.get("metrics")
        if not isinstance(metrics_raw, dict):  # a flat dict: every other numeric key is a metric
            metrics_raw = {k: v for k, v in item.items() if k not in ("step", "dataset", "attempt")}
        metrics: dict[str, float | None] = {}
        for key, value in metrics_raw.items():
            name = normalize_key(str(key))
            if name not in metrics and number(value) is not None:
                metrics[name] = number(value)
        step = _as_int(item.get("step", item.get("global_steps")))
        out.append(Eval(step=step, dataset=str(item.get("dataset") or ""), metrics=metrics,
                        attempt=_as_int(item.get("attempt"))))
    return sorted(out, key=lambda e: (e.step is None, e.step or 0))


def rate_metrics(evals: list[Eval]) -> list[str]:
    """`task_pass_rate@k` names present, by k."""
    names = {m for e in evals for m in e.metrics}
    by_k = sorted((int(hit.group(1)), m) for m in names if (hit := RATE_RE.match(m)))
    return [m for _, m in by_k]


def table_metrics(evals: list[Eval]) -> list[str]:
    present = {m for e in evals for m in e.metrics}
    wanted = ["mean_reward", "std_reward", *rate_metrics(evals), *COUNT_METRICS[:3]]
    chosen = [m for m in wanted if m in present]
    if not chosen:  # only unusual keys (e.g. val-core/...): show a few of them rather than nothing
        chosen = sorted(present)[:4]
    return chosen


def baselines(evals: list[Eval]) -> dict[str, Eval]:
    """Per dataset: its step-0 evaluation, else its first one."""
    base: dict[str, Eval] = {}
    for e in evals:
        current = base.get(e.dataset)
        if current is None or (e.step == 0 and current.step != 0):
            base[e.dataset] = e
    return base


def delta(e: Eval, base: Eval | None, metric: str) -> float | None:
    if base is None:
        return None
    now, then = e.get(metric), base.get(metric)
    return None if now is None or then is None else now - then


def changes_since_baseline(evals: list[Eval]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per dataset and delta metric: baseline value/step → latest value/step and the change."""
    base = baselines(evals)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for dataset, b in base.items():
        last = [e for e in evals if e.dataset == dataset][-1]
        for metric in DELTA_METRICS:
            if metric not in b.metrics and metric not in last.metrics:
                continue
            out.setdefault(dataset, {})[metric] = {
                "from_step": b.step,
                "from": b.get(metric),
                "to_step": last.step,
                "to": last.get(metric),
                "change": delta(last, b, metric),
            }
    return out
