"""Configuration from the environment (prefix AJET_RUNNER_, plus the conventional REDIS_URL)."""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AJET_RUNNER_", extra="ignore")

    redis_url: str = Field(default="", validation_alias=AliasChoices("REDIS_URL", "AJET_RUNNER_REDIS_URL"))
    # Redis Sentinel instead of one URL (store/clients.py builds every client from these)
    redis_sentinels: str = Field(default="", description="host:port,host:port,... of the sentinels; with "
                                 "redis_master, used instead of REDIS_URL (never both)")
    redis_master: str = Field(default="", description="the master name the sentinels monitor")
    redis_db: int = Field(default=0, ge=0, description="the database number on the sentinels' master")
    redis_password: SecretStr = Field(default=SecretStr(""), description="Redis password, for the master and the "
                                      "sentinels alike (or for REDIS_URL when it holds none)")
    redis_retry_seconds: float = Field(default=10.0, ge=0, description="a Redis command that meets a lost "
                                       "connection or no known master is retried with backoff this long "
                                       "(covers a Sentinel failover) before it fails")
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
    ui_session_seconds: int = Field(default=43200, description="web console login lifetime (seconds)")
    allowed_hosts: str = Field(default="", description="comma-separated Host names the API and console answer "
                               "(name, name:port, *.domain, *); empty: any with a token, loopback names with "
                               "the port without one (serve --insecure)")
    trust_proxy: str = Field(default="", description="reverse proxies whose X-Forwarded-Proto/-For are believed "
                             "(comma-separated addresses or networks; * or true: any): console cookies are "
                             "Secure behind a TLS proxy; empty: uvicorn's default (127.0.0.1 only)")
    # Watching and repairs
    poll_interval: float = 1.0  # the exit, a stop, a hand-back and the time limit wake the loop at once
    stop_grace_seconds: float = 30.0
    pane_linger_seconds: float = Field(default=300.0, ge=0, description="a finished attempt's tmux pane stays "
                                       "open this long (to attach and read its end); 0 = it closes at once")
    time_limit_grace_seconds: float = 60.0
    stall_seconds: float = 1800.0
    first_step_seconds: float = Field(default=1200.0, description="no training step within this long = "
                                      "first_step_timeout (a blueprint's [exp_max_time] text may set its own)")
    swarm_boot_timeout_seconds: float = Field(default=900.0, description="a swarm server must listen within this")
    diagnosis_settle_seconds: float = 8.0  # per signature: catalogue.yaml settle_seconds
    finished_retention_days: float = Field(default=30.0, ge=0, description="a finished record (hash, events, "
                                           "log tail) expires from Redis this long after it finished; 0 = never "
                                           "(the result dir keeps the report for ever)")
    capacity_wait_seconds: float = 5.0
    search_window: int = Field(default=1000, ge=1, le=100_000, description="experiments a purpose search (API q=, "
                               "console search) reads at most per request, newest first; older ones: next window")
    # Multi-node runs (nnodes > 1)
    node_address: str = Field(default="", description="MASTER_ADDR when this node is a gang's head (worker "
                              "--address); empty = its hostname as the experiment sees it")
    gang_start_timeout_seconds: float = Field(default=300.0, description="the non-head ranks must all run "
                                              "within this, else the attempt fails (gang_member_lost)")
    gang_member_grace_seconds: float = Field(default=30.0, description="a non-head rank whose job's lease ran "
                                             "out longer ago than this counts as lost")
    slots: int | None = Field(default=None, description="experiments at once on this node; default GPUs or 2")
    plateau_after_fraction: float = 0.5
    plateau_evaluations: int = 4
    plateau_epsilon: float = 0.005
    repair_budget: int = 3
    repair_budget_per_signature: int = 2
    repair_backoff_scale: float = Field(default=1.0, ge=0, description="multiplies the catalogue's waits before an "
                                        "unchanged relaunch of a transient cause (network, busy GPUs)")
    repair_hook: str = Field(default="", description="command that reads JSON on stdin, may answer a plan")
    # LLM repair adviser (off unless llm_url is set); the key is a SecretStr: never printed or logged
    llm_url: str = Field(default="", description="OpenAI-compatible endpoint (base URL or .../chat/completions)")
    llm_model: str = Field(default="", description="model name sent to the endpoint")
    llm_api_key: SecretStr = Field(default=SecretStr(""), description="bearer key for the endpoint")
    llm_api_key_file: str = Field(default="", description="file whose first line is the key (read at each ask)")
    llm_timeout_seconds: float = Field(default=120.0, gt=0)
    llm_max_asks: int = Field(default=2, ge=0, description="adviser asks per experiment")
    llm_prefixes: str = Field(default="proxychains4 -q", description="comma-separated command prefixes "
                              "the adviser may propose")
    llm_json_mode: bool = Field(default=True, description="ask for response_format json_object")
    catalogue_extra: str = Field(default="", description="YAML file of adopted site catalogue entries")
    catalogue_suggestions: str = Field(default="", description="YAML file advised repairs that worked are "
                                       "appended to (default: ~/.local/share/ajet-runner/...)")
    progress_backoff: str = Field(default="30,60,120,240,480,960", description="seconds between reports")
    lease_seconds: float = 15.0
    redis_outage_wait_seconds: float = 3600.0
    metrics_port: int = 0
    metrics_host: str = Field(default="127.0.0.1", description="address a worker's /metrics listens on "
                              "(0.0.0.0: every interface, as the chart sets it for Prometheus and the probes)")
    finished_metrics_ttl: float = 3600.0
    # Hardening
    result_reserve_bytes: int = Field(default=4 * 1024 * 1024, description="space reserved in the result dir "
                                      "at launch, released at collecting, so the final files fit on a full disk")
    node_absent_report_seconds: float = Field(default=300.0, description="queued work for a node gone this long "
                                              "is reported (event, metric)")
    # Notifications (workers/notify/): a JSON POST when an experiment and when a stage finishes
    webhook_url: str = Field(default="", description="http(s) URL every experiment's and stage's finish is posted "
                             "to (a stage's own webhook URL replaces it for that stage); empty: none")
    webhook_secret: SecretStr = Field(default=SecretStr(""), description="HMAC-SHA256 key: each POST carries "
                                      "X-Ajet-Runner-Signature: sha256=<hex of the body's HMAC>")
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, description="deadline of one POST in all: DNS, "
                                           "connect, send and read")
    extra_job_functions: str = Field(default="", description="comma-separated dotted names of more job functions "
                                     "a worker may run (tests, site extensions); any other name a queued job carries "
                                     "is refused")
    webhook_allow_http: bool = Field(default=False, description="plain http:// webhooks to hosts other than "
                                     "loopback (default: https:// only)")
    webhook_concurrency: int = Field(default=8, ge=1, le=256, description="webhook POSTs a worker has in flight "
                                     "at once (one per receiver: a slow receiver never holds up another)")
    webhook_max_attempts: int = Field(default=10, ge=1, description="tries per notification (backoff 2 s, "
                                      "doubling, at most webhook_backoff_cap_seconds) before it is given up")
    webhook_backoff_cap_seconds: float = Field(default=300.0, gt=0)
    outbox_poll_seconds: float = Field(default=1.0, gt=0, description="how often a worker looks for due "
                                       "notifications (webhooks, stage reports)")
    # Executors: where this worker's attempts run (workers/executors/, docs/executors.md)
    executor: str = Field(default="local", description="local (tmux beside the worker), ssh (a tmux server on the "
                          "hosts a blueprint names) or slurm (a batch job per attempt)")
    hosts: str = Field(default="", description="comma-separated ssh hosts (aliases or user@host[:port]) this worker "
                       "serves")
    ssh_unreachable_seconds: float = Field(default=300.0, gt=0, description="an ssh host that does not answer "
                                           "this long: its run is given up as lost, naming the host")
    ssh_config: str = Field(default="", description="OpenSSH client config file for the ssh executor; empty: "
                            "~/.ssh/config")
    slurm_partition: str = Field(default="", description="sbatch --partition; empty: the cluster's default")
    slurm_args: str = Field(default="", description="more sbatch arguments, as a shell would split them "
                            "(--account, --qos, --constraint, ...)")


    def suggestions_path(self) -> Path:
        """Where advised repairs that worked are suggested as catalogue entries."""
        if self.catalogue_suggestions:
            return Path(self.catalogue_suggestions).expanduser()
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        return Path(base) / "ajet-runner" / "catalogue_suggestions.yaml"

    def adviser_problems(self) -> list[str]:
        """Why the LLM adviser settings cannot work (empty when fine or off); the key is never shown."""
        url = self.llm_url.strip()
        if not url:
            return []
        problems = []
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https") or not rest.strip("/"):
            problems.append(f"AJET_RUNNER_LLM_URL must be an http(s) URL, got {url!r}")
        if self.llm_api_key_file and not os.access(self.llm_api_key_file, os.R_OK):
            problems.append(f"AJET_RUNNER_LLM_API_KEY_FILE is not readable: {self.llm_api_key_file}")
        return problems


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
