"""What a research lead reads off a stage beyond its rows: a short label per run, ranks with ties, the mean
curve and band of runs that differ only in their seed, and a one-line verdict per compared key. Pure.

- A run's **label** is what differs between runs (`lr=1e-6, temperature=0.8, seed=2`): a key is named by its
  last dotted part unless two differing keys share it.
- **Ranks** are competition ranks: runs whose values are equal at the shown precision share a rank
  (`1, 1, 3`), and `tied` says so.
- A **group** is the runs that share every compared value (they differ only in seed keys, or in nothing);
  its curve is the mean over its runs at each step with a band from the lowest to the highest run.
- A **verdict** per compared key: the runs are pooled by that key's value; the best value's mean is set
  against the runner-up's. The seed noise is the pooled standard deviation of the final metric within the
  groups (runs that differ only in seeds); a difference below two standard errors of that noise reads
  "within seed noise", else it is given with its standard error. Without repeats the noise is unknown and
  the verdict says so instead of guessing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, Field

__all__ = ["GroupCurve", "KeyVerdict", "competition_ranks", "group_curves", "run_labels", "seed_noise",
           "short_names", "verdicts"]

TIE_DIGITS = 4  # values equal to 4 decimals (what every table shows) are a tie
NOISE_FACTOR = 2.0  # a difference under 2 standard errors of the seed noise is "within seed noise"
LABEL_KEYS = 4  # differing values named in a run's label


class GroupCurve(BaseModel):
    """The runs that share every compared value: their mean curve and its band, over steps."""

    label: str  # the shared compared values (`lr=1e-6, temperature=0.8`), or "all runs"
    members: list[str]
    final_mean: float | None = None  # of the ranking metric: orders the groups
    points: list[list[float]] = Field(default_factory=list)  # [step, mean, low, high, runs at that step]


class KeyVerdict(BaseModel):
    """One compared key: which value did best and whether that is more than seed noise."""

    key: str
    best: str  # its value
    best_mean: float | None = None
    best_runs: int = 0
    runner_up: str | None = None
    runner_up_mean: float | None = None
    runner_up_runs: int = 0
    difference: float | None = None
    standard_error: float | None = None  # of the difference, from the seed noise; None: unknown
    within_noise: bool | None = None  # None: no repeats, so the noise is unknown
    text: str = ""


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key by its last part, unless another key ends the same (then the whole key)."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def run_labels(differs: Mapping[str, Mapping[str, str]], keys: Sequence[str], command_parts: Mapping[str, str],
               limit: int | None = LABEL_KEYS) -> dict[str, str]:
    """Per run id, `name=value, …` over `keys` (and the launch command's differing part); '' when nothing
    differs. At most `limit` keys are named (`, +3 more`: the tables have every key's column); None: all
    (a key that tells groups apart)."""
    names = short_names(keys)
    out = {}
    for exp_id, values in differs.items():
        bits = [f"{names[k]}={values.get(k, '')}" for k in keys]
        if exp_id in command_parts:
            bits.append(command_parts[exp_id])
        more = len(bits) - limit if limit is not None else 0
        out[exp_id] = ", ".join(bits[:limit]) + (f", +{more} more" if more > 0 else "")
    return out


def competition_ranks(values: Sequence[float | None]) -> tuple[list[int | None], list[bool]]:
    """Ranks of values already in ranking order (None last, unranked): equal values at TIE_DIGITS share the
    rank of the first of them; the second list says which share it with another."""
    ranks: list[int | None] = []
    keys = [None if v is None else round(v, TIE_DIGITS) for v in values]
    for i, key in enumerate(keys):
        if key is None:
            ranks.append(None)
        elif i and keys[i - 1] == key:
            ranks.append(ranks[i - 1])
        else:
            ranks.append(i + 1)
    tied = [k is not None and keys.count(k) > 1 for k in keys]
    return ranks, tied


def group_curves(groups: Mapping[str, list[str]], curves: Mapping[str, list[list[float]]],
                 finals: Mapping[str, float | None], lower_is_better: bool = False) -> list[GroupCurve]:
    """Per group (label → member ids), the mean and min–max band of its members' curves at each step;
    best final mean first."""
    out = []
    for label, members in groups.items():
        have = [v for m in members if (v := finals.get(m)) is not None]
        out.append(GroupCurve(label=label, members=list(members), points=_band(members, curves),
                              final_mean=statistics.fmean(have) if have else None))
    sign = 1 if lower_is_better else -1
    out.sort(key=lambda g: (g.final_mean is None, sign * (g.final_mean or 0.0), g.label))
    return out


def _band(members: list[str], curves: Mapping[str, list[list[float]]]) -> list[list[float]]:
    """[step, mean, min, max, how many] of the members' curve values at each step, by step."""
    by_step: dict[float, list[float]] = {}
    for exp_id in members:
        for step, value in curves.get(exp_id) or []:
            by_step.setdefault(step, []).append(value)
    return [[step, statistics.fmean(vs), min(vs), max(vs), float(len(vs))] for step, vs in sorted(by_step.items())]


def seed_noise(groups: Iterable[Sequence[float]]) -> float | None:
    """The pooled standard deviation of the values within groups of two or more; None without any."""
    sum_sq, dof = 0.0, 0
    for values in groups:
        if len(values) > 1:
            mean = statistics.fmean(values)
            sum_sq += sum((v - mean) ** 2 for v in values)
            dof += len(values) - 1
    return math.sqrt(sum_sq / dof) if dof else None


def _fmt(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".") if abs(x) < 1000 else f"{x:.4g}"


def verdicts(keys: Sequence[str], values_of: Mapping[str, Mapping[str, str]], finals: Mapping[str, float | None],
             noise: float | None, metric: str, lower_is_better: bool = False) -> list[KeyVerdict]:
    """One verdict per compared key, from the final `metric` of every run with a value."""
    out = []
    sign = 1 if lower_is_better else -1
    for key in keys:
        pooled: dict[str, list[float]] = {}
        for exp_id, value in finals.items():
            if value is not None and key in values_of.get(exp_id, {}):
                pooled.setdefault(values_of[exp_id][key], []).append(value)
        if not pooled:
            out.append(KeyVerdict(key=key, best="", text=f"{key}: no run has a final {metric} yet"))
            continue
        ranked = sorted(pooled.items(), key=lambda kv: (sign * statistics.fmean(kv[1]), kv[0]))
        (best, bv), rest = ranked[0], ranked[1:]
        best_mean = statistics.fmean(bv)
        verdict = KeyVerdict(key=key, best=best, best_mean=best_mean, best_runs=len(bv))
        if not rest:
            verdict.text = f"{key}: only {best} has a final {metric}"
            out.append(verdict)
            continue
        second, sv = rest[0]
        second_mean = statistics.fmean(sv)
        verdict.runner_up, verdict.runner_up_mean, verdict.runner_up_runs = second, second_mean, len(sv)
        diff = abs(best_mean - second_mean)
        verdict.difference = diff
        head = (f"{key}: {best} best ({_fmt(best_mean)}, {len(bv)} run{'s' * (len(bv) > 1)}) vs {second} "
                f"({_fmt(second_mean)}, {len(sv)} run{'s' * (len(sv) > 1)})")
        if noise is None:
            verdict.text = f"{head}: difference {_fmt(diff)}; seed noise unknown (no repeated seeds)"
        else:
            se = noise * math.sqrt(1 / len(bv) + 1 / len(sv))
            verdict.standard_error = se
            verdict.within_noise = diff <= NOISE_FACTOR * se
            verdict.text = (f"{head}: within seed noise (difference {_fmt(diff)} ± {_fmt(se)})"
                            if verdict.within_noise else f"{head}: difference {_fmt(diff)} ± {_fmt(se)}, beyond "
                            "seed noise")
        out.append(verdict)
    return out
