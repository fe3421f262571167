"""Evaluations as the report reads them: one normalised row per step and dataset, baselines, deltas.

Metric keys are normalised by the results parser's own `normalize_key` (statemachine/logs/results.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ajet_runner.statemachine.logs.results import normalize_key
from ajet_runner.statemachine.metric_vocabulary import TABLE_FIRST, rates_by_k
from ajet_runner.statemachine.models import Evaluation
from ajet_runner.store.records import plain
from ajet_runner.workers.report.report_consts import COUNT_METRICS, DELTA_METRICS

Eval = Evaluation  # the name the report code has always used: the one evaluation type (statemachine/models.py)


def normalize_evaluations(raw: Iterable[Any]) -> list[Evaluation]:
    """Whatever the driver passed (the stored form, or evaluations themselves) → evaluations sorted by step, metric
    keys without `(pass@4)` suffixes; items that are no mapping, or name no step, are dropped."""
    items = (item.to_json() if isinstance(item, Evaluation) else plain(item) for item in raw or [])
    out = [e for item in items if (e := Evaluation.from_json(item, normalize_key)) is not None]
    return sorted(out, key=lambda e: e.step)


def rate_metrics(evals: list[Eval]) -> list[str]:
    """`task_pass_rate@k` names present, by k."""
    names = {m for e in evals for m in e.metrics}
    return rates_by_k(names)


def table_metrics(evals: list[Eval]) -> list[str]:
    present = {m for e in evals for m in e.metrics}
    wanted = [*TABLE_FIRST, *rate_metrics(evals), *COUNT_METRICS[:3]]
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
