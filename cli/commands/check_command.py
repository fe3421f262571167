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
from rich.text import Text

from ajet_runner.cli.commands import output
from ajet_runner.statemachine.blueprint.check_document import check_document
from ajet_runner.statemachine.blueprint.parse import load_blueprint, parse_blueprint
from ajet_runner.statemachine.blueprint.sweep import MAX_EXPERIMENTS
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.models import Level, Problem

SUBMITTING_ENV = "this shell (the submitting environment; a worker reads its node's own)"


def _load(path: Path) -> tuple[Any, list[Problem]]:
    """`load_blueprint`, or for `-` the blueprint text on stdin."""
    if str(path) != "-":
        return load_blueprint(path)
    return parse_blueprint(sys.stdin.read()), []  # the preflight validates it


def check_report(path: Path, sweep: list[str] | None = None, max_experiments: int | None = None
                 ) -> tuple[dict[str, Any], bool]:
    """The `check --json` document for a blueprint file, and whether it is runnable.

    It runs the very preflight a worker runs before launching (`ajet_runner.statemachine.fixes.preflight.preflight`),
    on this shell's environment; `env_decisions` lists every decision that read a variable.
    """
    bp, problems = _load(path)
    doc, runnable = check_document(bp, problems, env=os.environ, environment=SUBMITTING_ENV, sweep=sweep or (),
                                   max_experiments=max_experiments or MAX_EXPERIMENTS)
    return _check_host(doc, runnable)


def _check_host(doc: dict[str, Any], runnable: bool) -> tuple[dict[str, Any], bool]:
    """An ssh host this shell's ssh config cannot reach by its name is an error here, as `run` refuses it
    (the lookup is the ssh adapter's: the state machine stays pure)."""
    host = (doc.get("runs_on") or {}).get("host")
    if not host:
        return doc, runnable
    from ajet_runner.store.settings import get_settings
    from ajet_runner.workers.executors.ssh_hosts import unknown_host

    unknown = unknown_host(host, get_settings().ssh_config)
    if not unknown:
        return doc, runnable
    doc["problems"].append(Problem(level=Level.error, field="exp_host", message=unknown).model_dump(mode="json"))
    return doc, False


def _heading(console: Console, title: str, rest: str = "") -> None:
    """A bold title and plain text after it; the text (user text, file names) is never read as markup."""
    console.print(Text.assemble((title, "bold"), rest), highlight=False)


def _block(console: Console, text: str) -> None:
    """Text indented by 4: folded with its indent on a terminal, whole unpadded lines into a pipe."""
    if console.is_terminal:
        console.print(Padding(Text(text), (0, 0, 0, 4)))
        return
    for line in text.splitlines():
        console.print(Text(f"    {line}"), soft_wrap=True, highlight=False)


def _fields(doc: dict[str, Any]) -> list[tuple[str, str]]:
    fields = []
    for key, value in doc["blueprint"].items():
        if key == "exp_max_time_seconds":
            fields.append(("exp_max_time", (format_limit(value) if value is not None else "") or "missing"))
        elif key == "notes":
            first = value.strip().splitlines()
            fields.append(("notes", (first[0] + (" …" if len(first) > 1 else "")) if first else "-"))
        else:
            fields.append((key, value or "missing"))
    return fields


def _render(doc: dict[str, Any], runnable: bool, path: Path, console: Console) -> None:
    """The check as a person reads it. Every piece of the blueprint is printed as text (a purpose that starts
    with `[lr=1e-6]` keeps it); into a pipe it is plain unpadded lines, the blueprint's parts `part<TAB>value`."""
    tty = console.is_terminal
    unreadable = any(p["field"] == "blueprint" for p in doc["problems"])
    if not unreadable:
        _heading(console, "Blueprint ", str(path))
        output.print_fields(_fields(doc), console=console if tty else None)
    _render_problems(doc["problems"], console)
    _render_changes(doc["config_changes"], console)
    _render_decisions(doc, console)
    _render_command(doc, unreadable, console)
    if doc.get("sweep"):
        _render_sweep(doc["sweep"], console)
    _render_where(doc.get("runs_on") or {}, unreadable, console)
    verdict = ("runnable", "green") if runnable else ("not runnable: fix the errors above", "red")
    console.print(Text.assemble("Verdict: ", verdict))


def _render_decisions(doc: dict[str, Any], console: Console) -> None:
    """The checks' decisions that depended on the environment (a variable set or not)."""
    if not doc.get("env_decisions"):
        return
    _heading(console, "Decisions that read the environment", f" ({doc['environment']})")
    for d in doc["env_decisions"]:
        console.print(Text(f"  {d['variable']} {'set' if d['is_set'] else 'not set'}: {_decision(d)}"),
                      highlight=False, soft_wrap=not console.is_terminal)


def _render_command(doc: dict[str, Any], unreadable: bool, console: Console) -> None:
    """The swarm server's command, then the command file the first attempt would run (or why there is none)."""
    if doc.get("swarm"):
        _heading(console, "Swarm server", f" (port {doc['swarm'].get('port')}), started by the runner:")
        _block(console, doc["swarm"].get("server_command") or "")
    if doc.get("command_file") is not None:
        what = "the client" if doc.get("swarm") else "the launch command"
        _heading(console, "Command file", f" (logs/attempt-1.command.sh, {what}; node-specific changes such as "
                 "GPU flags may still be added at launch):")
        _block(console, doc["command_file"].rstrip("\n"))
    elif not unreadable:
        _heading(console, "Command file", ": none (the launch command is refused or missing, see above)")


def _render_problems(problems: list[dict[str, Any]], console: Console) -> None:
    if not problems:
        return
    _heading(console, "Problems")
    for p in problems:
        colour = "red" if p["level"] == "error" else "yellow"
        console.print(Text.assemble("  ", (p["level"], colour), f" {p['field']}: {p['message']}"),
                      highlight=False, soft_wrap=not console.is_terminal)


def _render_changes(changes: list[dict[str, Any]], console: Console) -> None:
    if not changes:
        return
    _heading(console, "Changes the runner will make before launching")
    for c in changes:
        console.print(Text.assemble("  ", (c["key"], "cyan"), f": {json.dumps(c['old'], ensure_ascii=False)} -> "
                                    f"{json.dumps(c['new'], ensure_ascii=False)}"), highlight=False,
                      soft_wrap=not console.is_terminal)
        console.print(Text(f"    {c['reason']}", style="dim"), highlight=False, soft_wrap=not console.is_terminal)


def _decision(d: dict[str, Any]) -> str:
    """What a variable decided, without repeating the `set` / `not set` the line already says
    (the preflight's decisions start with it: `not set: not set: …` was printed)."""
    text = str(d["decision"])
    said = "set: " if d["is_set"] else "not set: "
    return text[len(said):] if text.startswith(said) else text


def _render_where(where: dict[str, Any], unreadable: bool, console: Console) -> None:
    if unreadable:
        return
    if where.get("host"):
        _heading(console, "Runs on", f": ssh host {where['host']} (from {where.get('from')}); the blueprint's "
                 "paths are that host's paths")
    else:
        _heading(console, "Runs on", ": this machine (`ajet-runner run`), or the worker that takes it")


def _render_sweep(sweep: dict[str, Any], console: Console) -> None:
    experiments = sweep.get("experiments") or []
    shape = " x ".join(f"{len(a['values'])} {a['key']}" for a in sweep.get("axes") or [])
    _heading(console, "Sweep", f": {len(experiments)} experiment(s) ({shape}), submitted as one stage; each "
             "gets its values on the runner's copy of the YAML, its own experiment name and result dir:")
    rows = [(str(m["index"] + 1), m["label"], m["result_dir"]) for m in experiments]
    output.print_table(("#", "values", "result dir"), rows, console=console if console.is_terminal else None,
                       shrink=("values", "result dir"))


def register(app: typer.Typer) -> None:
    """Add `check` to the CLI."""

    @app.command("check", epilog="Example: ajet-runner check blueprint_1.md --json")
    def check(
        blueprint: Path = typer.Argument(..., help="The blueprint markdown file (- reads it from stdin)."),
        as_json: bool = typer.Option(False, "--json", help="Print the machine-readable report."),
        sweep: list[str] = typer.Option(None, "--sweep", metavar="KEY=V1,V2",
                                        help="Show the expansion of a sweep (as `submit --sweep`; repeatable)."),
        max_experiments: int = typer.Option(None, "--max-experiments", min=1, max=1000, metavar="N",
                                            help="Allow a sweep of up to N combinations (as `submit`; default 64)."),
    ) -> None:
        """Parse and validate a blueprint; list its problems and the config changes planned."""
        doc, runnable = check_report(blueprint, list(sweep or []), max_experiments)
        unreadable = any(p["field"] == "blueprint" for p in doc["problems"])
        if as_json:
            typer.echo(json.dumps(doc, ensure_ascii=False, indent=2))
        elif unreadable:  # an error about the input, not a finding about the blueprint: stderr
            for p in doc["problems"]:
                output.err(f"error: {p['message']}")
        else:
            _render(doc, runnable, blueprint, output.console())
        raise typer.Exit(2 if unreadable else 0 if runnable else 1)  # 2: missing input, as for every command
