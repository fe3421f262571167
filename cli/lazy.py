"""The root command group that imports a command's module only when that command runs.

Importing every command module up front (httpx, pydantic, the blueprint parser, the failure catalogue)
made `ajet-runner --help` take 30x an empty Python. The group knows each command's name, module and
listing line from COMMANDS below; `--help` and shell completion of command names show stubs built
from that table, and the real command is built (the module's `register()` on a private typer app)
the first time it is resolved: to run it, or for `ajet-runner <cmd> --help`.
tests/unit/test_cli_lazy.py checks the table against the real commands, so it cannot drift.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup
from typer.core import _click as click  # typer's own click: the one its commands are built on

from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC

UsageError = click.exceptions.UsageError

PACKAGE = "ajet_runner.cli.commands"


class Lazy(NamedTuple):
    module: str  # under ajet_runner.cli.commands; its register(app) adds this command
    help: str  # the first paragraph of the command's help, as `--help` lists it


# In the order `--help` lists them (the order the modules used to be registered in).
COMMANDS: dict[str, Lazy] = {
    "check": Lazy("check_command", "Parse and validate a blueprint; list its problems and the config changes "
                  "planned."),
    "results": Lazy("results_command", "Show the validation results of a run: every evaluation, the final and "
                    "the best values."),
    "diagnose": Lazy("diagnose_command", "Name the failure in a log (first fatal signature) and the plan to "
                     "repair it."),
    "run": Lazy("run_command", "Run one blueprint end to end on this machine (embedded Redis unless REDIS_URL "
                "or the sentinels are set)."),
    "demo": Lazy("run_command", "Copy the simulated AgentJet and a sample blueprint into a fresh dir, then "
                 "`run` it."),
    "up": Lazy("up_command", "The API, the web console and a local worker on this machine (embedded Redis "
               "unless one is set)."),
    "worker": Lazy("worker_command", "Run this node's worker: the watcher (a thread per run), heartbeat, "
                   "re-adoption of running experiments."),
    "drain": Lazy("worker_command", "Stop a node taking new work; its running experiments go on in tmux (used "
                  "by preStop)."),
    "session-host": Lazy("session_host_command", "Run this node's tmux server in the foreground; workers use "
                         "it through AJET_RUNNER_TMUX_SOCKET."),
    "serve": Lazy("serve_command", "Serve the HTTP API (submit, list, stop, events, logs, nodes, /metrics) on "
                  "REDIS_URL."),
    "submit": Lazy("client_commands", "Submit blueprints: prints `Job submitted: <id>` for each (exit 1 if any "
                   "was rejected)."),
    "scan": Lazy("client_commands", "Experiments: id, purpose, state or outcome, node, elapsed, latest "
                 f"{HEADLINE_METRIC} (tab-separated when piped)."),
    "status": Lazy("client_commands", "One experiment: state, outcome, node, tmux session, timings, latest "
                   "metrics, history."),
    "stop": Lazy("client_commands", "Stop experiments: queued ones are cancelled at once; running ones stop "
                 "gracefully and get collected."),
    "logs": Lazy("client_commands", "The latest attempt's log."),
    "events": Lazy("client_commands", "Transitions, evaluations, progress reports and repairs of one "
                   "experiment."),
    "watch": Lazy("client_commands", "A live progress bar until it finishes; Ctrl-C detaches and the "
                  "experiment goes on (as `kubectl logs -f`).\nExit 0 completed/early_stopped, 1 "
                  "failed/timed_out, 130 Ctrl-C (detached, or cancelled)."),
    "nodes": Lazy("client_commands", "The workers' nodes: every field the API reports (alive, GPUs, slots, "
                  "running, draining, ...)."),
    "scan-jobs": Lazy("client_commands", "One Python dict per job: job_id, display_name, status "
                      "(Queuing|Running|Succeeded|Failed|Stopped),\ncreate_time (research-workflow drop-in for "
                      "`scan_jobs [--runner=ssh|pai]`)."),
    "stop-jobs": Lazy("client_commands", "Stop jobs by id: `Stopping job <id> ...`, `Deleted job <id>` or "
                      "`Failed to stop <id>: <why>`; always\nexit 0 (research-workflow drop-in for `stop_jobs "
                      "[--runner=ssh|pai] --stop-job-id=ID [--delete]`)."),
    "wait": Lazy("stage_commands", "Block until every experiment of a stage (or every id) is finished, one live "
                 "line each.\nExit 0 when every one completed or early-stopped, 1 otherwise (also at once for a stage "
                 "with no\nexperiments), 2 at once for an unknown stage, 130 Ctrl-C (they go on)."),
    "compare": Lazy("stage_commands", "Compare a stage's experiments: stage_report.md, stage_results.json and "
                    "stage_plot.png."),
    "stage": Lazy("stage_commands", "Stages: named groups of experiments (list, show, add)."),
    "catalogue": Lazy("catalogue_command", "The failure catalogue: site extension and suggested entries."),
}


def build_module(module: str) -> dict[str, Any]:
    """The click commands that `module`'s register() adds, tidied as `--help` shows them."""
    from ajet_runner.cli.commands.help_text import tidy

    sub = typer.Typer()
    importlib.import_module(f"{PACKAGE}.{module}").register(sub)
    group = typer.main.get_group(sub)
    return {name: tidy(cmd, typer.Context(cmd, info_name=name)) for name, cmd in group.commands.items()}


class LazyGroup(TyperGroup):
    """A TyperGroup whose COMMANDS are built on first use (click's documented LazyGroup pattern)."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        eager = [n for n in self.commands if n not in COMMANDS]
        return [*COMMANDS, *eager]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            if self._listing:
                return self._stub(cmd_name)
            for name, cmd in build_module(COMMANDS[cmd_name].module).items():
                self.commands.setdefault(name, cmd)
        return self.commands.get(cmd_name)

    def _stub(self, name: str) -> TyperCommand:
        """What a listing needs of a command (name, help), without importing it."""
        return TyperCommand(name=name, help=COMMANDS[name].help, callback=None)

    @contextlib.contextmanager
    def listing(self) -> Iterator[None]:
        """While listing commands (help, name completion) unloaded ones are stubs."""
        was, self._listing = self._listing, True
        try:
            yield
        finally:
            self._listing = was

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with self.listing():
            super().format_help(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with self.listing():
            super().format_commands(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        with self.listing():
            return super().shell_complete(ctx, incomplete)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # a typo: suggest among every command, not only the loaded ones
            message = exc.message
            if "Did you mean" not in message and args:
                from difflib import get_close_matches

                matches = get_close_matches(args[0], self.list_commands(ctx))
                if matches:
                    exc.message = f"{message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise

    def load_all(self, ctx: Any) -> dict[str, Any]:
        """Every command, built (for tests and tools that walk the whole tree)."""
        return {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
