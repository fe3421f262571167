"""What the HTTP API accepts and answers (the OpenAPI document is generated from these).

Records are stored in Redis as flat strings; `summary_of` / `view_of` turn one into typed JSON.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from ajet_runner.service.api.plain_text import PlainText
from ajet_runner.statemachine.models import Problem
from ajet_runner.store.events import Event

NODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
STREAM_ID_PATTERN = r"^\d{1,20}(-\d{1,20})?$"
STREAM_ID_PART_MAX = 2**64 - 1  # each part of a Redis stream id is an unsigned 64-bit number
MAX_OFFSET = 1_000_000_000  # a list offset (Redis ranges are signed 64-bit: offset + limit must not overflow)
MAX_BYTE_OFFSET = 2**62  # a log byte offset


def stream_id_problem(value: str) -> str | None:
    """Why `value` is not a Redis stream id (`<ms>` or `<ms>-<seq>`, each part at most 2**64-1), or None."""
    if not re.fullmatch(STREAM_ID_PATTERN, value):
        return f"{value[:40]!r} is not a stream id such as 1700000000000-0"
    if any(int(part) > STREAM_ID_PART_MAX for part in value.split("-")):
        return f"{value[:45]!r}: each part of a stream id is at most {STREAM_ID_PART_MAX}"
    return None


def _stream_id(value: str) -> str:
    problem = stream_id_problem(value)
    if problem:
        raise ValueError(problem)
    return value


StreamId = Annotated[str, AfterValidator(_stream_id)]

# The hash fields a summary needs: everything but the blueprint text, ctx and lifecycle.
SUMMARY_FIELDS = (
    "id", "state", "outcome", "reason", "purpose", "node", "target_node", "queue", "priority", "tmux_session",
    "attempt", "created_at", "started_at", "finished_at", "max_seconds", "latest_metrics", "result_dir", "gpus",
    "gpus_needed", "blueprint_path", "cancel_requested", "delete_requested", "problems", "stage",
)
STAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # as ajet_runner.store.cluster.stages.STAGE_PATTERN


class SubmitRequest(BaseModel):
    blueprint: str = Field(..., min_length=1, description="the blueprint's markdown text")
    node: str | None = Field(None, pattern=NODE_PATTERN, description="run on this node only (its own queue)")
    nodes: list[Annotated[str, StringConstraints(pattern=NODE_PATTERN)]] | None = Field(
        None, min_length=1, max_length=64, description="a multi-node run (nnodes > 1): the nodes it may use; the "
        "first is the head (as `node`)")
    priority: Literal["normal", "high"] | None = Field(None, description="high = front of its queue")
    blueprint_path: PlainText | None = Field(None, max_length=4096, description="where the blueprint came from "
                                             "(shown in the report)")
    wait_for_node: bool = Field(False, description="queue it even if no live worker serves `node` yet "
                                                   "(else 422: it would wait for ever)")
    stage: str | None = Field(None, pattern=STAGE_PATTERN, description="put it in this stage (a named group: "
                              "GET /v1/stages/{name}); a sweep blueprint is submitted with POST /v1/stages")


class ExperimentSummary(BaseModel):
    id: str
    state: str
    outcome: str | None = Field(None, description="set once finished: completed, early_stopped, timed_out, "
                                                  "failed, cancelled")
    reason: str = ""
    purpose: str = ""
    node: str | None = Field(None, description="the node that runs (or ran) it")
    target_node: str | None = Field(None, description="the node it was submitted to, if any")
    queue: str = ""
    priority: str = "normal"
    tmux_session: str | None = None
    attempt: int = 0
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    elapsed_seconds: float | None = Field(None, description="since the first launch, until finished")
    max_seconds: float | None = None
    latest_metrics: dict[str, Any] = Field(default_factory=dict)
    result_dir: str = ""
    gpus: list[int] | None = Field(None, description="GPU indices reserved on its node")
    gpus_needed: int = 1
    blueprint_path: str = ""
    cancel_requested: bool = False
    delete_requested: bool = False
    warnings: list[Problem] = Field(default_factory=list, description="non-fatal findings at submission")
    stage: str | None = Field(None, description="the stage it belongs to, if any")


class ExperimentView(ExperimentSummary):
    history: list[dict[str, Any]] = Field(default_factory=list, description="every transition, oldest first")


class SearchWindow(BaseModel):
    """A purpose search reads a bounded window of the newest candidates, not every record."""

    scan_before: str | None = Field(None, description="the cursor this window started at (null: the newest)")
    searched: int = Field(..., description="candidates (experiments matching the other filters) searched")
    candidates: int = Field(..., description="candidates in all, searched or not")
    partial: bool = Field(..., description="true: some candidates were not searched (older, or newer than the "
                          "cursor)")
    next_scan_before: str | None = Field(None, description="pass as scan_before to search the next, older window; "
                                         "null when this window reached the oldest candidate")


class ExperimentPage(BaseModel):
    items: list[ExperimentSummary]
    total: int = Field(..., description="every match (with q: every match in the searched window)")
    limit: int
    offset: int
    search: SearchWindow | None = Field(None, description="with q: which candidates were searched")


class DeleteResult(BaseModel):
    id: str
    deleted: bool = Field(..., description="true: the record is gone; false: it is being stopped and will be "
                                           "dropped once finished")
    state: str | None = None
    outcome: str | None = None


class EventPage(BaseModel):
    id: str
    events: list[Event] = Field(..., description="each event's fields depend on its `type` (store/events.py)")
    next_after: str = Field(..., description="pass as `after` (or Last-Event-ID) to get the events that follow")
    finished: bool = Field(..., description="the experiment is finished and every event was returned")


class NodeView(BaseModel):
    name: str
    alive: bool
    heartbeat_age_seconds: float | None = None
    gpus: int = 0
    gpus_busy: int = 0
    slots: int = 0
    running: list[str] = Field(default_factory=list)
    draining: bool = False
    drained_by: str | None = Field(None, description="who drained it (user@host; a pod's preStop: the pod)")
    drain_reason: str | None = None
    drain_sticky: bool = Field(False, description="an operator's drain: kept when a worker starts")
    drained_at: float | None = None
    pid: int | None = None
    started_at: float | None = None
    last_seen: float | None = None
    executor: str = Field("local", description="where its runs go: local (tmux beside it), ssh, slurm")
    hosts: list[str] = Field(default_factory=list, description="the ssh hosts it serves (executor ssh)")


class ErrorBody(BaseModel):
    detail: str
    problems: list[Problem] = Field(default_factory=list)


def _float(value: Any) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any, default: int = 0) -> int:
    number = _float(value)
    return default if number is None else int(number)


def _flag(value: Any) -> bool:
    return str(value) in ("1", "true", "True")


# How summary_dict reads each field of a record, in the order of the summary.
_SUMMARY_FIELDS: tuple[tuple[str, Callable[[Any], Any] | None], ...] = (  # None: derived in summary_dict
    ("id", None), ("state", None),
    ("outcome", lambda v: v or None), ("reason", lambda v: v or ""), ("purpose", lambda v: v or ""),
    ("node", lambda v: v or None), ("target_node", lambda v: v or None), ("queue", lambda v: v or ""),
    ("priority", lambda v: v or "normal"), ("tmux_session", lambda v: v or None), ("attempt", _int),
    ("created_at", _float), ("started_at", _float), ("finished_at", _float), ("elapsed_seconds", None),
    ("max_seconds", _float), ("latest_metrics", lambda v: v or {}), ("result_dir", lambda v: v or ""),
    ("gpus", lambda v: v or None), ("gpus_needed", lambda v: _int(v, 1)), ("blueprint_path", lambda v: v or ""),
    ("cancel_requested", _flag), ("delete_requested", _flag), ("warnings", None), ("stage", lambda v: v or None),
)


def summary_dict(rec: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    started, finished = _float(rec.get("started_at")), _float(rec.get("finished_at"))
    elapsed = None
    if started:
        elapsed = round(max(0.0, (finished or now or time.time()) - started), 3)
    derived = {"id": rec.get("id", ""), "state": rec.get("state", ""), "elapsed_seconds": elapsed, "warnings": [
        p for p in rec.get("problems") or [] if isinstance(p, dict) and p.get("level") == "warning"]}
    return {k: derived[k] if read is None else read(rec.get(k)) for k, read in _SUMMARY_FIELDS}


def view_dict(rec: dict[str, Any]) -> dict[str, Any]:
    history = (rec.get("lifecycle") or {}).get("history") or []
    return {**summary_dict(rec), "history": history}


def _drain_fields(info: dict[str, Any]) -> dict[str, Any]:
    """Whether the node is drained, and by whom, why, since when and whether it stays so across restarts."""
    drain = info.get("drain") if isinstance(info.get("drain"), dict) else None
    if not drain:
        return {"draining": bool(info.get("draining")), "drained_by": None, "drain_reason": None,
                "drain_sticky": False, "drained_at": None}
    return {"draining": True, "drained_by": drain.get("by"), "drain_reason": drain.get("reason"),
            "drain_sticky": bool(drain.get("sticky")), "drained_at": _float(drain.get("at"))}


def node_dict(info: dict[str, Any], now: float, alive_seconds: float) -> dict[str, Any]:
    last_seen = _float(info.get("last_seen"))
    age = round(max(0.0, now - last_seen), 3) if last_seen else None
    return {
        "name": info.get("name", ""), "alive": age is not None and age < alive_seconds,
        "heartbeat_age_seconds": age, "gpus": _int(info.get("gpus")), "gpus_busy": _int(info.get("gpus_busy")),
        "slots": _int(info.get("slots")), "running": list(info.get("running") or []),
        **_drain_fields(info),
        "pid": info.get("pid"), "started_at": _float(info.get("started_at")), "last_seen": last_seen,
        "executor": str(info.get("executor") or "local"), "hosts": [str(h) for h in info.get("hosts") or []],
    }
