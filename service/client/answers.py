"""Typed answers of the HTTP API for the Python client: experiment, event, node, page.

Fields the server adds later (a newer server, another feature) are kept, not dropped
(`extra="allow"`), and every model also reads like the dict it came from (`rec["state"]`,
`rec.get("outcome")`), so code written against the earlier dict answers keeps working.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

FINISHED = "finished"
SUCCEEDED = ("completed", "early_stopped")


class Record(BaseModel):
    """A model that is also read like a mapping (`[]`, `get`, `in`, `keys`)."""

    # defer_build: a model's validator is built when it first validates, not at import (a CLI call uses one
    # or two of these models, and building all of them cost every call ~10% of its start-up).
    model_config = ConfigDict(extra="allow", defer_build=True)

    def _has(self, key: str) -> bool:
        return key in type(self).model_fields or key in (self.model_extra or {})

    def __getitem__(self, key: str) -> Any:
        if not self._has(key):
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if self._has(key) else default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._has(key)

    def keys(self) -> list[str]:
        return list(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, every field including unknown ones."""
        return self.model_dump(mode="json")


class Experiment(Record):
    id: str
    state: str
    outcome: str | None = None
    reason: str = ""
    purpose: str = ""
    node: str | None = None
    target_node: str | None = None
    queue: str = ""
    priority: str = "normal"
    tmux_session: str | None = None
    attempt: int = 0
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    elapsed_seconds: float | None = None
    max_seconds: float | None = None
    latest_metrics: dict[str, Any] = Field(default_factory=dict)
    result_dir: str = ""
    gpus: list[int] | None = None
    gpus_needed: int = 1
    blueprint_path: str = ""
    cancel_requested: bool = False
    delete_requested: bool = False
    warnings: list[dict[str, Any]] = Field(default_factory=list)
    history: list[dict[str, Any]] = Field(default_factory=list)
    stage: str | None = None

    @property
    def finished(self) -> bool:
        return self.state == FINISHED

    @property
    def succeeded(self) -> bool:
        return self.finished and self.outcome in SUCCEEDED


class ExperimentPage(Record):
    items: list[Experiment]
    total: int
    limit: int
    offset: int
    search: dict[str, Any] | None = None  # with q: {start, end, candidates, partial, next_scan_from}


class Event(Record):
    """One published event; its type-specific fields (`to`, `step`, `metrics`, ...) are extras."""

    type: str = "message"
    event_id: str = ""
    at: float | None = None


class EventPage(Record):
    id: str
    events: list[Event]
    next_after: str
    finished: bool


class Node(Record):
    """A worker's node record; fields added by newer servers (drain details, ...) are kept as extras."""

    name: str
    alive: bool = False
    heartbeat_age_seconds: float | None = None
    gpus: int = 0
    gpus_busy: int = 0
    slots: int = 0
    running: list[str] = Field(default_factory=list)
    draining: bool = False


class DeleteResult(Record):
    id: str
    deleted: bool
    state: str | None = None
    outcome: str | None = None


class Stage(Record):
    """A stage: counts by state and outcome, its best mean_reward, and (from `stage(name)`) its experiments."""

    name: str
    created_at: float | None = None
    dir: str = ""
    webhook: bool = False
    total: int = 0
    states: dict[str, int] = Field(default_factory=dict)
    outcomes: dict[str, int] = Field(default_factory=dict)
    finished: bool = False
    succeeded: bool = False
    best: dict[str, Any] | None = None
    report: str | None = None
    experiments: list[Experiment] = Field(default_factory=list)


class StageSubmission(Record):
    """What a stage submission did: the experiments submitted, and those refused with their problems."""

    stage: str
    stage_dir: str = ""
    experiments: list[Experiment] = Field(default_factory=list)
    refused: list[dict[str, Any]] = Field(default_factory=list)
