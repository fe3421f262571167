"""Submitting a stage: several blueprints, or a sweep of one, as one named group of experiments.

Every blueprint is read and expanded first (statemachine/blueprint/sweep.py: one experiment per combination of its
`[exp_sweep]` part and the `--sweep` options), and the whole stage is refused — nothing recorded — when a
blueprint cannot be read, a sweep is malformed, or two experiments would share a result dir. Then each
experiment goes through the one submission path (service/submit.py), tagged with the stage; one that is
refused there (its result dir held by a running experiment, no node with enough GPUs) is listed with its
reasons while the others run, as separate submissions of them would. The stage itself, and its settings
(report dir, webhook URL), are written with its accepted experiments' records, in their transactions: a
submission refused whole records nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ajet_runner.service.submit import PARSE_DEADLINE_SECONDS, SubmissionRejected, submit
from ajet_runner.statemachine.blueprint import parse_deadline
from ajet_runner.statemachine.blueprint.parse import ParseDeadline, parse_blueprint
from ajet_runner.statemachine.blueprint.sweep import MAX_EXPERIMENTS, SweepPlan, plan_sweep
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.models import Blueprint, Level, Problem
from ajet_runner.store.cluster.stages import StageNameError, check_stage_name, drop_if_empty
from ajet_runner.store.store import Store

__all__ = ["StageRejected", "StageSubmission", "expand_blueprints", "submit_stage"]


@dataclass
class Planned:
    """One experiment of the stage before it is submitted."""

    text: str
    blueprint_path: str
    overrides: dict[str, Any]
    label: str  # which blueprint (and sweep values) it is, for messages
    result_dir: str


@dataclass
class StageSubmission:
    stage: str
    stage_dir: str
    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)  # {"blueprint", "label", "status", "problems"}


class StageRejected(ValueError):
    """Nothing was submitted: `problems` name each reason (the field is prefixed by the blueprint)."""

    def __init__(self, problems: Sequence[Problem], status: int = 422) -> None:
        self.problems = list(problems)
        self.status = status
        super().__init__("; ".join(str(p) for p in self.problems))


def _named(where: str, problems: Sequence[Problem]) -> list[Problem]:
    return [p.model_copy(update={"field": f"{where}: {p.field}"}) for p in problems if p.level == Level.error]


def expand_blueprints(blueprints: Sequence[tuple[str, str]], sweep: Sequence[str] = (),
                      max_experiments: int = MAX_EXPERIMENTS) -> tuple[list[Planned], str, list[Problem]]:
    """Every experiment of the stage, the stage dir a single sweep implies (its blueprint's result dir), and
    the problems that refuse the whole stage."""
    planned: list[Planned] = []
    problems: list[Problem] = []
    sweep_dirs: list[str] = []
    deadline = parse_deadline.after(PARSE_DEADLINE_SECONDS)  # one budget for the request's every blueprint and sweep
    for k, (text, path) in enumerate(blueprints, start=1):
        where = path or f"blueprint {k}"
        try:
            bp = parse_blueprint(text, deadline=deadline)
            plan = _sweep_plan(bp, sweep, deadline, max_experiments)
        except ParseDeadline:
            problems.append(_too_slow(where))
            continue
        if plan is None:
            planned.append(Planned(text, path, {}, where, bp.exp_result_dir))
            continue
        if not plan.ok:
            problems += _named(where, plan.problems)
            continue
        sweep_dirs.append(bp.exp_result_dir)
        planned += [Planned(text, path, {"exp_result_dir": m.result_dir, "exp_purpose": m.purpose,
                                         "exp_sweep_values": m.values}, f"{where} [{m.label}]", m.result_dir)
                    for m in plan.members]
    problems += _shared_dirs(planned)
    implied = sweep_dirs[0] if len(blueprints) == 1 and len(sweep_dirs) == 1 else ""
    return planned, implied, problems


def _sweep_plan(bp: Blueprint, sweep: Sequence[str], deadline: float, max_experiments: int) -> SweepPlan | None:
    """The blueprint's sweep (its `[exp_sweep]` part and the request's), or None when it sweeps nothing."""
    if not bp.exp_sweep.strip() and not sweep:
        return None
    return plan_sweep(bp.exp_sweep, sweep, result_dir=bp.exp_result_dir, purpose=bp.exp_purpose,
                      deadline=deadline, max_experiments=max_experiments)


def _too_slow(where: str) -> Problem:
    """A blueprint refused unread: the request's parse budget ran out before it."""
    return Problem(level=Level.error, field=f"{where}: blueprint", message=(
        f"the stage's blueprints took over {format_limit(PARSE_DEADLINE_SECONDS)} to parse and this one was refused "
        "unread; real ones parse in milliseconds (look for a huge line or deeply nested lists)"))


def _shared_dirs(planned: list[Planned]) -> list[Problem]:
    """A problem for each experiment whose result dir an earlier one of the stage already has."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for p in planned:
        key = os.path.normpath(p.result_dir) if p.result_dir else ""
        if key and key in seen:
            problems.append(Problem(level=Level.error, field=f"{p.label}: exp_result_dir", message=(
                f"{p.result_dir} is also the result dir of {seen[key]}: every experiment of a stage needs its own")))
        elif key:
            seen[key] = p.label
    return problems


def _check_request(stage: str, blueprints: Sequence[tuple[str, str]]) -> None:
    """A valid stage name and at least one blueprint (StageRejected otherwise)."""
    try:
        check_stage_name(stage)
    except StageNameError as exc:
        raise StageRejected([Problem(level=Level.error, field="stage", message=str(exc))]) from None
    if not blueprints:
        raise StageRejected([Problem(level=Level.error, field="blueprints", message="a stage needs a blueprint")])


def submit_stage(store: Store, stage: str, blueprints: Sequence[tuple[str, str]], *,
                 sweep: Sequence[str] = (), stage_dir: str = "", webhook_url: str = "",
                 node: str | None = None, priority: str | None = None, allowed_roots: Sequence[str] = (),
                 check_disk: bool = True, wait_for_node: bool = False,
                 max_experiments: int = MAX_EXPERIMENTS) -> StageSubmission:
    """Submit `blueprints` ((text, path) pairs) as stage `stage`; raises StageRejected when nothing was."""
    _check_request(stage, blueprints)
    planned, implied, problems = expand_blueprints(blueprints, sweep, max_experiments)
    if problems:
        raise StageRejected(problems)
    directory = stage_dir or implied
    _check_stage_dir(directory, allowed_roots)
    # Written with each accepted experiment's record (store/stage_member.lua), never before: a refused stage
    # leaves no stage behind and an existing stage's settings are not rewritten by a refused submission.
    settings = {k: v for k, v in (("dir", directory), ("webhook_url", webhook_url)) if v}
    result = StageSubmission(stage=stage, stage_dir=directory)
    for p in planned:
        try:
            rec = submit(store, p.text, blueprint_path=p.blueprint_path, node=node, priority=priority,
                         allowed_roots=allowed_roots, check_disk=check_disk, wait_for_node=wait_for_node,
                         stage=stage, overrides=p.overrides or None, stage_settings=settings)
        except SubmissionRejected as exc:
            result.refused.append({"blueprint": p.blueprint_path, "label": p.label, "status": exc.status,
                                   "problems": [q.model_dump(mode="json") for q in exc.problems]})
            continue
        result.accepted.append(rec)
    if not result.accepted:
        drop_if_empty(store, stage)  # an experiment recorded, then withdrawn (its dir could not be prepared)
        raise _all_refused(result.refused)
    return result


def _check_stage_dir(directory: str, allowed_roots: Sequence[str]) -> None:
    """The stage dir (if any) is absolute and inside the allowed roots (if any)."""
    if directory and not os.path.isabs(directory):
        raise StageRejected([Problem(level=Level.error, field="stage_dir", message=(
            f"the stage dir {directory!r} must be an absolute path"))])
    if directory and allowed_roots and not _inside(directory, allowed_roots):
        raise StageRejected([Problem(level=Level.error, field="stage_dir", message=(
            f"{directory} is outside the allowed roots ({', '.join(allowed_roots)})"))])


def _all_refused(refused: list[dict[str, Any]]) -> StageRejected:
    """Every experiment refused: their problems, each field named with its experiment's label."""
    status = max((r["status"] for r in refused), default=422)
    return StageRejected([Problem.model_validate({**q, "field": f"{r['label']}: {q.get('field', '')}"})
                          for r in refused for q in r["problems"]], status=status)


def _inside(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == os.path.realpath(r) or real.startswith(os.path.realpath(r).rstrip("/") + "/")
               for r in roots)
