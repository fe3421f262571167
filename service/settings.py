"""Configuration from the environment (prefix AJET_RUNNER_, plus the conventional REDIS_URL)."""

from __future__ import annotations

import socket
from functools import lru_cache

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AJET_RUNNER_", extra="ignore")

    redis_url: str = Field(default="", validation_alias=AliasChoices("REDIS_URL", "AJET_RUNNER_REDIS_URL"))
    node: str = Field(default_factory=socket.gethostname, description="this worker's node name")
    gpus: int | None = Field(default=None, description="GPUs on this node; None = ask nvidia-smi, else 0")
    tmux_socket: str = Field(default="", description="tmux -S socket path; empty = tmux's default server")
    # HTTP API
    token: str = Field(default="", description="bearer token(s), comma separated")
    token_file: str = ""
    allowed_roots: str = Field(default="", description="colon-separated dirs codebase/result dirs must be in")
    max_request_bytes: int = 1_000_000
    metrics_auth: bool = Field(default=False, description="require the token on /metrics too")
    submit_check_disk: bool = Field(default=True, description="check blueprint paths on the API host "
                                    "(turn off when the API does not see the nodes' storage)")
    # Watching and repairs
    poll_interval: float = 0.5
    stop_grace_seconds: float = 30.0
    time_limit_grace_seconds: float = 60.0
    stall_seconds: float = 1800.0
    diagnosis_settle_seconds: float = 60.0
    capacity_wait_seconds: float = 5.0
    slots: int | None = Field(default=None, description="experiments at once on this node; default GPUs or 2")
    plateau_after_fraction: float = 0.5
    plateau_evaluations: int = 4
    plateau_epsilon: float = 0.005
    repair_budget: int = 3
    repair_budget_per_signature: int = 2
    repair_hook: str = Field(default="", description="command that reads JSON on stdin, may answer a plan")
    progress_backoff: str = Field(default="30,60,120,240,480,960", description="seconds between reports")
    lease_seconds: float = 15.0
    redis_outage_wait_seconds: float = 3600.0
    metrics_port: int = 0
    finished_metrics_ttl: float = 3600.0
    # Hardening (issue 18)
    result_reserve_bytes: int = Field(default=4 * 1024 * 1024, description="space reserved in the result dir "
                                      "at launch, released at collecting, so the final files fit on a full disk")
    node_absent_report_seconds: float = Field(default=300.0, description="queued work for a node gone this long "
                                              "is reported (event, metric)")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
