"""Repairing: apply the resolved fix (env, command, YAML copy, cleanups), then relaunch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_runner.workers.swarm.hooks import stop_ours

if TYPE_CHECKING:
    from ajet_runner.workers.drive.driver import ExperimentDriver


def handle(d: ExperimentDriver) -> bool:
    d._renew()
    resolved = (d.ctx.pending_repair.resolved if d.ctx.pending_repair else None) or {}
    d.ctx.env.update(resolved.get("env") or {})
    d.ctx.command = resolved.get("command") or d.ctx.command
    diff = d._patch_config(resolved.get("yaml_changes") or [])
    if "swarm_server" in (resolved.get("cleanups") or []):
        stop_ours(d.runner, d.ctx.swarm, d.settings.stop_grace_seconds, d.journal.publish)
    if resolved.get("cleanups"):
        d._cleanup_processes()  # every cleanup kind is scoped to this experiment's processes
    if d.ctx.repairs:
        d.ctx.repairs[-1].diff = diff
    d.ctx.pending_repair = None
    d.fire("relaunch", f"fix applied; attempt {d.lc.attempt + 1}")
    return True  # what the relaunch led to is linked when collecting (link_repair_outcomes)
