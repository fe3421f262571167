"""`ajet-runner catalogue …`: the site's catalogue extension and the adviser's suggestions."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from ajet_runner.cli.commands import output
from ajet_runner.store.settings import get_settings

catalogue_app = typer.Typer(help="The failure catalogue: site extension and suggested entries.",
                            no_args_is_help=True)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        typer.echo(f"ajet-runner catalogue: cannot read {path}: {exc}", err=True)
        raise typer.Exit(2) from None
    return [e for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []


def _change_text(action: dict[str, Any]) -> str:
    kind = action.get("kind", "?")
    if kind in ("set_yaml", "set_env"):
        return f"{kind} {action.get('key')} = {json.dumps(action.get('value'))}"
    if kind == "unset_yaml":
        return f"unset_yaml {action.get('key')}"
    return f"{kind} {action.get('value')}"


@catalogue_app.command("suggestions", epilog="Example: ajet-runner catalogue suggestions --json")
def suggestions(
    file: Annotated[Path | None, typer.Option("--file", help="the suggestions file (default: "
                                              "AJET_RUNNER_CATALOGUE_SUGGESTIONS or ~/.local/share/...)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the entries as JSON")] = False,
) -> None:
    """List catalogue entries suggested by advised repairs that led to a completed run."""
    path = file or get_settings().suggestions_path()
    entries = _read(path)
    if as_json:
        typer.echo(json.dumps({"file": str(path), "suggestions": entries}, ensure_ascii=False, indent=2,
                              default=str))
        return
    console = output.console()
    if not entries:
        console.print(f"No suggestions in {path}.", markup=False, highlight=False)
        return
    console.print(f"{len(entries)} suggestion(s) in {path}:", markup=False, highlight=False)
    for e in entries:
        origin = e.get("suggested") or {}
        console.print("")
        console.print(f"{e.get('id')}  (advised by {origin.get('by', '?')} for experiment "
                      f"{origin.get('experiment', '?')}, {origin.get('at', '?')})", markup=False, highlight=False)
        console.print(f"  signature: {origin.get('signature_text', '')}", markup=False, highlight=False)
        console.print(f"  pattern:   {', '.join(e.get('patterns') or [])}", markup=False, highlight=False)
        console.print(f"  cause:     {e.get('explanation', '')}", markup=False, highlight=False)
        for action in e.get("repair") or []:
            console.print(f"  change:    {_change_text(action)}", markup=False, highlight=False)
        if origin.get("rationale"):
            console.print(f"  rationale: {origin['rationale']}", markup=False, highlight=False)
    console.print("")
    console.print("To adopt one, copy its entry into the YAML list named by AJET_RUNNER_CATALOGUE_EXTRA "
                  "and restart the workers.", markup=False, highlight=False)


@catalogue_app.command("check", epilog="Example: ajet-runner catalogue check site-catalogue.yaml")
def check(path: Annotated[Path, typer.Argument(help="a site catalogue extension (YAML list of entries)")]) -> None:
    """Validate a catalogue extension the way a worker does at start-up."""
    from ajet_runner.statemachine.failures.signatures import load_extension

    if not path.is_file() or not os.access(path, os.R_OK):
        why = "cannot read it" if path.is_file() else "no such file"
        typer.echo(f"ajet-runner catalogue check: {path}: {why}", err=True)
        raise typer.Exit(2)  # unreadable input, as everywhere; an invalid catalogue is 1
    try:
        sigs = load_extension(path)
    except ValueError as exc:
        typer.echo(f"ajet-runner catalogue check: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{path}: {len(sigs)} valid entr{'y' if len(sigs) == 1 else 'ies'}: "
               + ", ".join(s.id for s in sigs))


def register(app: typer.Typer) -> None:
    app.add_typer(catalogue_app, name="catalogue")
