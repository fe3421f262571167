"""The /metrics counters a transition bumps, as structured fields.

Callers say what happened (`TransitionStats`: which transition, which repair result, ...). How a pair
of labels is packed into one field of a Redis counter hash (`a>b`, `a|b`) is this module's business
only: `Records.transition` packs, `service/cluster_metrics.py` unpacks with `split_*`; `Counters` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from pydantic import BaseModel

from ajet_runner.store.keys import STATS_NAMES, duration_bucket_key, stats_key
from ajet_runner.store.records import text

_TRANSITION_SEP = ">"
_PAIR_SEP = "|"


class TransitionStats(BaseModel):
    """What one transition counts: every field is optional."""

    transition: tuple[str, str] | None = None  # (from_state, to_state): ajet_runner_transitions_total
    outcome: str = ""  # ajet_runner_experiments_finished_total and the duration histogram
    duration: float = 0.0  # seconds from start (or creation) to finished
    repair: tuple[str, str] | None = None  # (signature, result): ajet_runner_repairs_total
    advised: tuple[str, str] | None = None  # (model, result): ajet_runner_advised_repairs_total
    write_failure: str = ""  # errno name: ajet_runner_result_write_failures_total

    @classmethod
    def of(cls, value: TransitionStats | Mapping[str, Any] | None) -> TransitionStats:
        """Accepts the packed form too (`{"transition": "a>b", "repair": "sig|result"}`)."""
        if value is None:
            return cls()
        if isinstance(value, TransitionStats):
            return value
        data = dict(value)
        if isinstance(data.get("transition"), str):
            data["transition"] = split_transition(data["transition"])
        for name in ("repair", "advised"):
            if isinstance(data.get(name), str):
                data[name] = split_pair(data[name]) if data[name] else None
        return cls.model_validate({k: v for k, v in data.items() if v is not None and k in cls.model_fields})

    def packed(self, buckets: list[str]) -> dict[str, Any]:
        """The JSON the transition script reads (store/transition.lua, ARGV[4])."""
        out: dict[str, Any] = {}
        if self.transition:
            out["transition"] = transition_label(*self.transition)
        if self.outcome:
            out.update(outcome=self.outcome, duration=self.duration, buckets=buckets)
        if self.repair:
            out["repair"] = pair_label(*self.repair)
        if self.advised:
            out["advised"] = pair_label(*self.advised)
        if self.write_failure:
            out["write_failure"] = self.write_failure
        return out


class Counters:
    """The counter hashes the transitions bump (keys.stats_key, keys.duration_bucket_key), read for /metrics."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def read(self) -> dict[str, dict[str, float]]:
        """Every counter hash by name, and each outcome's duration buckets as `duration_bucket:<outcome>`."""
        pipe = self.r.pipeline(transaction=False)
        names = list(STATS_NAMES)
        for n in names:
            pipe.hgetall(stats_key(n))
        out = {n: {k.decode(): float(v) for k, v in raw.items()} for n, raw in zip(names, pipe.execute(),
                                                                                    strict=True)}
        for outcome in out["outcomes"]:
            raw = self.r.hgetall(duration_bucket_key(outcome))
            out[f"duration_bucket:{outcome}"] = {text(k): float(v) for k, v in raw.items()}
        return out


def transition_label(src: str, dst: str) -> str:
    return f"{src}{_TRANSITION_SEP}{dst}"


def split_transition(label: str) -> tuple[str, str]:
    src, _, dst = label.partition(_TRANSITION_SEP)
    return src, dst


def pair_label(first: str, second: str) -> str:
    return f"{first}{_PAIR_SEP}{second}"


def split_pair(label: str) -> tuple[str, str]:
    """(first, second); a label without the separator is (label, "")."""
    first, sep, second = label.rpartition(_PAIR_SEP)
    return (first, second) if sep else (label, "")
