"""`ajet-runner check BLUEPRINT [--json]`: can this blueprint run here, and what would change?

JSON contract (tests pin it): {"blueprint": {the 8 parts, with exp_max_time_seconds},
"problems": [{"level", "field", "message"}], "config_changes": [{"key", "old", "new",
"reason"}], "environment": "<whose environment was read>", "env_decisions": [{"variable",
"is_set", "decision"}], "swarm": {"server_command", "port"} or null for a classic experiment, "command_file":
the exact script the first attempt would run (`logs/attempt-1.command.sh`) or null when the command is refused,
"sweep": the experiments a sweep expands into (`[exp_sweep]`, `--sweep KEY=V1,V2`) or null,
"runs_on": {"executor": "ssh"|"local", "host": the ssh host the blueprint names or null, "from": where it says so}}.
Exit code 0 when the blueprint is runnable (no error), 1 when it has errors, 2 when
it cannot be read. `-` reads the blueprint from stdin.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ajet_runner.cli.commands import output
from ajet_runner.statemachine.blueprint import load_blueprint, parse_blueprint
from ajet_runner.statemachine.check_document import check_document
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.models import Problem

SUBMITTING_ENV = "this shell (the submitting environment; a worker reads its node's own)"


def _load(path: Path) -> tuple[Any, list[Problem]]:
    """`load_blueprint`, or for `-` the blueprint text on stdin."""
    if str(path) != "-":
        return load_blueprint(path)
    return parse_blueprint(sys.stdin.read()), []  # the preflight validates it


def check_report(path: Path, sweep: list[str] | None = None) -> tuple[dict[str, Any], bool]:
    """The `check --json` document for a blueprint file, and whether it is runnable.

    It runs the very preflight a worker runs before launching (`ajet_runner.statemachine.preflight.preflight`),
    on this shell's environment; `env_decisions` lists every decision that read a variable.
    """
    bp, problems = _load(path)
    return check_document(bp, problems, env=os.environ, environment=SUBMITTING_ENV, sweep=sweep or ())


def _render(doc: dict[str, Any], runnable: bool, path: Path, console: Console) -> None:
    bp = doc["blueprint"]
    unreadable = any(p["field"] == "blueprint" for p in doc["problems"])
    table = Table(title=f"Blueprint {path}", title_justify="left", show_header=False, expand=False)
    table.add_column("part", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in bp.items():
        if key == "exp_max_time_seconds":
            shown = format_limit(value) if value is not None else ""
            table.add_row("exp_max_time", shown or "[red]missing[/red]")
        elif key == "notes":
            first = value.strip().splitlines()
            table.add_row("notes", (first[0] + (" …" if len(first) > 1 else "")) if first else "-")
        else:
            table.add_row(key, value or "[red]missing[/red]")
    if not unreadable:
        console.print(table)
    if doc["problems"]:
        console.print("[bold]Problems[/bold]")
        for p in doc["problems"]:
            colour = "red" if p["level"] == "error" else "yellow"
            line = f"  [{colour}]{p['level']}[/{colour}] {p['field']}: {p['message']}"
            console.print(line, highlight=False)
    if doc["config_changes"]:
        console.print("[bold]Changes the runner will make before launching[/bold]")
        for c in doc["config_changes"]:
            console.print(f"  [cyan]{c['key']}[/cyan]: {json.dumps(c['old'], ensure_ascii=False)} -> "
                          f"{json.dumps(c['new'], ensure_ascii=False)}", highlight=False)
            console.print(f"    [dim]{c['reason']}[/dim]", highlight=False)
    if doc.get("env_decisions"):
        console.print(f"[bold]Decisions that read the environment[/bold] ({doc['environment']})")
        for d in doc["env_decisions"]:
            console.print(f"  {d['variable']} {'set' if d['is_set'] else 'not set'}: {d['decision']}", highlight=False)
    if doc.get("swarm"):
        console.print(f"[bold]Swarm server[/bold] (port {doc['swarm'].get('port')}), started by the runner:")
        console.print(Padding(Text(doc["swarm"].get("server_command") or ""), (0, 0, 0, 4)))
    if doc.get("command_file") is not None:
        what = "the client" if doc.get("swarm") else "the launch command"
        console.print(f"[bold]Command file[/bold] (logs/attempt-1.command.sh, {what}; node-specific changes such as "
                      "GPU flags may still be added at launch):")
        console.print(Padding(Text(doc["command_file"].rstrip("\n")), (0, 0, 0, 4)))
    elif not unreadable:
        console.print("[bold]Command file[/bold]: none (the launch command is refused or missing, see above)")
    if doc.get("sweep"):
        _render_sweep(doc["sweep"], console)
    _render_where(doc.get("runs_on") or {}, unreadable, console)
    verdict = "[green]runnable[/green]" if runnable else "[red]not runnable: fix the errors above[/red]"
    console.print(f"Verdict: {verdict}")


def _render_where(where: dict[str, Any], unreadable: bool, console: Console) -> None:
    if unreadable:
        return
    if where.get("host"):
        console.print(f"[bold]Runs on[/bold]: ssh host {where['host']} (from {where.get('from')}); the blueprint's "
                      "paths are that host's paths", highlight=False)
    else:
        console.print("[bold]Runs on[/bold]: this machine (`ajet-runner run`), or the worker that takes it")


def _render_sweep(sweep: dict[str, Any], console: Console) -> None:
    experiments = sweep.get("experiments") or []
    shape = " x ".join(f"{len(a['values'])} {a['key']}" for a in sweep.get("axes") or [])
    console.print(f"[bold]Sweep[/bold]: {len(experiments)} experiment(s) ({shape}), submitted as one stage; each "
                  "gets its values on the runner's copy of the YAML, its own experiment name and result dir:",
                  highlight=False)
    table = Table(show_header=True, expand=False, box=None, pad_edge=False)
    table.add_column("#", justify="right")
    table.add_column("values", overflow="fold")
    table.add_column("result dir", overflow="fold")
    for m in experiments:
        table.add_row(str(m["index"] + 1), m["label"], m["result_dir"])
    console.print(Padding(table, (0, 0, 0, 2)))


def register(app: typer.Typer) -> None:
    """Add `check` to the CLI."""

    @app.command("check", epilog="Example: ajet-runner check blueprint_1.md --json")
    def check(
        blueprint: Path = typer.Argument(..., help="The blueprint markdown file (- reads it from stdin)."),
        as_json: bool = typer.Option(False, "--json", help="Print the machine-readable report."),
        sweep: list[str] = typer.Option(None, "--sweep", metavar="KEY=V1,V2",
                                        help="Show the expansion of a sweep (as `submit --sweep`; repeatable)."),
    ) -> None:
        """Parse and validate a blueprint; list its problems and the config changes planned."""
        doc, runnable = check_report(blueprint, list(sweep or []))
        unreadable = any(p["field"] == "blueprint" for p in doc["problems"])
        if as_json:
            typer.echo(json.dumps(doc, ensure_ascii=False, indent=2))
        elif unreadable:  # an error about the input, not a finding about the blueprint: stderr
            for p in doc["problems"]:
                output.err(f"error: {p['message']}")
        else:
            _render(doc, runnable, blueprint, output.console())
        raise typer.Exit(2 if unreadable else 0 if runnable else 1)  # 2: missing input, as for every command
