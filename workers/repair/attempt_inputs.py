"""The facts "no identical relaunch" compares: what each attempt ran with (statemachine/fixes/failure.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ajet_runner.statemachine.fixes.failure import AttemptInputs, EarlierAttempt, yaml_digest
from ajet_runner.statemachine.fixes.repairs import ResolvedRepair
from ajet_runner.store.records import Context
from ajet_runner.workers.repair.config_patch import read_yaml_data

__all__ = ["earlier_failures", "launch_inputs", "next_inputs", "runner_variables"]


def runner_variables(overrides: Mapping[str, str], gpus: list[int] | None) -> dict[str, str]:
    """The variables the runner sets for an attempt that can change between attempts: the repairs'
    overrides and the node's CUDA_VISIBLE_DEVICES (as attempt_env applies them: overrides win)."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)} if gpus is not None else {}
    env.update(overrides)
    return env


def launch_inputs(ctx: Context) -> AttemptInputs:
    """The inputs of the attempt about to start: command, the config's data, variables, cleanups."""
    try:
        data = read_yaml_data(Path(ctx.config_path)) if ctx.config_path else {}
    except Exception:  # noqa: BLE001 - an unreadable config is the launcher's to report; the digest says so
        data = {"unreadable": ctx.config_path}
    return AttemptInputs(command=ctx.command, yaml_digest=yaml_digest(data),
                         env=runner_variables(ctx.env, ctx.gpus), cleanups=list(ctx.cleanups_done))


def next_inputs(ctx: Context, resolved: ResolvedRepair) -> AttemptInputs:
    """The inputs the next attempt would have with this resolution applied."""
    return AttemptInputs(command=resolved.command or ctx.command, yaml_digest=resolved.yaml_digest,
                         env=runner_variables({**ctx.env, **resolved.env}, ctx.gpus), cleanups=list(resolved.cleanups))


def earlier_failures(ctx: Context, current: int, signature: str) -> list[EarlierAttempt]:
    """Every attempt that failed and has its inputs recorded, with the cause it was diagnosed with
    (`current`, the one failing now, with `signature`)."""
    causes = {r.attempt: r.signature for r in ctx.repairs}
    causes[current] = signature
    return [EarlierAttempt(number=a.number, signature=causes[a.number], inputs=AttemptInputs.model_validate(a.inputs))
            for a in ctx.attempts if a.inputs is not None and a.number in causes]
