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
    attempts: list[dict[str, Any]] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)
    yaml_changes: list[dict[str, Any]] = field(default_factory=list)  # preflight + repairs, on the original
    val_path: str = ""
    train_path: str = ""
    gpus: list[int] | None = None
    reports_sent: int = 0
    pending_repair: dict[str, Any] = field(default_factory=dict)
    swarm: dict[str, Any] = field(default_factory=dict)  # swarm mode: spec, reused, server handle
    advice_asks: int = 0  # times the LLM adviser was asked (AJET_RUNNER_LLM_MAX_ASKS)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Context:
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)
