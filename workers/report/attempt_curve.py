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
    bounds = [int(o or 0) for o in offsets] + [size]
    if any(b > c for b, c in zip(bounds, bounds[1:], strict=False)) or size - bounds[0] > MAX_SLICE_BYTES:
        return None  # truncated or rewritten since: not slices of one appended file
    out = []
    with open(path, "rb") as fh:
        for start, end in zip(bounds, bounds[1:], strict=False):
            fh.seek(start)
            out.append(parse_val_text(fh.read(end - start).decode("utf-8", errors="replace")))
    return out


def _console(attempt: Attempt) -> ResultSummary | None:
    evals = attempt_evaluations([attempt])
    return summarize(evals, fmt="console") if evals else None


def attempt_curve(ctx: Context, *, file_usable: bool) -> Curve | None:
    """The merged curve, or None when per-attempt evaluations cannot be told apart (an older record,
    a swarm run whose results file is discovered, a results file replaced since launch)."""
    attempts = [a for a in ctx.attempts if a.log_path or a.val_offset is not None]
    curve: dict[tuple[int, str], tuple[int, Evaluation]] = {}
    superseded: list[dict[str, Any]] = []

    def file_parts() -> list[ResultSummary | None] | None:
        """Each attempt's part of the results file (all None without one; None when it cannot be sliced)."""
        if not ctx.val_path:
            return [None] * len(attempts)
        sliced = _slices(ctx.val_path, attempts, inode_ok=True) if file_usable else None
        return list(sliced) if sliced is not None else None

    def begin(attempt: Attempt, trained: bool) -> str:
        """How the attempt starts; the evaluations its start makes void are superseded."""
        start = attempt.start_step
        if start is None:
            return "start not logged"
        if start > 0:
            for key in [k for k in curve if k[0] > start]:
                number, ev = curve.pop(key)
                superseded.append(_gone(number, ev, f"attempt {attempt.number} resumed from step {start} and "
                                        "trained from there again"))
            return "resumed"
        if not trained:
            return "from scratch"
        for number, ev in curve.values():
            superseded.append(_gone(number, ev, f"attempt {attempt.number} restarted training from step 0"))
        curve.clear()
        return "restarted"

    def add(attempt: Attempt, own: list[Evaluation]) -> None:
        for ev in own:
            key = (ev.step, ev.dataset)
            if key in curve:
                number, old = curve[key]
                superseded.append(_gone(number, old, f"evaluated again by attempt {attempt.number}"))
            curve[key] = (attempt.number, ev)

    files = file_parts() if attempts and not ctx.swarm else None
    if files is None:
        return None
    lineage: list[dict[str, Any]] = []
    trained = False  # an earlier attempt got past step 0
    for attempt, file_part in zip(attempts, files, strict=True):
        own = merge_file_and_log(file_part, _console(attempt)).evaluations
        lineage.append({"attempt": attempt.number, "start_step": attempt.start_step, "how": begin(attempt, trained),
                        "resumed_from": attempt.resumed_from, "experiment_name": attempt.experiment_name})
        add(attempt, own)
        trained = trained or any(ev.step > 0 for ev in own) or bool(attempt.start_step)
    ordered = sorted(curve.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    fmt = next((f.format for f in files if f is not None and f.evaluations), "console")
    summary = summarize([ev for _, (_, ev) in ordered], fmt=fmt)
    return Curve(summary=summary, attempt_of={k: n for k, (n, _) in ordered}, superseded=superseded,
                 lineage=lineage)


def _gone(attempt: int, ev: Evaluation, why: str) -> dict[str, Any]:
    return {**ev.model_dump(), "attempt": attempt, "why": why}
