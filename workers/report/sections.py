"""`experiment_report.md`: one section per topic; a section that fails says so instead of taking the report down."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ajet_runner.statemachine.metric_vocabulary import CHART_TITLE
from ajet_runner.statemachine.shell.command_file import command_script
from ajet_runner.store.records import Attempt as AttemptInfo
from ajet_runner.store.records import RepairRecord
from ajet_runner.workers.report.data import (
    DELTA_METRICS,
    LOG_TAIL_LINES,
    NA,
    PLOT_NAME,
    REPAIR_LOG_NAME,
    RESULTS_NAME,
    ReportData,
)
from ajet_runner.workers.report.evaluations import Eval, baselines, changes_since_baseline, delta, table_metrics
from ajet_runner.workers.report.markdown import (
    clean,
    code_span,
    fenced,
    finite,
    fmt_delta,
    fmt_duration,
    fmt_limit,
    fmt_time,
    fmt_value,
    md_cell,
    number,
    path_link,
    table,
)


@dataclass
class ReportContext:
    data: ReportData
    evals: list[Eval]
    now: float
    plot_note: str  # "" when the plot was written

    @property
    def elapsed(self) -> float | None:
        start = finite(self.data.started_at)
        end = finite(self.data.finished_at)
        if start is None:
            return None
        return (end if end is not None else self.now) - start


def _purpose(d: ReportData) -> list[str]:
    """The submitter's purpose as a quote above the summary table."""
    if not d.purpose.strip():
        return []
    return [f"> {clean(line)}".rstrip() for line in d.purpose.strip().splitlines()] + [""]


def _tmux_cell(d: ReportData) -> str:
    """The session and the command that attaches to it, as the console shows it."""
    if not d.tmux_session:
        return NA
    sock = f"-S {shlex.quote(d.tmux_socket)} " if d.tmux_socket else ""
    where = f" on {md_cell(d.node)}" if d.node else ""
    attach = d.attach or f"tmux {sock}attach -t {shlex.quote(d.tmux_session)}"
    return f"{code_span(d.tmux_session)} (attach{where}: {code_span(attach)})"


def _elapsed_cell(c: ReportContext) -> str:
    if c.data.started_at is None:
        return "never launched"
    return fmt_duration(c.elapsed) + ("" if c.data.finished_at is not None else " (not finished)")


def _limit_cell(c: ReportContext) -> str:
    """The time limit and how much of it the run used."""
    limit = fmt_limit(c.data.max_seconds) if c.data.max_seconds else "none"
    used = finite(c.elapsed)
    if used is not None and (max_seconds := finite(c.data.max_seconds)):
        limit += f" ({100 * used / max_seconds:.0f}% used)"
    return limit


def _summary(c: ReportContext) -> list[str]:
    d = c.data
    outcome = f"**{md_cell(d.outcome or 'unknown')}**" + (f" — {md_cell(d.reason, 600)}" if d.reason else "")
    repairs = f"{repair_summary(d)} (see [{REPAIR_LOG_NAME}]({REPAIR_LOG_NAME}))"
    rows = [
        ["Experiment", code_span(d.id)],
        ["Outcome", outcome],
        ["Node", md_cell(d.node or NA)],
        *([["Ran on", md_cell(d.ran_on)]] if d.ran_on else []),
        ["tmux session", _tmux_cell(d)],
        ["Created", fmt_time(d.created_at)],
        ["Started", fmt_time(d.started_at) if d.started_at is not None else "never launched"],
        ["Finished", fmt_time(d.finished_at)],
        ["Elapsed", _elapsed_cell(c)],
        ["Time limit", _limit_cell(c)],
        ["Attempts", str(len(d.attempts))],
        ["Failures and repairs", repairs],
        ["Evaluations", str(len(c.evals))],
        ["Training steps logged", str(d.train_steps) if d.train_steps else NA],
        ["Blueprint", path_link(d.blueprint_path, d.result_dir)],
        ["YAML (original)", code_span(d.yaml_path)],
        ["YAML (as run)", "as the script names it (the runner changed nothing: see Preflight)" if d.launcher_hidden
         else path_link(d.patched_yaml_path, d.result_dir)],
        ["Result dir", code_span(d.result_dir)],
    ]
    if d.previous_run:
        rows.append(["Previous run", f"[{md_cell(d.previous_run)}]({d.previous_run}/) (an earlier run's files, "
                                     "moved aside before this one started)"])
    return _purpose(d) + table(["", ""], rows)


def _headline(c: ReportContext) -> list[str]:
    lines: list[str] = []
    for dataset, metrics in changes_since_baseline(c.evals).items():
        for metric, ch in metrics.items():
            name = f"{metric} on {code_span(dataset)}" if dataset else metric
            first = NA if ch["from_step"] is None else ch["from_step"]
            last = NA if ch["to_step"] is None else ch["to_step"]
            lines.append(
                f"- {name}: {fmt_value(ch['from'], metric)} (step {first})"
                f" → {fmt_value(ch['to'], metric)} (step {last}), change {fmt_delta(ch['change'])}"
            )
    return lines


def _evaluations(c: ReportContext) -> list[str]:
    source = [f"Where the numbers come from: {c.data.results_source}.", ""] if c.data.results_source else []
    return source + _evaluation_table(c)


def _evaluation_table(c: ReportContext) -> list[str]:
    if not c.evals:
        return _no_evaluation(c.data.train_steps)
    metrics = table_metrics(c.evals)
    base = baselines(c.evals)
    attempts = {e.attempt for e in c.evals if e.attempt is not None}
    by_attempt = len(attempts) > 1 or max(attempts, default=1) > 1  # a relaunch made some (or all) of them
    rows = [_evaluation_row(e, metrics, base, by_attempt) for e in c.evals]
    lines = _headline(c)
    lines += ["", "Every evaluation, in step order. Δ is the change since the dataset's step 0"
              " (or its first evaluation when there is no step 0).", ""]
    if by_attempt:
        lines += ["The curve follows the attempts as the trainer did: a resumed attempt continues it from its "
                  "checkpoint's step; a restarted one replaces what came before (see Attempts).", ""]
    lines += _step_unit_changes(c.data.repairs)
    lines += table(_evaluation_header(metrics, by_attempt), rows)
    return lines + _superseded(c.data.superseded_evaluations)


def _step_unit_changes(repairs: list[RepairRecord]) -> list[str]:
    """A relaunch that changed the step unit: the steps before and after it do not compare."""
    units = [f"**From attempt {r.attempt + 1} on, the step unit changed** ({md_cell(line, 600)})."
             for r in repairs if r.relaunched for line in r.changes if line.startswith("step unit changed")]
    return [*units, ""] if units else []


def _no_evaluation(train_steps: int) -> list[str]:
    hint = "This run wrote no validation result and its log has no validation metrics line"
    if train_steps:
        hint += f" although {train_steps} training steps were logged"
    hint += (
        " — check `ajet.trainer_common.test_freq`, `val_before_train` and"
        " `val_print_to_markdown_file_path` in the YAML as run, and the log below."
    )
    return ["**No evaluation was recorded.**", "", hint]


def _evaluation_header(metrics: list[str], by_attempt: bool) -> list[str]:
    header = ["step", "attempt", "dataset"] if by_attempt else ["step", "dataset"]
    for m in metrics:
        header.append(m)
        if m in DELTA_METRICS:
            header.append(f"Δ {m}")
    return header


def _evaluation_row(e: Eval, metrics: list[str], base: dict[str, Eval], by_attempt: bool) -> list[Any]:
    row: list[Any] = [str(e.step) if e.step is not None else NA, md_cell(e.dataset or "–")]
    if by_attempt:
        row.insert(1, str(e.attempt) if e.attempt is not None else NA)
    for m in metrics:
        row.append(fmt_value(e.metrics.get(m), m))
        if m in DELTA_METRICS:
            row.append("baseline" if e is base.get(e.dataset) else fmt_delta(delta(e, base.get(e.dataset), m)))
    return row


def _superseded(gone: list[dict[str, Any]]) -> list[str]:
    """The evaluations of earlier attempts left out of the curve (a restart replaced them), the first 12 named."""
    if not gone:
        return []
    return ["", f"{len(gone)} evaluation(s) of earlier attempts are not in the curve: "
            + "; ".join(dict.fromkeys(f"attempt {g.get('attempt', NA)}, step {g.get('step', NA)}: "
                                      f"{md_cell(g.get('why', ''))}" for g in gone[:12]))
            + (" …" if len(gone) > 12 else "") + " (all in results.json: superseded_evaluations)."]


def _final(c: ReportContext) -> dict[str, Any]:
    """The parser's final values, or the newest evaluation when it gave nothing."""
    final = c.data.final or {}
    if not final and c.evals:
        last = c.evals[-1]
        final = {"step": last.step, "dataset": last.dataset, "metrics": last.metrics}
    return final


def _final_metrics(final: dict[str, Any]) -> dict[str, Any]:
    """The metric values of `final`: its `metrics` map, or (older shape) its numeric top-level keys."""
    given = final.get("metrics")
    if isinstance(given, dict):
        return given
    return {k: v for k, v in final.items() if k not in ("step", "dataset") and number(v) is not None}


def _best_final_row(name: str, f_metrics: dict[str, Any], best: dict[str, Any]) -> list[str]:
    b = best.get(name)
    b_value, b_step = (b.get("value"), b.get("step")) if isinstance(b, dict) else (b, None)
    return [
        code_span(name),
        fmt_value(f_metrics.get(name), name) if name in f_metrics else NA,
        fmt_value(b_value, name) if name in best else NA,
        str(b_step) if b_step is not None else NA,
    ]


def _best_final(c: ReportContext) -> list[str]:
    final = _final(c)
    f_metrics = _final_metrics(final)
    best = c.data.best or {}
    if not f_metrics and not best:
        return ["No final or best values were recorded."]
    lines: list[str] = []
    if final:
        where = f"step {final.get('step', NA)}"
        if final.get("dataset"):
            where += f", dataset {code_span(final.get('dataset'))}"
        lines += [f"Final values are from {where}. Best values are the highest seen, with their step.", ""]
    rows = [_best_final_row(name, f_metrics, best) for name in dict.fromkeys([*f_metrics, *best])]
    return lines + table(["metric", "final", "best", "best at step"], rows)


def _plot(c: ReportContext) -> list[str]:
    if c.plot_note:
        return [f"No plot: {c.plot_note}."]
    return [f"![{CHART_TITLE}]({PLOT_NAME})"]


def _attempts(c: ReportContext) -> list[str]:
    d = c.data
    if not d.attempts:
        return ["The command was never launched."]
    starts = {s.get("attempt"): s for s in d.attempt_starts if isinstance(s, dict)}
    rows = [_attempt_row(a, starts.get(a.number), d.result_dir) for a in d.attempts]
    lines = table(["#", "started", "ended", "duration", "from step", "exit code", "end", "log"], rows)
    lines += _experiment_names(d.attempts)
    checks = [f"- attempt {a.number}: {md_cell(a.gpu_check, 600)}" for a in d.attempts if a.gpu_check]
    if checks:
        lines += ["", "The runner's own GPU check before launch:", "", *checks]
    lines += _environments(d.attempts)
    return lines + _commands(d) + _unscanned(d.attempts)


def _attempt_row(a: AttemptInfo, start: dict[str, Any] | None, result_dir: str) -> list[str]:
    dur = None if a.ended_at is None else a.ended_at - a.started_at
    return [
        str(a.number), fmt_time(a.started_at), fmt_time(a.ended_at) if a.ended_at is not None else "running",
        fmt_duration(dur), _start_cell(a, start),
        NA if a.exit_code is None else str(a.exit_code), md_cell(a.end_reason or NA),
        path_link(a.log_path, result_dir) if a.log_path else NA,
    ]


def _experiment_names(attempts: list[AttemptInfo]) -> list[str]:
    """The experiment names AgentJet logged, each with the attempts that used it."""
    names = list(dict.fromkeys(a.experiment_name for a in attempts if a.experiment_name))
    if not names:
        return []
    return ["", "Experiment name (as AgentJet logged it): " + ", ".join(
        f"{code_span(n)} (attempt{'s' if len(at) > 1 else ''} {', '.join(at)})"
        for n in names for at in [[str(a.number) for a in attempts if a.experiment_name == n]])]


def _commands(d: ReportData) -> list[str]:
    """Each attempt's command file (`logs/attempt-N.command.sh`) as it ran, byte for byte and multi-line:
    one block when every attempt ran the same one."""
    ran = [a for a in d.attempts if a.command]
    if not ran:
        return []
    if len({a.command for a in ran}) == 1:
        which = "every attempt" if len(ran) > 1 else f"attempt {ran[0].number}"
        return ["", f"Command file as run ({which}):", "", *fenced(command_script(ran[0].command), "bash")]
    lines: list[str] = []
    for a in ran:
        lines += ["", f"Command file as run (attempt {a.number}):", "", *fenced(command_script(a.command), "bash")]
    return lines


def _environments(attempts: list[AttemptInfo]) -> list[str]:
    """Which variables each attempt's job started with (names only, never values), and what was held back."""
    lines: list[str] = []
    for a in attempts:
        if not a.env_names and not a.environment:
            continue  # an older record, or an attempt that never started
        lines.append(f"- attempt {a.number}: {len(a.env_names)} variables from {md_cell(a.environment or NA, 300)}: "
                     + md_cell(", ".join(a.env_names), 4000))
        if a.env_withheld:
            lines.append(f"  - held back (the control plane's): {md_cell(', '.join(a.env_withheld), 1000)}")
        lines += [f"  - {md_cell(note, 300)}" for note in a.env_notes]
    return ["", "Environment (variable names the job started with):", "", *lines] if lines else []


def _unscanned(attempts: list[Any]) -> list[str]:
    """Byte ranges of an attempt's log the watcher never scanned, with why: a verdict read from the rest."""
    lines = [f"- attempt {a.number}: bytes {r.get('start')}–{r.get('end')} of its log ({r.get('bytes')} bytes) "
             f"were not scanned: {md_cell(str(r.get('reason') or NA))}"
             for a in attempts for r in (getattr(a, "unscanned", None) or []) if isinstance(r, dict)]
    return ["", "Not scanned (no verdict was read from these bytes):", *lines] if lines else []


def _start_cell(a: AttemptInfo, start: dict[str, Any] | None) -> str:
    """Where training started: `0 (from scratch)`, `4 (resumed …/global_step_4)`, `0 (restarted)`."""
    if a.start_step is None:
        return NA
    how = (start or {}).get("how") or ("resumed" if a.start_step else "from scratch")
    where = f" from {code_span(a.resumed_from)}" if how == "resumed" and a.resumed_from else ""
    return f"{a.start_step} ({md_cell(how)}{where})"


def _nodes(c: ReportContext) -> list[str]:
    """A multi-node run: every node with its rank, GPUs, tmux session and log (rank 0 = the head)."""
    d = c.data
    rows = [_node_row(m, d.result_dir) for m in d.nodes]
    lines = table(["rank", "node", "GPUs", "tmux session", "log (last attempt)", "state"], rows)
    if d.master:
        lines += ["", f"MASTER_ADDR={code_span(d.master.get('master_addr'))}, "
                  f"MASTER_PORT={code_span(d.master.get('master_port'))}, NNODES={d.master.get('nnodes')}; the "
                  "non-head ranks start first, the head's exit decides the outcome."]
    return lines


def _node_row(m: dict[str, Any], result_dir: str) -> list[str]:
    return [str(m.get("rank", "")), md_cell(m.get("node") or NA) + (" (head)" if m.get("rank") == 0 else ""),
            md_cell(",".join(str(g) for g in m.get("gpus") or []) or NA), code_span(m.get("session") or NA),
            path_link(str(m.get("log") or ""), result_dir) if m.get("log") else NA,
            md_cell(m.get("state") or NA)]


def _preflight(c: ReportContext) -> list[str]:
    d = c.data
    return _preflight_changes(d) + _preflight_problems(d) + _preflight_decisions(d)


def _preflight_changes(d: ReportData) -> list[str]:
    """What the preflight changed in the YAML, or why it changed nothing."""
    lines: list[str] = []
    if d.preflight_changes:
        rows = [[code_span(ch.get("key", NA)), code_span(ch.get("old", "(unset)")),
                 code_span(ch.get("new", "(unset)")), md_cell(ch.get("reason", ""))]
                for ch in d.preflight_changes if isinstance(ch, dict)]
        lines += ["Changed before the first launch (the original file is kept):", ""]
        lines += table(["setting", "was", "now", "why"], rows)
    elif d.launcher_hidden:
        lines.append(f"No preflight change applied: {md_cell(d.launcher_hidden, 1000)}.")
    else:
        lines.append("The preflight changed nothing.")
    return lines


def _preflight_problems(d: ReportData) -> list[str]:
    if not d.preflight_problems:
        return []
    return ["", "Problems found:", ""] + [
        f"- **{md_cell(p.get('level', '?'))}** {code_span(p.get('field', '?'))}: {md_cell(p.get('message', ''), 600)}"
        for p in d.preflight_problems if isinstance(p, dict)]


def _preflight_decisions(d: ReportData) -> list[str]:
    """The preflight's decisions that depended on the environment (a variable set or not)."""
    decisions = [x for x in (d.preflight_env or {}).get("decisions", []) if isinstance(x, dict)]
    if not decisions:
        return []
    where = md_cell((d.preflight_env or {}).get("environment", "") or NA)
    return ["", f"Decisions that read the environment ({where}):", ""] + [
        f"- {code_span(x.get('variable', '?'))} {'set' if x.get('is_set') else 'not set'}: "
        f"{md_cell(x.get('decision', ''))}" for x in decisions]


def _repairs(c: ReportContext) -> list[str]:
    d = c.data
    if not d.repairs:
        return [f"No failures. (The full trial-and-error record is in [{REPAIR_LOG_NAME}]({REPAIR_LOG_NAME}).)"]
    rows = [[str(i), fmt_time(r.at), str(r.attempt), code_span(r.signature or "unknown"),
             md_cell("; ".join(r.changes) or NA), md_cell(r.source or NA), md_cell(r.result or NA),
             md_cell(repair_next(d, r))] for i, r in enumerate(d.repairs, 1)]
    lines = [f"Details, log excerpts and diffs: [{REPAIR_LOG_NAME}]({REPAIR_LOG_NAME}).", ""]
    lines += table(["#", "when", "attempt", "diagnosis", "change", "source", "result", "next"], rows)
    return lines + _not_done(d)


def _not_done(d: ReportData) -> list[str]:
    """What a repair considered and could not do (a proxychains the node lacks, a YAML change a script would
    not receive), one line each: the reader of the report sees why the fix they expected is missing."""
    lines = [f"- failure {i}: {md_cell(line, 600)}" for i, r in enumerate(d.repairs, 1) for line in r.skipped
             if "was already applied" not in line]
    return ["", "Considered and not done:", "", *lines] if lines else []


def _timeline(c: ReportContext) -> list[str]:
    entries = [h for h in c.data.history if isinstance(h, dict)]
    if not entries:
        return ["No lifecycle transitions were recorded."]
    origin = finite(c.data.created_at)
    if origin is None:
        origin = finite(entries[0].get("at"))
    rows = []
    for h in entries:
        at = finite(h.get("at"))
        since = fmt_duration(at - origin) if at is not None and origin is not None else NA
        rows.append([fmt_time(h.get("at")), since, md_cell(f"{h.get('from', '?')} → {h.get('to', '?')}"),
                     md_cell(h.get("trigger", "")), md_cell(h.get("attempt", "")), md_cell(h.get("reason", ""))])
    return table(["time", "since created", "transition", "trigger", "attempt", "reason"], rows)


def _log_tail(c: ReportContext) -> list[str]:
    lines = [clean(line).rstrip()[:1000] for line in c.data.log_tail[-LOG_TAIL_LINES:]]
    if not lines:
        return ["No log lines were captured."]
    last = c.data.attempts[-1] if c.data.attempts else None
    where = f" of attempt {last.number} ({path_link(last.log_path, c.data.result_dir)})" if last else ""
    return [f"Last {len(lines)} lines{where}:", "", *fenced("\n".join(lines))]


def repair_summary(data: ReportData) -> str:
    """`2 failures, 1 relaunched after a repair` (a failure is not always followed by a repair)."""
    failures = len(data.repairs)
    if not failures:
        return "no failures"
    relaunched = sum(1 for r in data.repairs if r.relaunched)
    return f"{failures} failure{'s' if failures != 1 else ''}, {relaunched} relaunched after a repair"


def repair_next(data: ReportData, record: RepairRecord) -> str:
    """The record's own `next`, else what the following attempt did, else how the experiment ended."""
    if record.next.strip():
        return md_cell(record.next, 1000)
    following = next((a for a in data.attempts if a.number == record.attempt + 1), None)
    if following is not None:
        return f"attempt {following.number}: {md_cell(following.end_reason or 'still running')}"
    return f"no further attempt; the experiment ended {md_cell(data.outcome or 'unknown')}"


def _section(title: str, render: Callable[[ReportContext], list[str]], c: ReportContext) -> list[str]:
    try:
        body = render(c)
    except Exception as exc:  # noqa: BLE001 - a report with one broken section beats no report
        body = [f"_This section could not be rendered ({type(exc).__name__}: {clean(exc)[:300]})._"]
    return [f"## {title}", "", *body, ""]


def render_report(data: ReportData, evals: list[Eval], plot_note: str, now: float | None = None) -> str:
    c = ReportContext(data=data, evals=evals, now=time.time() if now is None else now, plot_note=plot_note)
    parts = [f"# Experiment report: {md_cell(data.id)}", ""]
    for title, render in (
        ("Summary", _summary),
        ("Evaluations", _evaluations),
        ("Best and final values", _best_final),
        ("Reward plot", _plot),
        ("Attempts", _attempts),
        *((("Nodes", _nodes),) if data.nodes else ()),
        ("Preflight", _preflight),
        ("Repairs", _repairs),
        ("Lifecycle timeline", _timeline),
        ("Log tail", _log_tail),
    ):
        parts += _section(title, render, c)
    parts.append(f"_Written by ajet-runner at {fmt_time(c.now)}; machine-readable copy: [{RESULTS_NAME}]"
                 f"({RESULTS_NAME})._")
    return "\n".join(parts) + "\n"
