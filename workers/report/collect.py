"""Gathering what the report shows: results, attempts, repairs, the log tail."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.fixes.failure import RepairResult
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.statemachine.logs.metrics import merge_file_and_log
from ajet_runner.statemachine.logs.results import (
    ResultSummary,
    find_result_files,
    parse_train_file,
    parse_val_files,
    summarize,
)
from ajet_runner.statemachine.logs.text import clean_line
from ajet_runner.statemachine.models import Blueprint
from ajet_runner.store.naming import session_name
from ajet_runner.store.records import Context, ExperimentRecord
from ajet_runner.workers.repair.resume import note_start
from ajet_runner.workers.report import ReportData
from ajet_runner.workers.report.attempt_curve import Curve, attempt_curve
from ajet_runner.workers.swarm.found_results import swarm_results_source
from ajet_runner.workers.watching.watch import (
    AttemptWatch,
    attempt_evaluations,
    attempt_train_steps,
    own_offset,
    parse_own_results,
)


def link_repair_outcomes(ctx: Context, outcome: str) -> None:
    """Each relaunching repair learns what its next attempt did (the repair log's "what happened next")."""
    for i, rep in enumerate(ctx.repairs):
        if rep.relaunched:
            nxt = rep.attempt + 1
            later = ctx.attempt(nxt)
            if later is None:  # the relaunch never came (the time limit or a stop in the wait, a refused launch)
                rep.result = RepairResult.not_relaunched
                rep.next = rep.next or f"no relaunch: the experiment ended {outcome} before attempt {nxt} started"
                continue
            end = later.end_reason
            if i == len(ctx.repairs) - 1 or end:
                rep.next = f"attempt {nxt}: {end or outcome}"


def gather_results(bp: Blueprint, ctx: Context) -> tuple[ResultSummary | None, str]:
    """This run's evaluations and a sentence saying where they came from.

    The results file counts from where it stood at launch (an earlier run's lines before
    that are not this run's); the attempt logs' console validation lines fill the steps the
    file lacks (the file wins where both have a step).
    """
    file_summary, where = _file_results(bp, ctx)
    sources = [where] if where else []
    console = attempt_evaluations(ctx.attempts)  # kept by the watcher: no log is parsed again here
    summary = merge_file_and_log(file_summary, summarize(console) if console else None)
    sources += _console_source(console, file_summary)
    if not sources:
        sources.append("no results file and no validation line in the console log")
    return (summary if summary.evaluations else None), "; ".join(sources)


def _console_source(console: list[Any], file_summary: ResultSummary | None) -> list[str]:
    """The steps only the console log gave (the file wins where both have a step), as a source line."""
    have = {e.step for e in file_summary.evaluations} if file_summary else set()
    used = sorted({e.step for e in console} - have)
    if not used:
        return []
    steps = ", ".join(str(s) for s in used[:12]) + (" …" if len(used) > 12 else "")
    return [f"the console log (verl's `step:N - …` validation rows and `Initial/Final validation "
            f"metrics`): step(s) {steps}"]


def _file_results(bp: Blueprint, ctx: Context) -> tuple[ResultSummary | None, str]:
    """The results file's evaluations and where they came from ("" when there is no file).

    In order: a swarm's discovered results, the configured file (this run's part of it), or the
    results files found in the result dir when no file is configured.
    """
    discovered = swarm_results_source(bp, ctx.swarm) if not ctx.val_path else None
    if discovered is not None:
        return discovered.summary()
    if ctx.val_path and Path(ctx.val_path).exists():
        file_summary = parse_own_results(ctx.val_path, ctx.val_start)
        return file_summary, f"{_own_file_source(ctx)}: {len(file_summary.evaluations)} evaluation(s)"
    if not ctx.val_path and Path(bp.exp_result_dir).exists():
        files = find_result_files(bp.exp_result_dir)  # previous/ (earlier runs) is never searched
        if files:
            return parse_val_files(files), "results files found in the result dir: " + ", ".join(
                f"`{f}`" for f in files)
    return None, ""


def _own_file_source(ctx: Context) -> str:
    """Which results file this is and which part of it counts (the lines written after launch)."""
    if ctx.val_chosen:
        return f"the runner's own results file `{ctx.val_path}`"
    what = "the blueprint's `[exp_val_result_path]`" if ctx.swarm else "the YAML's results file"
    offset = own_offset(ctx.val_path, ctx.val_start)
    if offset:
        return (f"`{ctx.val_path}` ({what}), only the lines written after launch: "
                f"its first {offset} bytes were already there and belong to earlier runs")
    return f"`{ctx.val_path}` ({what}, new or emptied since launch)"


def _same_results_file(ctx: Context) -> bool:
    """The results file is the one that was there at launch (same inode), so attempts' offsets hold."""
    if not ctx.val_path:
        return False
    try:
        inode = os.stat(ctx.val_path).st_ino
    except OSError:
        return True  # not written at all: every attempt's part is empty
    return not ctx.val_start.get("inode") or ctx.val_start["inode"] == inode


def report_data(exp_id: str, bp: Blueprint, rec: ExperimentRecord, lc: Lifecycle, ctx: Context, *, node: str,
                watch: AttemptWatch | None, started_at: float | None, tmux_socket: str = "",
                executor: str = "local", ran_on: str = "", attach: str = "") -> ReportData:
    for attempt in ctx.attempts:
        note_start(attempt)  # the experiment name, start step and checkpoint each attempt's log names
    summary, source = gather_results(bp, ctx)
    curve = _curve(ctx)
    summary, attempt_of, source = _by_attempt(ctx, summary, curve, source)
    final, best = (summary.final, summary.best) if summary else ({}, {})
    return ReportData(
        id=exp_id, purpose=bp.exp_purpose, node=node,
        tmux_session=rec.tmux_session or session_name(bp.exp_purpose, exp_id), tmux_socket=tmux_socket,
        executor=executor, ran_on=ran_on, attach=attach,
        outcome=lc.outcome, reason=lc.reason, created_at=rec.created_at,
        started_at=started_at, finished_at=time.time(), max_seconds=bp.exp_max_time_seconds,
        result_dir=bp.exp_result_dir, blueprint_path=rec.blueprint_path,
        yaml_path=bp.yaml_abspath(), patched_yaml_path="" if ctx.launcher_hidden else ctx.config_path,
        launcher_hidden=ctx.launcher_hidden,
        attempts=list(ctx.attempts),
        preflight_changes=ctx.preflight_changes, preflight_problems=ctx.preflight_problems,
        preflight_env=ctx.preflight_env,
        repairs=list(ctx.repairs),
        evaluations=_evaluations(summary, attempt_of),
        superseded_evaluations=curve.superseded if curve is not None and len(ctx.attempts) > 1 else [],
        attempt_starts=curve.lineage if curve is not None else [],
        final=final, best=best,
        train_steps=len(_train_steps(ctx)), log_tail=_log_tail(watch, ctx), history=lc.history,
        results_source=source if ctx.attempts else "", previous_run=ctx.previous_run,
        nodes=list(ctx.gang.get("members") or []),
        master=_picked(ctx.gang, ("master_addr", "master_port", "nnodes")),
        swarm=_picked(ctx.swarm, ("spec", "reused", "history")),
        launch_command=bp.exp_launch_command, sweep=dict(bp.exp_sweep_values), stage=rec.stage,
    )


def _curve(ctx: Context) -> Curve | None:
    """The curve stitched across attempts; none for a swarm whose results were discovered, not configured."""
    if not ctx.val_path and ctx.swarm:
        return None
    return attempt_curve(ctx, file_usable=_same_results_file(ctx))


def _picked(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: d[k] for k in keys if k in d}


def _by_attempt(ctx: Context, summary: ResultSummary | None, curve: Curve | None, source: str
                ) -> tuple[ResultSummary | None, dict[tuple[int, str], int], str]:
    """Over several attempts the stitched curve's evaluations, each with the attempt it came from."""
    if curve is None or not ctx.attempts:
        return summary, {}, source
    if len(ctx.attempts) == 1:
        return summary, {(e.step, e.dataset): ctx.attempts[0].number
                         for e in (summary.evaluations if summary else [])}, source
    if curve.superseded:
        source += (f"; {len(curve.superseded)} evaluation(s) of earlier attempts superseded by a resume or a "
                   "restart (results.json: superseded_evaluations)")
    return curve.summary if curve.summary.evaluations else None, curve.attempt_of, source


def _evaluations(summary: ResultSummary | None, attempt_of: dict[tuple[int, str], int]) -> list[dict[str, Any]]:
    return [e.model_copy(update={"attempt": attempt_of.get((e.step, e.dataset))}).to_json()
            for e in (summary.evaluations if summary else [])]


def _train_steps(ctx: Context) -> set[int]:
    """The training steps logged: the console's rows (kept by the watcher) and the training file's."""
    steps = attempt_train_steps(ctx.attempts)
    if ctx.train_path and Path(ctx.train_path).exists():
        steps |= {s.step for s in parse_train_file(ctx.train_path).steps}
    return steps


def _log_tail(watch: AttemptWatch | None, ctx: Context) -> list[str]:
    """The watcher's last 60 lines, or the last attempt's log when the watcher has none."""
    tail: list[str] = watch.scanner.tail(60) if watch else []
    return tail if tail or not ctx.attempts else tail_file(ctx.attempts[-1].log_path, 60)


def tail_file(path: str, lines: int) -> list[str]:
    """The last cleaned lines of a log, reading only its last 64 KiB."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [clean_line(x) for x in text.splitlines()[-lines:]]
