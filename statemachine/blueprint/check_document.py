"""The `check` document: what a blueprint means, its problems and the preflight's changes, as JSON.

One builder for `ajet-runner check --json` and the web console's submit page, so both show the same.
JSON contract (tests pin it): {"blueprint": {the 8 parts, with exp_max_time_seconds},
"problems": [{"level", "field", "message"}], "config_changes": [{"key", "old", "new", "reason"}],
"environment": "<whose environment was read>", "env_decisions": [{"variable", "is_set", "decision"}],
"swarm": {"server_command", "port"} or null for a classic experiment, "command_file": the script the worker
would write as `logs/attempt-1.command.sh` (the launch command after the preflight's rewrites; for a swarm
experiment the client), or null when the command is refused or missing, "sweep": {"keys", "axes": [{"key",
"values"}], "experiments": [{"index", "values", "result_dir", "purpose", "label"}]} for a sweep (its
`[exp_sweep]` part and `--sweep` options; statemachine/blueprint/sweep.py), else null}.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.statemachine.blueprint.sweep import MAX_EXPERIMENTS, SweepPlan, plan_sweep
from ajet_runner.statemachine.fixes.preflight import PreflightPlan, preflight
from ajet_runner.statemachine.models import Blueprint, ConfigChange, Level, Problem
from ajet_runner.statemachine.shell.command_file import command_script


def check_text(text: str, *, env: Mapping[str, str], check_disk: bool = True,
               environment: str = "the API server's environment", sweep: Sequence[str] = ()
               ) -> tuple[dict[str, Any], bool]:
    """The document for blueprint text (the web console's submit page)."""
    return check_document(parse_blueprint(text), [], env=env, environment=environment, check_disk=check_disk,
                          sweep=sweep)


def check_document(bp: Blueprint, problems: list[Problem], *, env: Mapping[str, str], environment: str,
                   check_disk: bool = True, sweep: Sequence[str] = (),
                   max_experiments: int = MAX_EXPERIMENTS) -> tuple[dict[str, Any], bool]:
    """The document and whether the blueprint is runnable: the very preflight a worker runs, on `env`."""
    plan = None
    if not any(p.field == "blueprint" for p in problems):
        plan = preflight(bp, env=env, environment=environment, check_disk=check_disk)
        problems = plan.problems
    grid = _sweep_grid(bp, sweep, max_experiments)
    if grid is not None:  # the part's own problems are the preflight's already; the options' and the cap's are new
        problems = [*problems, *(p for p in grid.problems if p not in problems)]
    runnable = not any(p.level == Level.error for p in problems)
    doc = {
        "blueprint": bp.public(),
        "problems": [p.model_dump(mode="json") for p in problems],
        **_plan_parts(bp, plan, environment, problems),
        "sweep": grid.public() if grid is not None else None,
        "runs_on": runs_on(bp),
    }
    return doc, runnable


def _sweep_grid(bp: Blueprint, sweep: Sequence[str], max_experiments: int) -> SweepPlan | None:
    """The sweep's grid, when the blueprint has an `[exp_sweep]` part or `--sweep` options were given."""
    if not (bp.exp_sweep.strip() or sweep):
        return None
    return plan_sweep(bp.exp_sweep, sweep, result_dir=bp.exp_result_dir, purpose=bp.exp_purpose,
                      max_experiments=max_experiments)


def _plan_parts(bp: Blueprint, plan: PreflightPlan | None, environment: str,
                problems: list[Problem]) -> dict[str, Any]:
    """The document's keys that come from the preflight; without one (the blueprint is unreadable) they
    are empty, and the environment is the one named by the caller."""
    if plan is None:
        return {"config_changes": [], "environment": environment, "env_decisions": [], "swarm": None,
                "command_file": _command_file(bp, "", problems)}
    changes: list[ConfigChange] = [*plan.command_changes, *plan.changes]
    return {
        "config_changes": [c.model_dump(mode="json") for c in changes],
        "environment": plan.environment,
        "env_decisions": [d.model_dump(mode="json") for d in plan.env_decisions],
        "swarm": plan.swarm,
        "command_file": _command_file(bp, plan.command, problems),
    }


def runs_on(bp: Blueprint) -> dict[str, Any]:
    """Where the experiment will run: the ssh host the blueprint names (and where it says so), else locally."""
    if bp.exp_host:
        return {"executor": "ssh", "host": bp.exp_host, "from": bp.exp_host_source}
    return {"executor": "local", "host": None, "from": ""}


def _command_file(bp: Blueprint, planned: str, problems: list[Problem]) -> str | None:
    """The first attempt's command file: the preflight's command (rewritten), else the command as parsed
    (when the preflight stopped at other problems); None when the command itself has an error."""
    if any(p.level == Level.error and p.field in ("exp_launch_command", "blueprint") for p in problems):
        return None
    command = planned or bp.exp_launch_command
    return command_script(command) if command.strip() else None
