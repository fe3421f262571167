"""Repairs resume: the next attempt keeps the experiment name an earlier attempt used, so verl's
`resume_mode: auto` finds that attempt's checkpoint (statemachine/logs/checkpoints.py has the rules).

AgentJet names an unnamed experiment after the YAML and the launch minute, so a relaunch a minute
later would be a new experiment training from step 0. The name the first attempt used is in its
log (`Experiment Name: …`); it is pinned in the next attempt's YAML copy (the user's file is never
touched), and the repair log says which checkpoint the trainer will find.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.logs.checkpoints import (
    NAME_KEY,
    TRACKER,
    StartFacts,
    StartScan,
    checkpoint_dir,
    explicit_name,
    tracker_step,
)
from ajet_runner.statemachine.logs.text import clean_line
from ajet_runner.statemachine.models import ConfigChange
from ajet_runner.store.records import Attempt, Context
from ajet_runner.workers.repair.config_patch import read_yaml_data

__all__ = ["HEAD_BYTES", "keep_start_facts", "latest_checkpoint", "note_start", "pin_experiment_name", "start_facts"]

HEAD_BYTES = 32 * 1024 * 1024  # the name and the resume lines come before training: never read further


_MARKERS = (b"Experiment Name: ", b"Setting global step to ", b"Training from scratch",
            b"Load from checkpoint folder: ")


def start_facts(log_path: str, limit: int = HEAD_BYTES, begin: int = 0) -> StartFacts:
    """The start facts in the first `limit` bytes of an attempt's log (empty when unreadable).

    Only for an attempt whose watch did not keep them: the log is mapped, not read line by line, and only
    the lines holding one of the facts' phrases are cleaned and parsed, in log order (a 32 MiB head without
    them costs a few substring searches, not seconds of Python). AgentJet colours a whole message, so a
    phrase is never split by an escape sequence. `begin`: look only from the line holding this byte on."""
    scan = StartScan()
    try:
        with open(log_path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return scan.facts
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                end = min(size, limit)
                _scan_marked_lines(mm, scan, mm.rfind(b"\n", 0, min(begin, end)) + 1 if begin > 0 else 0, end)
    except (OSError, ValueError):
        return StartFacts()
    return scan.facts


def _scan_marked_lines(mm: mmap.mmap, scan: StartScan, first: int, end: int) -> None:
    """Feed `scan` the lines of mm[first:end] holding a marker, in order, until it has what it needs."""
    found = {m: mm.find(m, first, end) for m in _MARKERS}
    while any(at >= 0 for at in found.values()):
        at = min(a for a in found.values() if a >= 0)
        start = mm.rfind(b"\n", 0, at) + 1
        stop = mm.find(b"\n", at, end)
        stop = end if stop < 0 else stop
        line = clean_line(mm[start:stop].decode("utf-8", errors="replace").rstrip("\r"))
        if scan.take(line):
            return
        for m in _MARKERS:  # every marker on this line is done with
            if 0 <= found[m] <= stop:
                found[m] = mm.find(m, stop, end)


def keep_start_facts(attempt: Attempt, scan: StartScan) -> None:
    """What the watch saw of the attempt's start as its log streamed by; once settled (found, or the head
    read without a gap and not there) `start_read` says so and `note_start` never opens the log."""
    facts = scan.facts
    attempt.experiment_name = attempt.experiment_name or facts.experiment_name
    if attempt.start_step is None:
        attempt.start_step, attempt.resumed_from = facts.start_step, facts.resumed_from
    if scan.settled:
        attempt.start_read = True
    elif scan.gapped and attempt.unscanned:  # read from byte 0 up to the first skipped range
        attempt.start_read_to = int(attempt.unscanned[0]["start"])


def note_start(attempt: Attempt) -> None:
    """Fill an ended attempt's experiment name, start step and resumed checkpoint from its log — only
    for an attempt whose watch did not keep them (an older record, or a head skipped in a backlog)."""
    if (attempt.start_step is not None and attempt.experiment_name) or attempt.start_read or not attempt.log_path:
        return
    facts = start_facts(attempt.log_path, begin=attempt.start_read_to or 0)
    attempt.experiment_name = attempt.experiment_name or facts.experiment_name
    if attempt.start_step is None:
        attempt.start_step = facts.start_step
        attempt.resumed_from = facts.resumed_from


def latest_checkpoint(ckpt_dir: str) -> int | None:
    """The step verl would resume from in `ckpt_dir` (its tracker file), None when there is none."""
    tracker = Path(ckpt_dir) / TRACKER
    try:
        step = tracker_step(tracker.read_text(encoding="utf-8"))
    except OSError:
        return None
    if step is None or not (Path(ckpt_dir) / f"global_step_{step}").is_dir():
        return None  # verl's find_latest_ckpt_path: the tracker must name an existing global_step_N
    return step


def _resumes(data: dict[str, Any], name: str, workdir: str) -> str:
    """Where training under `name` resumes: its latest checkpoint, or step 0 when it has none yet."""
    ckpt = checkpoint_dir(data, name, workdir)
    step = latest_checkpoint(ckpt)
    if step is None:
        return f"no checkpoint in {ckpt} yet, so training starts from step 0"
    return f"verl resumes from {ckpt}/global_step_{step}"


def _current_name(data: dict[str, Any]) -> Any:
    """`ajet.experiment_name` as the YAML has it (None when unset)."""
    ajet = data.get("ajet")
    return (ajet or {}).get("experiment_name") if isinstance(ajet, dict) else None


def pin_experiment_name(ctx: Context, workdir: str) -> tuple[ConfigChange | None, str]:
    """The YAML change that keeps the earlier attempts' experiment name, and the repair-log line.

    None when there is nothing to pin: no config (swarm), a name the YAML already fixes (explicit or
    pinned by an earlier repair), or no attempt logged the name it used (it failed before AgentJet
    named it) — the line then says so."""
    if not ctx.config_path or not os.path.exists(ctx.config_path):
        return None, ""
    data = read_yaml_data(Path(ctx.config_path))
    if explicit_name(data) is not None:
        return None, ""
    for attempt in ctx.attempts:
        note_start(attempt)
    used = next(((a.number, a.experiment_name) for a in ctx.attempts if a.experiment_name), None)
    if used is None:
        return None, ("experiment name not pinned: no attempt so far logged `Experiment Name: …` (each failed "
                      "before AgentJet named it), so the next attempt gets its own name and starts from step 0")
    number, name = used
    where = _resumes(data, name, workdir)
    reason = f"the name attempt {number} used (AgentJet logged `Experiment Name: {name}`): {where}"
    current = _current_name(data)
    change = ConfigChange(key=NAME_KEY, old=current, new=name, reason=reason)
    shown = "(absent)" if current is None else repr(current)
    return change, f"set {NAME_KEY}: {shown} -> {name!r} ({reason})"
