"""Queued: the cancel flag first, then preflight on this node, GPUs and the swarm port, the patched
config, and the claim (the `start` transition is the compare-and-set that makes the run ours).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ajet_runner.resultdir.archive import archive_previous_run
from ajet_runner.resultdir.confined import make_dir
from ajet_runner.resultdir.flag import atomic_write_bytes, write_error_reason
from ajet_runner.statemachine.fixes.preflight import PreflightPlan, gpu_check_decision, launch_workdir, preflight
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.models import Level, Problem
from ajet_runner.store.naming import session_name
from ajet_runner.workers.drive import gang_steps as gang
from ajet_runner.workers.executors.environment import launch_environment
from ajet_runner.workers.identity.owner_identity import driver_identity
from ajet_runner.workers.repair.gpus import launcher_skip_support
from ajet_runner.workers.report.reserve import take_reserve
from ajet_runner.workers.swarm.found_results import snapshot
from ajet_runner.workers.swarm.hooks import port_problems, swarm_plan, swarm_results_path
from ajet_runner.workers.watching.watch import file_start

if TYPE_CHECKING:
    from ajet_runner.statemachine.blueprint.swarm_blueprint import SwarmSpec
    from ajet_runner.workers.drive.seam import Drive


def handle(d: Drive) -> bool:
    if d.store.runs.cancel_requested(d.id):
        _claim_and_fire(d, Trigger.cancel, "stop requested before launch")
        return True
    # The same preflight `ajet-runner check` runs, on this node's environment (swarm: no YAML).
    spec, _ = swarm_plan(d.bp)  # [exp_swarm_server], or `ajet.enable_swarm_mode: true` in the YAML
    swarm = spec is not None
    # The same environment the job will start from (the control plane's variables held back).
    plan = preflight(d.bp, env=launch_environment(d.settings).variables,
                     environment=f"node {d.node.name} (the worker's environment)")
    errors = _record_problems(d, plan, spec)
    if errors:
        _claim_and_fire(d, Trigger.reject, "; ".join(str(p) for p in errors))
        return True
    waited = _take_gpus(d)
    if waited is not None:
        return waited
    if swarm and not _reserve_swarm_port(d):
        _release_gpus_now(d)
        return False  # another experiment's swarm server holds the port: back to the queue, like GPUs
    if not _applied(d, plan, swarm):
        return True
    _share_node_gpus(d)
    d.started_at = time.time()
    _claim_and_fire(d, Trigger.start, "preflight passed", fields={
        "node": d.node.name, "started_at": d.started_at,
        "tmux_session": session_name(d.bp.exp_purpose, d.id), "gpus": d.ctx.gpus,
    })
    return True


def _record_problems(d: Drive, plan: PreflightPlan, spec: SwarmSpec | None) -> list[Problem]:
    """Every problem the preflight, the swarm port and the allowed roots found, kept on the context with the
    preflight's environment decisions; the errors among them (they reject the run). An earlier run's files
    are moved aside here, unless a root problem forbids creating the result dir."""
    problems = list(plan.problems) + (port_problems(spec) if spec is not None else [])
    outside = d.root_problems()
    _move_earlier_run(d, problems, create=not any(p.level == Level.error for p in outside))
    problems += outside
    d.ctx.preflight_problems = [p.model_dump(mode="json") for p in problems]
    d.ctx.preflight_env = {"environment": plan.environment,
                           "decisions": [x.model_dump(mode="json") for x in plan.env_decisions]}
    return [p for p in problems if p.level == Level.error]


def _take_gpus(d: Drive) -> bool | None:
    """Reserve this run's GPUs (a gang's, or a managed node's: an ssh host's GPUs are not the node's). None
    when reserved or none are needed; else the handler's result after waiting for them."""
    if d.gang is None and not (d.node.manages_gpus and not d.bp.exp_host):
        return None
    gpus = gang.reserve(d)
    if gpus is None:
        return _wait_for_gpus(d)
    d.ctx.gpus = gpus if d.node.manages_gpus else None  # a gang on a node without managed GPUs: none
    return None


def _applied(d: Drive, plan: PreflightPlan, swarm: bool) -> bool:
    """The preflight's changes (or the swarm's setup) are written; False when they could not be: the GPUs
    are released and the run rejected."""
    try:
        _apply_swarm(d) if swarm else _apply_preflight(d, plan)
    except (OSError, ValueError) as exc:  # e.g. a YAML the patcher cannot edit safely, a read-only dir
        _release_gpus_now(d)
        why = write_error_reason(exc) if isinstance(exc, OSError) else str(exc)
        _claim_and_fire(d, Trigger.reject, f"preflight could not be applied: {why}")
        return False
    return True


def _move_earlier_run(d: Drive, problems: list[Problem], *, create: bool = True) -> None:
    """An earlier run's files go to previous/ before this run writes anything (submission
    did it already when it could see the disk; this covers an API that could not). The dir is marked as
    this run's first (resultdir/archive.py): a run taken again after its driver went away between its first
    files and its `start` keeps them, never archiving its own files as an earlier run's."""
    d.ctx.previous_run = d.ctx.previous_run or d.rec.previous_run
    if not os.path.isabs(d.bp.exp_result_dir or "") or (not create and not Path(d.bp.exp_result_dir).is_dir()):
        return  # the preflight names the problem; a dir outside the allowed roots is not created
    try:
        moved = archive_previous_run(d.bp.exp_result_dir, d.bp.exp_codebase_dir, owner=d.id)
    except OSError as exc:
        problems.append(Problem(level=Level.error, field="exp_result_dir",
                                message=f"an earlier run's files could not be moved to previous/: {exc}"))
        return
    d.ctx.previous_run = moved or d.ctx.previous_run


def _claim_and_fire(d: Drive, trigger: str, reason: str, fields: dict[str, Any] | None = None) -> None:
    lease = d.store.server_time() + d.settings.lease_seconds
    d.fire(trigger, reason, fields={"owner": d.owner, "lease_until": lease, "node": d.node.name,
                                    **driver_identity(),
                                    **(fields or {})}, ack=True)  # a conflict: another worker won
    d.renew()


def _release_gpus_now(d: Drive) -> None:
    gang.release(d)
    d.ctx.gpus = None


def _reserve_swarm_port(d: Drive) -> bool:
    """Wait a little for the swarm port on this node; False hands the job back to its queue."""
    port = d.swarm_port()
    if port is None:
        return True
    deadline = time.monotonic() + d.settings.capacity_wait_seconds
    while not d.store.slots.reserve_swarm_port(d.node.name, d.id, port):
        if time.monotonic() >= deadline or d.store.runs.cancel_requested(d.id):
            return False
        time.sleep(0.25)
    return True


def _wait_for_gpus(d: Drive) -> bool:
    """Wait a little for GPUs here; if none free up, hand the job back to its queue."""
    deadline = time.monotonic() + d.settings.capacity_wait_seconds
    while time.monotonic() < deadline:
        if d.store.runs.cancel_requested(d.id):
            return True
        gpus = gang.reserve(d)
        if gpus is not None:
            d.ctx.gpus = gpus if d.node.manages_gpus else None
            return True
        time.sleep(0.25)
    return False


def _apply_preflight(d: Drive, plan: Any) -> None:
    original = Path(d.bp.yaml_abspath())
    result_dir = Path(d.bp.exp_result_dir)
    atomic_write_bytes(result_dir / "config.original.yaml", original.read_bytes())
    # Room for the report and finish.flag even if the run fills the disk (released at collecting).
    take_reserve(result_dir, d.settings.result_reserve_bytes)
    command = plan.command
    changes = list(plan.changes)
    d.ctx.config_path = str(original)
    d.ctx.command = command
    if changes:
        d.patch_config([c.model_dump(mode="json") for c in changes])
    d.ctx.cleanup_on_stop = bool(plan.cleanup_on_stop)
    d.ctx.preflight_changes = [c.model_dump(mode="json") for c in [*changes, *plan.command_changes]]
    d.ctx.val_path = plan.val_result_path  # absolute, resolved from the launch directory
    d.ctx.train_path = plan.train_result_path
    d.ctx.val_chosen = any(c.key.endswith(".val_print_to_markdown_file_path") for c in changes)
    d.ctx.launcher_hidden = plan.launcher_hidden  # the report then names no change the process did not get
    # The user's own results file may hold earlier runs' lines (AgentJet appends): only what
    # is written after this point is this run's, across every attempt.
    d.ctx.val_start = file_start(plan.val_result_path)


def _share_node_gpus(d: Drive) -> None:
    """AgentJet's all-GPUs check on a shared node, or after `--autokill` was stripped: skipped where the
    runner knows this run's GPUs (it checks them itself before launch), else a warning that it will run
    (statemachine/fixes/preflight.py: gpu_check_decision)."""
    if d.ctx.swarm:
        return
    hazard = d.ctx.cleanup_on_stop  # the preflight removed --autokill / --kill
    shared = d.ctx.gpus is not None and len(d.ctx.gpus) < d.node.gpus
    supported: bool | None = True
    launcher = ""
    if (hazard or shared) and d.ctx.gpus is not None:
        supported, launcher = launcher_skip_support(launch_workdir(d.bp, d.ctx.command), d.bp.exp_venv_exe)
    change, problem = gpu_check_decision(d.ctx.command, gpus=d.ctx.gpus, node_gpus=d.node.gpus, hazard_removed=hazard,
                                         skip_supported=supported, launcher=launcher)
    if change is not None:
        d.ctx.preflight_changes.append(change.model_dump(mode="json"))
        d.ctx.command = change.new
    if problem is not None:
        d.ctx.preflight_problems.append(problem.model_dump(mode="json"))


def _apply_swarm(d: Drive) -> None:
    """Swarm mode: the launch command is the client; its results file is named, or discovered
    (workers/swarm/found_results.py) from the sizes the candidate files have now."""
    spec, _ = swarm_plan(d.bp)
    # An earlier run's files were moved to previous/ already (_move_earlier_run); keep room for the report.
    result_dir = Path(d.bp.exp_result_dir)
    make_dir(result_dir)  # the confined writer's walk, as every write into the result dir
    take_reserve(result_dir, d.settings.result_reserve_bytes)
    d.ctx.command = d.bp.exp_launch_command
    d.ctx.val_path = swarm_results_path(d.bp)
    d.ctx.val_start = file_start(d.ctx.val_path)  # blocks already there are earlier runs'
    d.ctx.swarm = {"spec": spec.model_dump() if spec else None}
    if not d.ctx.val_path:  # no [exp_val_result_path]: discover, counting only what grows after now
        d.ctx.swarm["result_starts"] = snapshot(d.bp)
