"""`ajet-runner results PATH [--json]`: what a validation file (or a result dir) says.

JSON contract: {"evaluations": [{"step", "dataset", "metrics"}], "final", "best", "skipped",
plus "baseline", "primary_dataset", "datasets", "format", "files"}. Non-finite metric values
(nan, inf) are written as null so the output stays strict JSON.
Exit codes: 0 with results, 1 when the path holds no validation result, 2 when it does not exist.

A result dir the runner collected holds `results.json`: its evaluations, final and best are the
report's, shown as they are (`files` names it), so `results` and the report always agree. Without
it (a run still going, a dir from elsewhere) the same sources are read in the same order as the
report reads them: the validation files found in the dir, then every attempt's console log
(`logs/attempt-N.log`; a later attempt's step wins) filling the steps the files lack.

PATH may also be a console log: AgentJet versions that write no results file print verl's
`step:N - TGC@1:... - mean_reward:... - ...` validation rows and `Initial/Final validation metrics:
{...}`, which the same parser the worker uses reads (`format`: `console`).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ajet_runner.cli.commands import output
from ajet_runner.resultdir.names import RESULTS_NAME
from ajet_runner.statemachine.logs.metrics import merge_file_and_log, parse_log_lines
from ajet_runner.statemachine.logs.results import ResultSummary, find_result_files, parse_val_files, summarize
from ajet_runner.statemachine.metric_vocabulary import (
    NUM_ALL_SUCCESS_TASKS,
    NUM_PASS_N_TASKS,
    TABLE_FIRST,
    TOTAL_TASKS,
    rates_by_k,
    short_label,
)
from ajet_runner.statemachine.models import Evaluation

_COUNTS = (NUM_PASS_N_TASKS,)


def _columns(summary: ResultSummary) -> list[str]:
    """The metrics worth a column: reward, pass rates by k, then task counts; otherwise the first few."""
    present: dict[str, None] = {}
    for ev in summary.evaluations:
        present.update(dict.fromkeys(ev.metrics))
    cols = [n for n in TABLE_FIRST if n in present] + rates_by_k(present) + [n for n in _COUNTS if n in present]
    return cols or list(present)[:6]


def _header(metric: str) -> str:
    """Short column titles so a 10-column table fits 80 characters; the legend names them."""
    return short_label(metric)


def _delta(new: float, old: float) -> str:
    diff = new - old
    if not math.isfinite(diff):
        return str(diff)
    return f"{int(diff):+d}" if new.is_integer() and old.is_integer() else f"{diff:+.4f}"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) >= 1:
        return str(int(value))
    return f"{value:.4f}"


def _render(summary: ResultSummary, console: Console) -> None:
    """The evaluations as a table on a terminal; into a pipe, tab-separated lines under a header line."""
    cols = _columns(summary)
    legend = ", ".join(f"{_header(c)} = {c}" for c in cols if _header(c) != c)
    headers, rows = _table_rows(summary, cols)
    if not console.is_terminal:
        output.print_table(headers, rows)
        if legend:
            console.print(Text(legend), soft_wrap=True)
    else:
        console.print(_rich_table(headers, rows, legend))
    if summary.final:
        _render_final(summary, cols, console)
    if summary.best:
        console.print(Text("best", style="bold"))
        for name, best in summary.best.items():  # a metric's name is the trainer's text, never markup
            console.print(Text(f"  {name}: {_fmt(best['value'])} at step {best['step']}"))
    if summary.skipped:
        console.print(f"[yellow]{summary.skipped} truncated or unreadable record(s) skipped[/yellow]")


def _table_rows(summary: ResultSummary, cols: list[str]) -> tuple[list[str], list[list[str]]]:
    """The header and a row per evaluation (a dataset column when there are several)."""
    several = len(summary.datasets) > 1
    headers = ["step", *(["dataset"] if several else []), *(_header(c) for c in cols)]
    rows = [[str(ev.step), *([ev.dataset or "-"] if several else []), *(_fmt(ev.metrics.get(c)) for c in cols)]
            for ev in summary.evaluations]
    return headers, rows


def _rich_table(headers: list[str], rows: list[list[str]], legend: str) -> Table:
    table = Table(title="Validation results", title_justify="left", caption=Text(legend) if legend else None)
    table.caption_justify = "left"
    for name in headers:  # a header is a metric's name (the trainer's text): Text, never markup
        if name == "dataset":
            table.add_column(Text(name), overflow="fold")
        else:
            table.add_column(Text(name), justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(v) for v in row))
    return table


def _render_final(summary: ResultSummary, cols: list[str], console: Console) -> None:
    """The final evaluation's values, each with its change since the baseline evaluation."""
    final = summary.final or {}
    where = f" ({summary.primary_dataset})" if summary.primary_dataset else ""
    console.print(Text.assemble(("final", "bold"), f" step {final['step']}{where}"))
    baseline = summary.baseline or {}
    base = baseline.get("metrics", {})
    for col in cols + [c for c in (NUM_ALL_SUCCESS_TASKS, TOTAL_TASKS) if c not in cols]:
        value = final["metrics"].get(col)
        if value is None:
            continue
        change = ""
        if col in base and baseline.get("step") != final["step"]:
            change = f"  ({_delta(value, base[col])} since step {baseline['step']})"
        console.print(Text(f"  {col}: {_fmt(value)}{change}"))


def results(
    path: Path = typer.Argument(..., help="A validation result file or console log (- reads it from stdin), or a "
                                "result dir to search."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Show the validation results of a run: every evaluation, the final and the best values."""
    if str(path) == "-":
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ajet-results-") as tmp:
            piped = Path(tmp) / "stdin"
            piped.write_bytes(sys.stdin.buffer.read())
            _results(piped, as_json, shown_as="-")
        return
    _results(path, as_json)


def _results(path: Path, as_json: bool, shown_as: str = "") -> None:
    name = shown_as or str(path)
    if not path.exists():
        typer.echo(f"error: {path}: no such file or directory", err=True)
        raise typer.Exit(2)
    summary, files = _read(path)
    if not summary.evaluations:
        typer.echo(f"error: {name}: no validation result file (classic dict lines, '## Step N' blocks) and no "
                   "console validation lines (verl's 'step:N - ...' rows, 'Initial/Final validation metrics')",
                   err=True)
        raise typer.Exit(1)
    if shown_as:
        files = _named_as(summary, files, path, shown_as)
    if as_json:
        typer.echo(summary.model_dump_json(indent=2))
        return
    console = output.console()
    if len(files) > 1 or path.is_dir():
        console.print(Text("files: " + ", ".join(str(f) for f in files)), soft_wrap=True)
    _render(summary, console)


def _read(path: Path) -> tuple[ResultSummary, list[Path]]:
    """A collected run's results.json, else what the report would read; with the files read."""
    collected = path / RESULTS_NAME if path.is_dir() else None
    if collected is not None and collected.is_file():
        return _from_results_json(collected), [collected]
    return _from_sources(path)


def _named_as(summary: ResultSummary, files: list[Path], path: Path, shown_as: str) -> list[Path]:
    """stdin: named as the user did, not by the temporary copy (in the summary and in the files)."""
    summary.files = [shown_as if f == str(path) else f for f in summary.files]
    return [Path(shown_as) if f == path else f for f in files]


def _file_summary(path: Path, files: list[Path]) -> ResultSummary | None:
    """The validation files' evaluations; None without any (one file without any is a log, not a results file)."""
    if not files:
        return None
    summary = parse_val_files(files, root=path if path.is_dir() else "")
    return None if path.is_file() and not summary.evaluations else summary


def _from_sources(path: Path) -> tuple[ResultSummary, list[Path]]:
    """What the report reads, in its order: the validation files, then the attempts' console logs."""
    files = find_result_files(path)
    logs = sorted(_head_logs(path), key=_attempt_number) if path.is_dir() else [path]
    file_summary = _file_summary(path, files)
    log_summary = _console(logs)
    summary = merge_file_and_log(file_summary, log_summary)
    if log_summary is not None and log_summary.evaluations:
        files = [*(files if file_summary is not None else []), *(p for p in logs if p not in files)]
        summary.files = [str(f) for f in files]
    return summary, files


def _number(value: Any) -> float:
    """A metric as results.json holds it: a number, or null for a non-finite value (read as nan)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def _from_results_json(path: Path) -> ResultSummary:
    """The report's own evaluations, final and best (an unreadable file: no evaluations, exit 1 with its name)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        typer.echo(f"error: {path}: unreadable ({exc})", err=True)
        raise typer.Exit(1) from None
    evaluations = [e for row in _stored_rows(doc) if (e := Evaluation.from_json(row)) is not None]
    summary = summarize(evaluations)
    summary.final = doc.get("final") or summary.final
    summary.best = doc.get("best") or summary.best
    summary.files = [str(path)]
    return summary


def _stored_rows(doc: Any) -> list[dict[str, Any]]:
    """results.json's evaluation rows that have a step, their metrics as numbers (null read as nan)."""
    rows = doc.get("evaluations") if isinstance(doc, dict) else None
    return [{**row, "metrics": {str(k): _number(v) for k, v in (row.get("metrics") or {}).items()}}
            for row in rows or [] if isinstance(row, dict) and isinstance(row.get("step"), int)]


def _attempt_number(path: Path) -> int:
    """N of `attempt-N.log`, and of a multi-node run's `attempt-N-rank0.log`."""
    match = re.match(r"attempt-(\d+)", path.name)
    return int(match.group(1)) if match else 0


def _head_logs(result_dir: Path) -> list[Path]:
    """Every attempt's log; of a multi-node run only the head's (rank 0): the other ranks do not train."""
    return [p for p in result_dir.glob("logs/attempt-*.log") if not re.search(r"-rank[1-9]\d*\.log$", p.name)]


def _console(logs: list[Path]) -> ResultSummary | None:
    """Console evaluations of the logs in order (a later attempt's step wins); None when there are none."""
    merged: dict[int, Evaluation] = {}
    last: ResultSummary | None = None
    for log in logs:
        try:
            with open(log, encoding="utf-8", errors="replace") as fh:
                part = parse_log_lines(fh)
        except OSError:
            continue
        merged.update((e.step, e) for e in part.evaluations)
        last = part
    if last is None or not merged:
        return None
    return summarize([merged[k] for k in sorted(merged)], fmt="console")


def _group() -> None:
    """Keeps `ajet-runner results PATH` a subcommand even while it is the only command."""


def register(app: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    if app.registered_callback is None:  # a lone typer command would otherwise become the root
        app.callback()(_group)
    app.command("results", epilog="Example: ajet-runner results runs/demo/results --json")(results)
