"""Accepting a blueprint: parse, validate, check placement, record, enqueue — or refuse with reasons."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from service.store import Store, new_id
from statemachine.blueprint import parse_blueprint, validate_blueprint
from statemachine.lifecycle import Lifecycle
from statemachine.models import Level, Problem
from statemachine.preflight import gpus_needed
from workers.config_patch import read_yaml_data
from workers.jobs import enqueue_drive, target_queue
from workers.tmux import session_name

NODE_ALIVE_SECONDS = 30.0


class SubmissionRejected(ValueError):
    """The blueprint cannot run: `problems` names each reason and its field."""

    def __init__(self, problems: Sequence[Problem], status: int = 422) -> None:
        self.problems = list(problems)
        self.status = status
        super().__init__("; ".join(str(p) for p in self.problems))


def _inside(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == os.path.realpath(r) or real.startswith(os.path.realpath(r).rstrip("/") + "/")
               for r in roots)


def live_nodes(store: Store, now: float | None = None) -> list[dict[str, Any]]:
    now = now or time.time()
    return [n for n in store.nodes() if now - float(n.get("last_seen", 0)) < NODE_ALIVE_SECONDS]


def submit(
    store: Store,
    conn: redis.Redis,
    text: str,
    *,
    blueprint_path: str = "",
    node: str | None = None,
    priority: str | None = None,
    allowed_roots: Sequence[str] = (),
    check_disk: bool = True,
) -> dict[str, Any]:
    """Record and enqueue the blueprint; returns the new record. Raises SubmissionRejected."""
    bp = parse_blueprint(text)
    problems = validate_blueprint(bp, check_disk=check_disk)
    if allowed_roots:
        for fld in ("exp_codebase_dir", "exp_result_dir"):
            value = getattr(bp, fld)
            if value and not _inside(value, allowed_roots):
                problems.append(Problem(level=Level.error, field=fld,
                                        message=f"{value} is outside the allowed roots ({', '.join(allowed_roots)})"))
    errors = [p for p in problems if p.level == Level.error]
    if errors:
        raise SubmissionRejected(errors)
    needed = 1
    if check_disk:
        try:
            needed = gpus_needed(read_yaml_data(Path(bp.yaml_abspath())))
        except (OSError, ValueError):
            needed = 1
    _check_capacity(store, needed, node)
    exp_id = new_id()
    lc = Lifecycle(id=exp_id)
    queue_name = target_queue(node)
    record = {
        "state": lc.state, "lifecycle": lc.to_dict(), "purpose": bp.exp_purpose, "result_dir": bp.exp_result_dir,
        "max_seconds": bp.exp_max_time_seconds or "", "blueprint": text, "blueprint_json": bp.stored(),
        "blueprint_path": blueprint_path, "target_node": node or "", "node": "", "gpus_needed": needed,
        "priority": priority or "normal", "queue": queue_name, "attempt": 0, "outcome": "",
        "tmux_session": session_name(bp.exp_purpose, exp_id),
        "problems": [p.model_dump(mode="json") for p in problems],
    }
    store.create(exp_id, record, {"message": f"submitted to queue {queue_name}", "purpose": bp.exp_purpose})
    enqueue_drive(conn, store, exp_id, queue_name, at_front=priority == "high",
                  max_seconds=bp.exp_max_time_seconds)
    rec = store.get(exp_id)
    assert rec is not None
    return rec


def _check_capacity(store: Store, needed: int, node: str | None) -> None:
    """Refuse what no live node could ever run; what fits somewhere later simply waits queued."""
    nodes = live_nodes(store)
    if node:
        nodes = [n for n in nodes if n["name"] == node]
    managed = [n for n in nodes if int(n.get("gpus", 0)) > 0]
    if not managed or len(managed) < len(nodes):
        return  # no node reports GPUs (CPU-only, or none alive yet): nothing to judge
    biggest = max(int(n["gpus"]) for n in managed)
    if needed > biggest:
        where = f"node {node}" if node else "any live node"
        raise SubmissionRejected([Problem(
            level=Level.error, field="exp_yaml_path",
            message=f"the run needs {needed} GPUs (n_gpus_per_node x nnodes) but {where} has at most {biggest}",
        )], status=409)
