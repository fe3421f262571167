"""`ajet-runner diagnose LOGFILE`: name the failure in an AgentJet log and the repair plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from rich.console import Console
from rich.text import Text

from ajet_runner.cli.commands import output
from ajet_runner.cli.commands.start_checks import install_site_catalogue
from ajet_runner.statemachine.failures.diagnose import LogDiagnosis, LogScanner
from ajet_runner.statemachine.models import Finding

CHUNK = 1 << 20


def scan_stream(fh: BinaryIO) -> LogDiagnosis:
    """Stream bytes through a LogScanner: constant memory for multi-GB logs."""
    scanner = LogScanner(tail_lines=1)
    while chunk := fh.read(CHUNK):
        scanner.feed(chunk)
    scanner.close()
    return scanner.diagnosis()


def scan_file(path: Path) -> LogDiagnosis:
    with path.open("rb") as fh:
        return scan_stream(fh)


def to_json(diagnosis: LogDiagnosis, log: Path) -> dict[str, Any]:
    """The pinned JSON shape: findings in log order, completed_run, and the cause's id."""
    cause = diagnosis.cause
    return {
        "log": str(log),
        "completed_run": diagnosis.completed_run,
        "cause": cause.signature if cause else None,
        "line_count": diagnosis.line_count,
        "findings": [
            {**f.model_dump(mode="json"), "count": diagnosis.counts.get(f.signature, 1)}
            for f in diagnosis.findings
        ],
    }


def _describe_action(action: dict[str, Any]) -> str:
    kind, key, value = action["kind"], action.get("key"), action.get("value")
    minimum, requires = action.get("minimum"), action.get("requires")
    if kind == "set_yaml" and action.get("factor") is not None:
        change = f"{key} x {action['factor']}" + (f" (min {minimum:g})" if minimum else "")
    elif kind in ("set_yaml", "set_env"):
        change = f"{key} = {value}"
    elif kind == "prefix_command":
        change = f"prefix the command with {value!r}" + (f" if {requires} is installed" if requires else "")
    elif kind == "cleanup":
        change = f"clean up {value}"
    else:
        change = f"{value}"
    note = action.get("description") or ""
    return f"{kind}: {change}" + (f" — {note}" if note else "")


def _print(diagnosis: LogDiagnosis, log: Path, console: Console) -> None:
    cause: Finding | None = diagnosis.cause
    console.print(Text.assemble((str(log), "bold"), f": {diagnosis.line_count} lines"), highlight=False)
    if diagnosis.completed_run:
        console.print(f"[green]The run completed[/green] (line {diagnosis.completed_line}).")
    if cause is None:
        if not diagnosis.completed_run:
            console.print("[yellow]No known failure signature and no successful end: still running, hung, "
                          "or killed from outside.[/yellow]")
    else:
        console.print(Text.assemble((f"Cause: {cause.signature}", "bold red"), f" at line {cause.line}"))
        console.print(f"  {cause.text}", markup=False, highlight=False)
        console.print(f"  {cause.explanation}", markup=False, highlight=False)
        if cause.repairable:
            console.print("[bold]Repair plan:[/bold]")
            for i, action in enumerate(cause.repair, 1):
                line = f"  {i}. {_describe_action(action.model_dump())}"
                console.print(line, markup=False, highlight=False)
        else:
            console.print("[bold]Not repairable by the runner[/bold]: a person has to act.")
    if diagnosis.findings:
        console.print(Text("Findings (log order)", style="bold"))
        output.print_table(("line", "signature", "fatal", "seen", "text"), (
            (f.line, f.signature, "yes" if f.fatal else "no", diagnosis.counts.get(f.signature, 1), f.text[:160])
            for f in diagnosis.findings), console=console if console.is_terminal else None, shrink=("text",))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the CLI."""

    @app.command("diagnose", epilog="Example: ajet-runner diagnose results/logs/attempt-1.log")
    def diagnose(
        logfile: Annotated[Path, typer.Argument(help="An AgentJet log (tmux pipe-pane or launcher output); - reads "
                                                "it from stdin.")],
        as_json: Annotated[bool, typer.Option("--json", help="Print the diagnosis as JSON.")] = False,
    ) -> None:
        """Name the failure in a log (first fatal signature) and the plan to repair it."""
        piped = str(logfile) == "-"
        if not piped and not logfile.is_file():
            typer.echo(f"ajet-runner diagnose: no such log file: {logfile}", err=True)
            raise typer.Exit(code=2)
        install_site_catalogue("diagnose")
        try:
            diagnosis = scan_stream(sys.stdin.buffer) if piped else scan_file(logfile)
        except OSError as exc:
            typer.echo(f"ajet-runner diagnose: cannot read {logfile}: {exc.strerror or exc}", err=True)
            raise typer.Exit(code=2) from None
        if as_json:
            typer.echo(json.dumps(to_json(diagnosis, logfile), ensure_ascii=False, indent=2))
        else:
            _print(diagnosis, logfile, output.console())
