"""What a webhook says: `experiment_finished` and `stage_finished` bodies, built from the records.

Metrics come from the record: `final` is the last evaluation (its `latest_metrics`, with its `step`) and
`best` the report's best per metric (`{metric: {"value", "step"}}`), so a receiver needs no disk access.

The free-text fields (`reason`, which quotes the failing log line, and `purpose`) go through the caller's
redactor (statemachine/failures/redact.py: the deliverer's is built from the worker's own secrets): a log line that
printed a Redis URL with its password or `token=...` must not leave the cluster in a notification.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ajet_runner.statemachine.lifecycle import SUCCEEDED
from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC

__all__ = ["LOG_TEXT_FIELDS", "experiment_payload", "stage_payload"]

LOG_TEXT_FIELDS = ("reason", "purpose")  # text that can quote a log or a command line
Redact = Callable[[str], str]


def _keep(text: str) -> str:
    return text


def _text(rec: Mapping[str, Any], name: str, redact: Redact) -> str:
    return redact(str(rec.get(name) or ""))


def _metrics(rec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    final = rec.get("latest_metrics") if isinstance(rec.get("latest_metrics"), dict) else {}
    best = rec.get("best_metrics") if isinstance(rec.get("best_metrics"), dict) else {}
    return dict(final or {}), dict(best or {})


def experiment_payload(rec: Mapping[str, Any], delivery: str, redact: Redact = _keep) -> dict[str, Any]:
    final, best = _metrics(rec)
    bp: Mapping[str, Any] = rec["blueprint_json"] if isinstance(rec.get("blueprint_json"), dict) else {}
    return {
        "type": "experiment_finished", "delivery": delivery, "sent_at": time.time(),
        "id": rec.get("id"), "stage": rec.get("stage") or None, "purpose": _text(rec, "purpose", redact),
        "outcome": rec.get("outcome") or "", "reason": _text(rec, "reason", redact),
        "result_dir": rec.get("result_dir") or "", "node": rec.get("node") or "",
        "finished_at": _float(rec.get("finished_at")), "attempts": int(_float(rec.get("attempt")) or 0),
        "sweep": dict(bp.get("exp_sweep_values") or {}), "final": final, "best": best,
    }


def stage_payload(stage: str, meta: Mapping[str, str], records: Sequence[Mapping[str, Any]], delivery: str,
                  report: str | None, metric: str = HEADLINE_METRIC, redact: Redact = _keep) -> dict[str, Any]:
    members = []
    top: dict[str, Any] | None = None
    for rec in records:
        final, best = _metrics(rec)
        members.append({"id": rec.get("id"), "outcome": rec.get("outcome") or "",
                        "purpose": _text(rec, "purpose", redact),
                        "result_dir": rec.get("result_dir") or "", "final": final, "best": best})
        top = _better(top, rec, best, metric)
    outcomes = Counter(str(r.get("outcome") or "") for r in records)
    return {
        "type": "stage_finished", "delivery": delivery, "sent_at": time.time(), "stage": stage,
        "dir": meta.get("dir") or None, "report": report, "experiments": len(records),
        "outcomes": dict(sorted(outcomes.items())), "succeeded": all(r.get("outcome") in SUCCEEDED for r in records),
        "best": top, "members": members,
    }


def _better(top: dict[str, Any] | None, rec: Mapping[str, Any], best: dict[str, Any],
            metric: str) -> dict[str, Any] | None:
    """The stage's best so far, or this experiment's best `metric` when it is higher."""
    value = (best.get(metric) or {}).get("value") if isinstance(best.get(metric), dict) else None
    if isinstance(value, (int, float)) and (top is None or value > top["value"]):
        return {"metric": metric, "id": rec.get("id"), "value": value, "step": best[metric].get("step")}
    return top


def _float(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
