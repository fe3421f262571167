"""Launching: start the attempt in tmux, or find the one a crashed worker already started (never twice).

Before a launch whose command skips AgentJet's all-GPUs check (`--skip-check-avail-gpu`) on GPUs the
runner knows (a managed node's, or those a repair confined the run to), the runner checks those GPUs
itself with the launcher's rule (at least 95 % free memory) and records what it saw; a busy one stops
the launch as `gpu_busy`, as the launcher's own check would have.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.statemachine.fixes.gpu_check import SKIP_FLAG, describe, parse_visible, too_busy
from ajet_runner.statemachine.fixes.preflight import gpus_needed, read_yaml_data
from ajet_runner.statemachine.lifecycle import EventType, Trigger
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules.time_limit import time_up_reason
from ajet_runner.statemachine.shell import command as cmdlib
from ajet_runner.store.records import Attempt, PendingRepair
from ajet_runner.workers.drive import gang_steps as gang
from ajet_runner.workers.executors.attempt import attempt_env
from ajet_runner.workers.executors.environment import LaunchEnvironment, launch_environment, worker_environment
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.request import AttemptRequest, TakesRequest
from ajet_runner.workers.executors.wrapper import env_entries, shown_name
from ajet_runner.workers.repair.attempt_inputs import launch_inputs
from ajet_runner.workers.repair.gpus import query_gpus
from ajet_runner.workers.report.reserve import RESERVE_NAME
from ajet_runner.workers.swarm.hooks import SwarmServerFailed, start_or_reuse
from ajet_runner.workers.swarm.server_watch import server_failure_pending

if TYPE_CHECKING:
    from ajet_runner.workers.drive.seam import Drive


def handle(d: Drive) -> bool:
    d.renew()
    if d.journal.cancel_requested():
        d.fire(Trigger.cancel, "stop requested")
        return True
    session, paths = gang.session_and_paths(d)
    if _unsupported(d):
        return True
    _request(d, session)
    run = _find_running_attempt(d, session, paths)  # one a crashed worker started: never a second launch
    if run is None:
        run = _launch(d, session, paths)
    if run is None:
        return True  # not started: the trigger that says why was fired
    d.handle = run
    d.fire(Trigger.launched, f"attempt {d.lc.attempt} running in {_where(run, session)}",
           fields={"handle": run.to_dict(), "tmux_session": session})
    return True


def _where(run: RunHandle, session: str) -> str:
    if run.job_id:
        return f"{run.executor} job {run.job_id}"
    return f"tmux session {session}" + (f" on ssh host {run.host}" if run.host else "")


def _launch(d: Drive, session: str, paths: dict[str, Path]) -> RunHandle | None:
    """Start a new attempt and record it; None when it did not start (a trigger saying why was fired)."""
    if _refused_before_launch(d):
        return None
    if d.runner.exists(session):
        d.runner.kill_session(session)  # the previous attempt's lingering pane
    inputs = launch_inputs(d.ctx).model_dump(mode="json")
    gpu_check, busy = _check_known_gpus(d)
    if busy:
        _refuse_busy_gpus(d, paths["log"], inputs, gpu_check, busy)
        return None
    own = attempt_env(d.bp, d.id, d.ctx.env, d.ctx.gpus)
    base = launch_environment(d.settings)
    own_env = not d.runner.capabilities.host_environment
    base_env = base.variables if own_env else None
    env = _with_ranks_and_server(d, own, base_env)
    if env is None:
        return None
    run = _start(d, session, paths, env, base_env)
    if run is None:
        return None
    d.handle = run
    run.files = [p for p in (d.ctx.val_path, d.ctx.train_path) if p]
    gang.record_head(d, run, paths["log"])
    d.ctx.attempts.append(Attempt(
        number=d.lc.attempt, started_at=run.started_at, ended_at=None, exit_code=None,
        command=d.ctx.command, log_path=str(paths["log"]), end_reason="", inputs=inputs,
        val_offset=_size(d.ctx.val_path), gpu_check=gpu_check,
        **_environment_fields(d, base, env, own_env),
    ))
    d.ctx.cleanups_done = []
    return run


def _refused_before_launch(d: Drive) -> bool:
    """Past the time limit (e.g. a relaunch after a long repair) or a path outside the allowed roots
    (checked at each launch: a path may have been swapped since): the trigger is fired, nothing starts."""
    if late := time_up_reason(time.time(), d.started_at, d.bp.exp_max_time_seconds, "before the launch"):
        d.fire(Trigger.time_up, late)
        return True
    outside = d.root_problems()
    if outside:
        d.fire(Trigger.anomaly, "refused to launch: " + "; ".join(str(p) for p in outside))
        return True
    return False


def _with_ranks_and_server(d: Drive, env: dict[str, str], base_env: dict[str, str] | None) -> dict[str, str] | None:
    """`env` with the other ranks' variables (a multi-node run, started first) and the swarm server's; None
    when they could not be started (the attempt failed or was cancelled meanwhile)."""
    if d.gang is not None:
        ranks = gang.launch_members(d)
        if ranks is None:
            return None
        env.update(ranks)
    if not d.ctx.swarm:
        return env
    try:
        return start_or_reuse(d.runner, d.ctx.swarm, d.bp, exp_id=d.id, env=env,
                              attempt=d.lc.attempt, publish=d.journal.publish,
                              boot_timeout=d.settings.swarm_boot_timeout_seconds, base_env=base_env)
    except SwarmServerFailed as exc:  # diagnosed from the server's log
        d.ctx.pending_repair = PendingRepair.model_validate(server_failure_pending(exc))
        d.fire(Trigger.anomaly, f"swarm server: {exc.reason}",
               signature=(d.ctx.pending_repair.cause or {}).get("signature", ""))
        return None


def _start(d: Drive, session: str, paths: dict[str, Path], env: dict[str, str],
           base_env: dict[str, str] | None) -> RunHandle | None:
    """The executor starts the attempt; None when it could not (the other ranks are stopped, `anomaly` fired)."""
    try:
        return d.runner.start(
            session, d.ctx.command, cwd=d.bp.exp_codebase_dir, env=env,
            log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
            reserve_path=Path(d.bp.exp_result_dir) / RESERVE_NAME, base_env=base_env,
        )
    except (OSError, RuntimeError) as exc:
        gang.stop_members(d)
        _start_failed(d, exc)
        return None


def _start_failed(d: Drive, exc: OSError | RuntimeError) -> None:
    host = getattr(exc, "host", None)  # a host refused, did not answer, or none was named: never repaired
    if host is not None:
        d.ctx.pending_repair = _host_failure(host, str(exc))
        d.fire(Trigger.anomaly, f"could not start the attempt{f' on host {host}' if host else ''}: {exc}",
               signature=HOST_FAILURE)
        return
    what = "the tmux session" if d.runner.capabilities.name == "local" else \
        f"the attempt ({d.runner.capabilities.name} executor)"
    text = f"could not start {what}: {exc}"
    # The executor's own words (a scheduler's refusal) are the failure's reason, quoted in the verdict.
    d.ctx.pending_repair = PendingRepair(reason=text, log_excerpt=text, log_tail=[text])
    d.fire(Trigger.anomaly, text)


def _unsupported(d: Drive) -> bool:
    """A scheduling executor runs one job per attempt: a multi-node gang or a swarm server beside the run is
    refused, naming why and what to use (never started halfway)."""
    if not isinstance(d.runner, TakesRequest) or (d.gang is None and not d.ctx.swarm):
        return False
    what = "a multi-node run (nnodes > 1)" if d.gang is not None else "swarm mode (a swarm server beside the run)"
    name = d.runner.capabilities.name
    text = (f"could not start the attempt ({name} executor): {what} is not supported by the {name} executor; "
            "run it with the local executor (ajet-runner run --executor local, or a worker on the GPU node)")
    d.ctx.pending_repair = PendingRepair(reason=text, log_excerpt=text, log_tail=[text])
    d.fire(Trigger.anomaly, text)
    return True


def _request(d: Drive, session: str) -> None:
    """A scheduling executor (SLURM) learns whose attempt it starts, its GPUs and its time, before it looks."""
    if isinstance(d.runner, TakesRequest):
        d.runner.request(session, AttemptRequest(
            exp_id=d.id, attempt=d.lc.attempt, gpus=_gpus_needed(d), max_seconds=d.bp.exp_max_time_seconds,
            grace_seconds=d.settings.time_limit_grace_seconds))


def _gpus_needed(d: Drive) -> int:
    """The GPUs of the YAML this attempt launches with (a repair may have changed it), else the record's."""
    if d.ctx.config_path and not d.ctx.swarm:
        with contextlib.suppress(OSError, ValueError, yaml.YAMLError):
            return gpus_needed(read_yaml_data(Path(d.ctx.config_path)))
    return max(1, d.rec.gpus_needed)


HOST_FAILURE = "ssh_host"


def _host_failure(host: str, message: str) -> PendingRepair:
    """The cause when the host the blueprint names refused or did not answer: ssh's words, and what to try."""
    explanation = (f"{message}. Nothing was run (an experiment that names a host runs nowhere else): check that "
                   f"`ssh {host}` works from this machine without a prompt (key, known host, ssh config), then "
                   "submit again") if host else f"{message}. Nothing was run"
    finding = Finding(signature=HOST_FAILURE, fatal=True, line=0, text=message, explanation=explanation,
                      repairable=False)
    return PendingRepair(cause=finding.model_dump(mode="json"), reason=explanation, log_excerpt=message,
                         log_tail=[message])


def _environment_fields(d: Drive, base: LaunchEnvironment, env: dict[str, str], own_env: bool) -> dict[str, Any]:
    """What the report says of the attempt's environment: names only, as the job received them."""
    if not own_env:
        return {"env_names": sorted(env), "env_withheld": [], "env_notes": [],
                "environment": f"the login environment of {d.runner.capabilities.name} host "
                               f"{d.handle.host if d.handle else ''}".strip() + ", plus the variables named"}
    merged = {**base.variables, **env}
    passed, notes = env_entries(merged)
    names = {entry.split(b"=", 1)[0].decode("utf-8") for entry in passed}  # every passed name is ASCII
    return {"env_names": sorted(names), "env_withheld": sorted(shown_name(n) for n in base.withheld),
            "env_notes": list(notes.values()), "environment": worker_environment(d.node.name)}


def _known_gpus(d: Drive) -> list[int] | None:
    """The GPUs this run uses as far as the runner decided them: the node's, or a repair's confinement."""
    if d.ctx.gpus is not None:
        return list(d.ctx.gpus)
    return parse_visible(d.ctx.env.get("CUDA_VISIBLE_DEVICES"))


def _check_known_gpus(d: Drive) -> tuple[str, list[str]]:
    """(what the runner saw, why GPUs are busy) for a launch that skips the launcher's own check."""
    gpus = _known_gpus(d)
    if d.ctx.swarm or gpus is None or cmdlib.launcher_segment(d.ctx.command) is None \
            or not cmdlib.has_flag(d.ctx.command, SKIP_FLAG):
        return "", []
    shown = ",".join(str(g) for g in gpus)
    listed, why = query_gpus()
    if listed is None:
        seen = f"GPU(s) {shown} not checked before launch: {why}"
        d.journal.publish({"type": EventType.gpu_check, "gpus": gpus, "message": seen})
        return seen, []
    busy = too_busy(listed, gpus)
    seen = (f"GPU(s) {shown} checked before launch (nvidia-smi: {describe(listed, gpus)}): "
            + ("; ".join(busy) if busy else "all at least 95 % free"))
    d.journal.publish({"type": EventType.gpu_check, "gpus": gpus, "message": seen})
    return seen, busy


def _refuse_busy_gpus(d: Drive, log_path: Path, inputs: dict, seen: str, busy: list[str]) -> None:
    """The runner's own GPU check failed: no launch; the failure is `gpu_busy`, with what nvidia-smi said."""
    text = f"GPU memory check failed (the runner's check of this run's GPUs before launch): {'; '.join(busy)}"
    now = time.time()
    d.ctx.attempts.append(Attempt(
        number=d.lc.attempt, started_at=now, ended_at=now, exit_code=None, command=d.ctx.command,
        log_path="", end_reason=f"not started: {'; '.join(busy)}", inputs=inputs, gpu_check=seen,
    ))
    d.ctx.cleanups_done = []
    finding = signature("gpu_busy").finding(0, text)
    d.ctx.pending_repair = PendingRepair(cause=finding.model_dump(mode="json"), reason=text, log_excerpt=seen,
                                         log_tail=[text])
    d.fire(Trigger.anomaly, f"gpu_busy: {'; '.join(busy)}", signature="gpu_busy")


def _size(path: str) -> int | None:
    if not path:
        return None
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _find_running_attempt(d: Drive, session: str, paths: dict[str, Path]) -> RunHandle | None:
    """After a crash between starting tmux and recording it (or a Redis restart that lost the record
    of it): find that attempt, never relaunch it. Its wrapper wrote the pid file: the attempt started.
    Still running, it is watched; already ended (its rc file written), the running state sees the exit
    and collects it — a second launch would run the command again into the same log."""
    if d.handle is not None and Path(d.handle.log_path) == paths["log"]:
        return d.handle
    return d.runner.adopt(session, paths)
