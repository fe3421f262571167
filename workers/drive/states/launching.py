"""Launching: start the attempt in tmux, or find the one a crashed worker already started (never twice).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ajet_runner.store.records import Attempt, PendingRepair
from ajet_runner.workers.drive.attempt import attempt_env
from ajet_runner.workers.gang import steps as gang
from ajet_runner.workers.process.tmux import RunHandle
from ajet_runner.workers.report.reserve import RESERVE_NAME
from ajet_runner.workers.swarm.hooks import SwarmServerFailed, start_or_reuse
from ajet_runner.workers.swarm.server_watch import server_failure_pending

if TYPE_CHECKING:
    from ajet_runner.workers.drive.driver import ExperimentDriver


def handle(d: ExperimentDriver) -> bool:
    d._renew()
    if d.journal.cancel_requested():
        d.fire("cancel", "stop requested")
        return True
    session, paths = gang.session_and_paths(d)
    adopted = _find_running_attempt(d, session, paths)
    if adopted is None:
        outside = d._root_problems()  # checked at each launch: a path may have been swapped since
        if outside:
            d.fire("anomaly", "refused to launch: " + "; ".join(str(p) for p in outside))
            return True
        if d.runner.exists(session):
            d.runner.kill_session(session)  # the previous attempt's lingering pane
        env = attempt_env(d.bp, d.id, d.ctx.env, d.ctx.gpus)
        if d.gang is not None:
            ranks = gang.launch_members(d)
            if ranks is None:
                return True  # the attempt failed or was cancelled while the other ranks were starting
            env.update(ranks)
        if d.ctx.swarm:
            try:
                env = start_or_reuse(d.runner, d.ctx.swarm, d.bp, exp_id=d.id, env=env,
                                     attempt=d.lc.attempt, publish=d.journal.publish,
                                     boot_timeout=d.settings.swarm_boot_timeout_seconds)
            except SwarmServerFailed as exc:  # diagnosed from the server's log
                d.ctx.pending_repair = PendingRepair.model_validate(server_failure_pending(exc))
                d.fire("anomaly", f"swarm server: {exc.reason}",
                       signature=(d.ctx.pending_repair.cause or {}).get("signature", ""))
                return True
        try:
            d.handle = d.runner.start(
                session, d.ctx.command, cwd=d.bp.exp_codebase_dir, env=env,
                log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
                reserve_path=Path(d.bp.exp_result_dir) / RESERVE_NAME,
            )
        except (OSError, RuntimeError) as exc:
            gang.stop_members(d)
            d.fire("anomaly", f"could not start the tmux session: {exc}")
            return True
        gang.record_head(d, d.handle, paths["log"])
        d.ctx.attempts.append(Attempt(
            number=d.lc.attempt, started_at=d.handle.started_at, ended_at=None, exit_code=None,
            command=d.ctx.command, log_path=str(paths["log"]), end_reason="",
        ))
    else:
        d.handle = adopted
    d.fire("launched", f"attempt {d.lc.attempt} running in tmux session {session}",
           fields={"handle": d.handle.to_dict(), "tmux_session": session})
    return True


def _find_running_attempt(d: ExperimentDriver, session: str, paths: dict[str, Path]) -> RunHandle | None:
    """After a crash between starting tmux and recording it (or a Redis restart that lost the record
    of it): find that attempt, never relaunch it. Its wrapper wrote the pid file: the attempt started.
    Still running, it is watched; already ended (its rc file written), the running state sees the exit
    and collects it — a second launch would run the command again into the same log."""
    if d.handle is not None and Path(d.handle.log_path) == paths["log"]:
        return d.handle
    if not paths["pid"].exists():
        return None
    ended = paths["rc"].exists()
    if not ended and not d.runner.exists(session):
        return None  # started, then its session vanished with no exit code (the tmux server died)
    handle = RunHandle(
        session=session, log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
        wrapper_path=paths["log"].with_suffix(".sh"), socket_path=d.runner.socket_path,
    )
    if not ended:
        handle.wait_for_pid(1.0, local=not d.runner.remote())
    return handle
