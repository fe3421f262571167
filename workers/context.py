"""What a driver carries across attempts and worker restarts (stored as the record's `ctx` field)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Context:
    """What the driver carries across attempts and restarts (stored as the `ctx` field)."""

    command: str = ""
    env: dict[str, str] = field(default_factory=dict)
    config_path: str = ""
    cleanup_on_stop: bool = False
    preflight_changes: list[dict[str, Any]] = field(default_factory=list)
    preflight_problems: list[dict[str, Any]] = field(default_factory=list)
    preflight_env: dict[str, Any] = field(default_factory=dict)  # {"environment", "decisions": [...]}
    attempts: list[dict[str, Any]] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)
    yaml_changes: list[dict[str, Any]] = field(default_factory=list)  # preflight + repairs, on the original
    val_path: str = ""
    train_path: str = ""
    val_chosen: bool = False  # the runner chose val_path (a fresh file in the result dir)
    val_start: dict[str, int] = field(default_factory=dict)  # {"inode", "offset"} of val_path at launch
    previous_run: str = ""  # where an earlier run's files were moved, relative to the result dir
    gpus: list[int] | None = None
    reports_sent: int = 0
    pending_repair: dict[str, Any] = field(default_factory=dict)
    swarm: dict[str, Any] = field(default_factory=dict)  # swarm mode: spec, reused, server handle
    gang: dict[str, Any] = field(default_factory=dict)  # multi-node: attempt, MASTER_ADDR/PORT, nnodes, members
    advice_asks: int = 0  # times the LLM adviser was asked (AJET_RUNNER_LLM_MAX_ASKS)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Context:
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)
