"""`ajet-runner check BLUEPRINT [--json]`: can this blueprint run here, and what would change?

JSON contract (tests pin it): {"blueprint": {the 8 parts, with exp_max_time_seconds},
"problems": [{"level", "field", "message"}], "config_changes": [{"key", "old", "new",
"reason"}], "swarm": {"server_command", "port"} or null for a classic experiment}.
Exit code 0 when the blueprint is runnable (no error), 1 when it has errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from statemachine.blueprint import load_blueprint
from statemachine.durations import format_duration
from statemachine.models import Blueprint, ConfigChange, Level, Problem
from statemachine.swarm import swarm_problems, swarm_spec

_SEVERITY = {Level.warning: 1, Level.error: 2}


def _read_yaml_text(bp: Blueprint, problems: list[Problem]) -> str | None:
    """The YAML text when validation found nothing wrong with the file itself."""
    if any(p.field == "exp_yaml_path" and p.level == Level.error for p in problems):
        return None
    path = bp.yaml_abspath()
    if not os.path.isabs(path) or not os.path.isfile(path):
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _merge(own: list[Problem], extra: list[Problem]) -> list[Problem]:
    """Add the preflight's problems, minus those a field already has at the same or a worse level."""
    worst: dict[str, int] = {}
    for p in own:
        worst[p.field] = max(worst.get(p.field, 0), _SEVERITY[p.level])
    merged = list(own)
    for p in extra:
        if _SEVERITY[p.level] > worst.get(p.field, 0) and p not in merged:
            merged.append(p)
    return merged


def _preflight(bp: Blueprint, problems: list[Problem]) -> tuple[list[ConfigChange], list[Problem]]:
    """The config changes the runner would make, from the preflight plan (if it can be made)."""
    yaml_text = _read_yaml_text(bp, problems)
    if yaml_text is None:
        return [], problems
    try:
        from statemachine.preflight import plan_preflight
    except ImportError:
        # TODO(lead): statemachine/preflight.py is missing from this tree; config_changes stays [].
        return [], problems
    plan = plan_preflight(bp, yaml_text)
    return [*plan.command_changes, *plan.changes], _merge(problems, plan.problems)


def check_report(path: Path) -> tuple[dict[str, Any], bool]:
    """The `check --json` document for a blueprint file, and whether it is runnable."""
    bp, problems = load_blueprint(path)
    changes: list[ConfigChange] = []
    if not any(p.field == "blueprint" for p in problems):
        changes, problems = _preflight(bp, problems)
    spec = swarm_spec(bp, _read_yaml_text(bp, problems)) if bp.exp_yaml_path or bp.exp_swarm_server else None
    if spec is not None and not bp.exp_swarm_server:
        problems = _merge(problems, swarm_problems(bp, spec))
    runnable = not any(p.level == Level.error for p in problems)
    doc = {
        "blueprint": bp.public(),
        "problems": [p.model_dump(mode="json") for p in problems],
        "config_changes": [c.model_dump(mode="json") for c in changes],
        "swarm": spec.public() if spec is not None else None,
    }
    return doc, runnable


def _render(doc: dict[str, Any], runnable: bool, path: Path, console: Console) -> None:
    bp = doc["blueprint"]
    unreadable = any(p["field"] == "blueprint" for p in doc["problems"])
    table = Table(title=f"Blueprint {path}", title_justify="left", show_header=False, expand=False)
    table.add_column("part", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in bp.items():
        if key == "exp_max_time_seconds":
            shown = f"{format_duration(value)} ({value:g} s)" if value is not None else ""
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
    verdict = "[green]runnable[/green]" if runnable else "[red]not runnable: fix the errors above[/red]"
    console.print(f"Verdict: {verdict}")


def register(app: typer.Typer) -> None:
    """Add `check` to the CLI."""

    @app.command("check")
    def check(
        blueprint: Path = typer.Argument(..., help="The blueprint markdown file."),
        as_json: bool = typer.Option(False, "--json", help="Print the machine-readable report."),
    ) -> None:
        """Parse and validate a blueprint; list its problems and the config changes planned."""
        doc, runnable = check_report(blueprint)
        if as_json:
            typer.echo(json.dumps(doc, ensure_ascii=False, indent=2))
        else:
            _render(doc, runnable, blueprint, Console())
        raise typer.Exit(0 if runnable else 1)
