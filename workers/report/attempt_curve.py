"""One reward curve across attempts, merged by step along what the trainer actually did.

Each attempt's evaluations are its own lines of the results file (from the size the file had when it
started: `Attempt.val_offset`) plus its console validation lines. How they join depends on where the
attempt started (`Attempt.start_step`, read from what the trainer printed):

- resumed at step N: it continues the curve; the earlier attempts' evaluations after step N (and at N,
  evaluated again) are superseded — those steps were trained again from the step-N checkpoint;
- started from step 0 after an earlier attempt had trained: a restart; everything before is superseded
  (another model's curve), and the report marks the attempt as restarted;
- start not logged: joined as before (a later attempt's step wins).

Superseded evaluations are kept in `results.json` (`superseded_evaluations`, each with its attempt and
why), never mixed into the curve.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ajet_runner.statemachine.logs.metrics import merge_file_and_log
from ajet_runner.statemachine.logs.results import ResultSummary, parse_val_text, summarize
from ajet_runner.statemachine.models import Evaluation
from ajet_runner.store.records import Attempt, Context
from ajet_runner.workers.watching.watch import attempt_evaluations

__all__ = ["Curve", "attempt_curve"]

MAX_SLICE_BYTES = 64 * 1024 * 1024


@dataclass
class Curve:
    summary: ResultSummary
    attempt_of: dict[tuple[int, str], int]  # (step, dataset) -> attempt of the evaluation in the curve
    superseded: list[dict[str, Any]] = field(default_factory=list)
    lineage: list[dict[str, Any]] = field(default_factory=list)  # per attempt: start step, how it joined


def _slices(path: str, attempts: list[Attempt], inode_ok: bool) -> list[ResultSummary] | None:
    """Each attempt's own part of the results file; None when the offsets cannot be trusted."""
    offsets = [a.val_offset for a in attempts]
    if not inode_ok or any(o is None for o in offsets):
        return None
    try:
        size = os.path.getsize(path)
    except OSError:
        return [ResultSummary() for _ in attempts]
    bounds = _slice_bounds(offsets, size)
    if bounds is None:
        return None
    out = []
    with open(path, "rb") as fh:
        for start, end in zip(bounds, bounds[1:], strict=False):
            fh.seek(start)
            out.append(parse_val_text(fh.read(end - start).decode("utf-8", errors="replace")))
    return out


def _slice_bounds(offsets: list[int | None], size: int) -> list[int] | None:
    """Where each attempt's part starts, then the file's size; None when the file was truncated or
    rewritten since (the offsets are not slices of one appended file) or the parts are too big to read."""
    bounds = [int(o or 0) for o in offsets] + [size]
    if any(b > c for b, c in zip(bounds, bounds[1:], strict=False)) or size - bounds[0] > MAX_SLICE_BYTES:
        return None
    return bounds


def _console(attempt: Attempt) -> ResultSummary | None:
    evals = attempt_evaluations([attempt])
    return summarize(evals, fmt="console") if evals else None


class _Stitch:
    """The curve as the trainer saw it, built attempt by attempt: a resume voids the evaluations after
    its checkpoint's step, a restart voids everything, a repeated step replaces the earlier one."""

    def __init__(self) -> None:
        self.curve: dict[tuple[int, str], tuple[int, Evaluation]] = {}
        self.superseded: list[dict[str, Any]] = []
        self.lineage: list[dict[str, Any]] = []
        self.trained = False  # an earlier attempt got past step 0

    def begin(self, attempt: Attempt) -> str:
        """How the attempt starts; the evaluations its start makes void are superseded."""
        start = attempt.start_step
        if start is None:
            return "start not logged"
        if start > 0:
            for key in [k for k in self.curve if k[0] > start]:
                number, ev = self.curve.pop(key)
                self.superseded.append(_gone(number, ev, f"attempt {attempt.number} resumed from step {start} and "
                                             "trained from there again"))
            return "resumed"
        if not self.trained:
            return "from scratch"
        for number, ev in self.curve.values():
            self.superseded.append(_gone(number, ev, f"attempt {attempt.number} restarted training from step 0"))
        self.curve.clear()
        return "restarted"

    def add(self, attempt: Attempt, own: list[Evaluation]) -> None:
        """The attempt's evaluations join the curve (after `begin`)."""
        self.lineage.append({"attempt": attempt.number, "start_step": attempt.start_step, "how": self.begin(attempt),
                             "resumed_from": attempt.resumed_from, "experiment_name": attempt.experiment_name})
        for ev in own:
            key = (ev.step, ev.dataset)
            if key in self.curve:
                number, old = self.curve[key]
                self.superseded.append(_gone(number, old, f"evaluated again by attempt {attempt.number}"))
            self.curve[key] = (attempt.number, ev)
        self.trained = self.trained or any(ev.step > 0 for ev in own) or bool(attempt.start_step)

    def result(self, fmt: str) -> Curve:
        ordered = sorted(self.curve.items(), key=lambda kv: (kv[0][0], kv[0][1]))
        summary = summarize([ev for _, (_, ev) in ordered], fmt=fmt)
        return Curve(summary=summary, attempt_of={k: n for k, (n, _) in ordered}, superseded=self.superseded,
                     lineage=self.lineage)


def _file_parts(ctx: Context, attempts: list[Attempt], file_usable: bool) -> list[ResultSummary | None] | None:
    """Each attempt's part of the results file (all None without one; None when it cannot be sliced)."""
    if not ctx.val_path:
        return [None] * len(attempts)
    sliced = _slices(ctx.val_path, attempts, inode_ok=True) if file_usable else None
    return list(sliced) if sliced is not None else None


def attempt_curve(ctx: Context, *, file_usable: bool) -> Curve | None:
    """The merged curve, or None when per-attempt evaluations cannot be told apart (an older record,
    a swarm run whose results file is discovered, a results file replaced since launch)."""
    attempts = [a for a in ctx.attempts if a.log_path or a.val_offset is not None]
    files = _file_parts(ctx, attempts, file_usable) if attempts and not ctx.swarm else None
    if files is None:
        return None
    stitch = _Stitch()
    for attempt, file_part in zip(attempts, files, strict=True):
        stitch.add(attempt, merge_file_and_log(file_part, _console(attempt)).evaluations)
    return stitch.result(_format(files))


def _format(files: list[ResultSummary | None]) -> str:
    """The results file's format when a part of it has evaluations; else the console's."""
    return next((f.format for f in files if f is not None and f.evaluations), "console")


def _gone(attempt: int, ev: Evaluation, why: str) -> dict[str, Any]:
    return {**ev.model_dump(), "attempt": attempt, "why": why}
