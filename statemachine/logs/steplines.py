"""verl's console step lines, `step:N - key:value - …`, and which of their keys are validation.

verl's console logger (`verl.utils.logger.aggregate_logger.concat_dict_to_str`, used by the
public AgentJet trainer for every `verl_logger.log(data, step)`) prints `step:{step}` and then,
for each value that is a `numbers.Number`, `{key}:{pprint.pformat(value)}`, joined by ` - `.
Strings are left out. So a value is a Python number repr: `4`, `0.25`, `1e-06`, `nan`, `inf`,
`True`, and under numpy 2 `np.float64(0.25)` / `np.int64(3)`. The keys are whatever the dict
held: at a validation `TGC@1`, `TGC@4`, `mean_reward`, `pass_n`, … (AgentJet 0.0.1) or
`val-core/<source>/…`, `val-aux/…` (verl's own validation); at a training step `critic/…`,
`actor/…`, `timing_s/…`, `perf/…`, `training/global_step`, … — and on a training step that
also validated, both kinds in one line.

**The rule that tells them apart** (by key, never by position or by the line's other words):

- a *training key* is namespaced, `<ns>/…`, with a namespace that does not start with `val`
  (`critic/score/mean`, `actor/kl_loss`, `timing_s/step`, `training/global_step`);
- every other key is a *validation key* (`TGC@1`, `mean_reward`, `num_pass_n_tasks(pass@4)`,
  `val-core/gsm8k/reward/mean@4`, `val-aux/num_turns/min`);
- a line is a **validation row** when one of its validation keys is a validation *marker*
  (`val-core/…`, `val-aux/…`, `val/…`, `…TGC@k…`, `pass@k`, `task_pass_rate@k`, `mean_reward`,
  `num_pass_n_tasks…`): its evaluation holds its validation keys only;
- a line is a **training row** when it holds a training key: it counts as a logged training step.

A line can be both. A line with neither (an unprefixed odd key alone) is neither.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ajet_runner.statemachine.logs.results import normalize_key

__all__ = ["StepLine", "is_training_key", "is_validation_marker", "parse_step_line"]

_HEAD_RE = re.compile(r"^step:(-?\d{1,12}) - ")
_BARE_HEAD_RE = re.compile(r"^step:(-?\d{1,12})$")
# What pprint.pformat prints for a numbers.Number: int/float reprs (nan, inf included), numpy scalars.
_NUMBER_RE = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf)$")
_NUMPY_RE = re.compile(r"^(?:np|numpy)\.(?:float|int|uint)\d*\((?P<inner>[^()]*)\)$")
# Numbers that are not metrics (bools are numbers.Number) but are still whole `key:value` items.
_OTHER_SCALAR_RE = re.compile(r"^(?:True|False|(?:np|numpy)\.(?:True|False)_|(?:np|numpy)\.bool_?\((?:True|False)\)"
                              r"|Decimal\('[^']*'\)|Fraction\(-?\d+, \d+\)|\(?[+-]?[\d.e+-]+j\)?)$")
_MARKER_RE = re.compile(
    r"^(?:val-core/|val-aux/|val/)|(?:^|/)(?:TGC@\d+|pass@\d+|task_pass_rate@\d+)|^mean_reward$|^num_pass_n_tasks"
)


def is_training_key(key: str) -> bool:
    """`<ns>/…` with a namespace that does not start with `val`: a training-step metric."""
    ns, slash, _ = key.partition("/")
    return bool(slash) and bool(ns) and not ns.startswith("val")


def is_validation_marker(key: str) -> bool:
    """A key only a validation prints (see the module docstring)."""
    return bool(_MARKER_RE.search(key))


def _value(text: str) -> tuple[bool, float | None]:
    """(is a number repr, its value when it is a metric: bools and odd types are not)."""
    s = text.strip()
    try:  # the common case, at C speed; float() also takes words pformat never prints, checked below
        number = float(s)
    except ValueError:
        pass
    else:
        if s[-1:].isdigit() or _NUMBER_RE.match(s):
            return True, number if number == number else math.nan  # one nan object: equal dicts compare equal
        return False, None
    m = _NUMPY_RE.match(s)
    if m:
        inner = m.group("inner").strip()
        if _NUMBER_RE.match(inner):
            number = float(inner)
            return True, number if number == number else math.nan
        return True, None
    return bool(_OTHER_SCALAR_RE.match(s)), None


@dataclass
class StepLine:
    """One parsed step line: its step, its validation metrics and whether it is a training step."""

    step: int
    validation: dict[str, float] = field(default_factory=dict)  # validation keys (normalised), numbers only
    training: dict[str, float] = field(default_factory=dict)  # training keys, numbers only (see training_values)
    is_validation: bool = False  # a validation marker key was there
    is_training: bool = False  # a training key was there


# Text every validation marker holds: a line with none of it cannot be a validation row.
_MARKER_TEXT = ("val-", "val/", "TGC@", "pass@", "task_pass_rate@", "mean_reward", "num_pass_n_tasks")


def parse_step_line(line: str, training_values: bool = True) -> StepLine | None:
    """A cleaned line → its StepLine, or None when it is not a verl step line with an item.

    Items are ` - `-separated; a piece whose text after its last `:` is not a number repr is
    taken as part of the next key (a key may itself hold ` - `), so one odd key never shifts
    the others' values. `training_values=False`: the training keys' values are not kept, and a
    line that cannot be a validation row (almost every training step's) is only looked at until
    its first training item — what a log follower needs, at a fraction of the cost."""
    s = line.strip()
    m = _HEAD_RE.match(s)
    if m is None:
        return None
    out = StepLine(step=int(m.group(1)))
    rest = s[m.end():]
    if not training_values and not any(text in s for text in _MARKER_TEXT):
        out.is_training = True
        return out if _has_training_item(rest) else None
    for name, number in _items(rest):
        _add_item(out, name, number, training_values)
    if not out.validation and not out.is_training:
        return None
    return out


def _has_training_item(rest: str) -> bool:
    """Whether a step line's items (`rest`) hold a training key with a number."""
    for piece in rest.split(" - "):
        key, colon, raw = piece.rpartition(":")
        if colon and is_training_key(key.strip()) and _value(raw)[1] is not None:
            return True
    return False


def _items(rest: str) -> Iterator[tuple[str, float]]:
    """The (key, number) items of a step line's items (`rest`): a piece without a number repr after its
    last `:` joins the next key; an item whose value is no number (a string repr) is read and left out."""
    pending = ""
    for piece in rest.split(" - "):
        key, colon, raw = piece.rpartition(":")
        ok, number = _value(raw) if colon else (False, None)
        if not ok or not (pending + key).strip():
            pending += piece + " - "
            continue
        name = (pending + key).strip()
        pending = ""
        if number is not None:
            yield name, number


def _add_item(out: StepLine, name: str, number: float, training_values: bool) -> None:
    """One item into the line: a training key marks it a training step (its value kept when asked); any
    other key is a validation metric (by its normalized name, the first value kept)."""
    if is_training_key(name):
        out.is_training = True
        if training_values:
            out.training[name] = number
        return
    name = normalize_key(name)
    out.validation.setdefault(name, number)
    if not out.is_validation and is_validation_marker(name):
        out.is_validation = True
