"""What is stored, typed: the experiment record and the driver's context inside it.

The Redis hash stays a flat map of strings (JSON for the fields in `JSON_FIELDS`); these models are
how the code reads and writes it (`ExperimentRecord.from_hash` / `Records.record`, `Context.to_json`),
so nothing parses the same dict twice. Unknown fields are ignored on read, so an older or newer
record still loads.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from ajet_runner.statemachine.fixes.failure import RepairResult
from ajet_runner.statemachine.lifecycle import FINISHED


def text(value: Any) -> str:
    """A Redis reply (bytes) or an already decoded value, as a str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def plain(value: Any) -> Any:
    """Enums → values, models → dicts, so callers may pass statemachine objects as they are."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return plain(value.model_dump())
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class Loose(BaseModel):
    """A stored shape: extra keys ignored, enums and models accepted where plain values are expected."""

    model_config = ConfigDict(extra="ignore")

    @field_validator("*", mode="before")
    @classmethod
    def _coerce(cls, value: Any) -> Any:
        return plain(value)


_OPTIONAL_ATTEMPT_FIELDS = ("console_evaluations", "console_train_steps", "inputs", "experiment_name", "start_step",
                            "resumed_from", "start_read", "start_read_to", "val_offset", "gpu_check", "unscanned",
                            "queued_seconds", "env_names", "env_withheld", "env_notes", "environment")


class Attempt(Loose):
    """One launch of the command."""

    number: int
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    command: str = ""
    log_path: str = ""
    end_reason: str = ""
    # The console evaluations the watcher read from this attempt's log, kept when it ended so that
    # collecting and relaunching never parse a multi-GB log again (None: an older record).
    console_evaluations: list[dict[str, Any]] | None = None
    # The training steps its log printed a verl training row for, as [first, last] runs (None: an older record).
    console_train_steps: list[list[int]] | None = None
    # What the attempt ran with (ajet_runner.statemachine.fixes.failure.AttemptInputs, dumped): the failing
    # state compares the next attempt's with these (None: an older record, never compared).
    inputs: dict[str, Any] | None = None
    # What the trainer said about where it started (read from the attempt's log): the experiment name
    # AgentJet used, the global step it started from (0 = from scratch) and the checkpoint it resumed.
    experiment_name: str = ""
    start_step: int | None = None
    resumed_from: str = ""
    # True: the watch read the log's head as it streamed by, so the three above are final, "not found"
    # included, and nothing reads the log again for them (None: not known; workers/repair/resume.py reads it).
    start_read: bool | None = None
    # Not settled because a backlog was skipped: the watch read the head from byte 0 up to here (its facts are
    # above), so a reader looks only after it.
    start_read_to: int | None = None
    val_offset: int | None = None  # size of the results file when the attempt started (its own lines follow)
    gpu_check: str = ""  # what the runner's own GPU check before launch saw (empty: no check)
    # Byte ranges of this attempt's log that were never scanned, each {"start", "end", "bytes", "reason"}
    # (e.g. a backlog left when the attempt ended): the report names them.
    unscanned: list[dict[str, Any]] = []
    # The names (never the values) of the variables the job started with, those held back as the control
    # plane's, and a line for each one that could not be passed (workers/executors/environment.py).
    env_names: list[str] = []
    env_withheld: list[str] = []
    env_notes: list[str] = []
    environment: str = ""  # whose environment the job started from
    queued_seconds: float | None = None  # a scheduler's job (SLURM): time it waited for resources, not charged

    @model_serializer(mode="wrap")
    def _without_unset_evaluations(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        for name in _OPTIONAL_ATTEMPT_FIELDS:
            if data.get(name) in (None, "", []):
                data.pop(name, None)  # an older record keeps its shape
        return data


class RepairRecord(Loose):
    """One failure and what the runner did about it (`next` is filled in when collecting)."""

    at: float
    attempt: int
    signature: str = "unknown"
    explanation: str = ""
    log_excerpt: str = ""
    changes: list[str] = []  # what was applied (key old -> new, variable=value, flag, cleanup and its effect)
    skipped: list[str] = []  # what the plan proposed and was not applied, each with why
    diff: str = ""
    source: str = "none"
    result: RepairResult | Literal[""] = ""
    next: str = ""
    identical_to: int | None = None  # the earlier attempt the next one would have repeated
    backoff_seconds: float = 0.0  # waited before an unchanged relaunch (a transient cause)
    # Only when source == "adviser": who advised, why, what it proposed and what became of it.
    advised_by: str = ""
    advice_result: str = ""  # advised | refused | declined | no answer
    advice_diagnosis: str = ""
    rationale: str = ""
    advice: list[str] = []
    advice_changes: list[dict[str, Any]] = []
    refused: list[str] = []
    advice_seconds: float | None = None
    signature_text: str = ""
    suggestion: str = ""

    @field_validator("result", mode="before")
    @classmethod
    def _known_result(cls, value: Any) -> Any:
        """An unknown result (hand-edited, or from a newer version) reads as none rather than failing the record."""
        value = plain(value)
        text = str(value or "").strip().lower()
        return text if text in {r.value for r in RepairResult} else ""

    @property
    def relaunched(self) -> bool:
        return self.result == RepairResult.relaunched


class PendingRepair(Loose):
    """A failure between `running` and `repairing`: what was seen, and (once planned) the fix to apply."""

    cause: dict[str, Any] | None = None  # a ajet_runner.statemachine.models.Finding, dumped
    reason: str = ""
    log_excerpt: str = ""
    log_tail: list[str] = []
    resolved: dict[str, Any] | None = None  # a ajet_runner.statemachine.fixes.repairs resolution, dumped
    advice: dict[str, Any] | None = None  # what the adviser answered (workers/repair/adviser.py)

    def as_dict(self) -> dict[str, Any]:
        """The shape the repair planners and the adviser read (absent keys left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class Context(Loose):
    """What the driver carries across attempts and worker restarts (the record's `ctx` field)."""

    command: str = ""
    env: dict[str, str] = {}
    config_path: str = ""
    cleanup_on_stop: bool = False
    preflight_changes: list[dict[str, Any]] = []
    preflight_problems: list[dict[str, Any]] = []
    preflight_env: dict[str, Any] = {}  # {"environment", "decisions": [...]}
    launcher_hidden: str = ""  # no launcher call in the command: what runs it; no preflight change applied
    attempts: list[Attempt] = []
    repairs: list[RepairRecord] = []
    yaml_changes: list[dict[str, Any]] = []  # preflight + repairs, on the original
    val_path: str = ""
    train_path: str = ""
    val_chosen: bool = False  # the runner chose val_path (a fresh file in the result dir)
    val_start: dict[str, int] = {}  # {"inode", "offset"} of val_path at launch
    previous_run: str = ""  # where an earlier run's files were moved, relative to the result dir
    gpus: list[int] | None = None
    reports_sent: int = 0
    pending_repair: PendingRepair | None = None
    swarm: dict[str, Any] = {}  # swarm mode: spec, reused, server handle
    gang: dict[str, Any] = {}  # multi-node: attempt, MASTER_ADDR/PORT, nnodes, members (for the report)
    advice_asks: int = 0  # times the LLM adviser was asked (AJET_RUNNER_LLM_MAX_ASKS)
    cleanups_done: list[str] = []  # cleanups the last repair did, for the next attempt's inputs

    @field_validator("pending_repair", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return plain(value) or None  # stored as {} when there is none

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Context:
        return cls.model_validate(data or {})

    def to_json(self) -> dict[str, Any]:
        """The stored form (what `from_dict` reads back)."""
        data = self.model_dump(mode="json")
        data["pending_repair"] = self.pending_repair.as_dict() if self.pending_repair else {}
        return data

    def attempt(self, number: int) -> Attempt | None:
        return next((a for a in self.attempts if a.number == number), None)


class ExperimentRecord(Loose):
    """The experiment's Redis hash, typed. `extra` keeps what is not named here (read-only)."""

    model_config = ConfigDict(extra="allow")

    id: str
    version: int = 0
    created_at: float = 0.0
    state: str = "queued"
    outcome: str = ""
    reason: str = ""
    attempt: int = 0
    purpose: str = ""
    result_dir: str = ""
    max_seconds: float | None = None
    blueprint: str = ""
    blueprint_path: str = ""
    blueprint_json: dict[str, Any] = {}
    lifecycle: dict[str, Any] = {}
    ctx: Context = Field(default_factory=Context)
    target_node: str = ""
    node: str = ""
    queue: str = ""
    job_id: str = ""
    priority: str = "normal"
    gpus_needed: int = 1
    nnodes: int = 1  # a multi-node run (> 1): one gang of nnodes nodes x gpus_per_node GPUs
    gpus_per_node: int = 0
    target_nodes: str = ""  # comma-separated: the nodes a multi-node run may use (first = head)
    gpus: list[int] | None = None
    tmux_session: str = ""
    handle: dict[str, Any] | None = None
    owner: str = ""
    lease_until: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    latest_metrics: dict[str, Any] | None = None
    log_tail: list[str] = []
    previous_run: str = ""
    problems: list[dict[str, Any]] = []
    stage: str = ""  # the stage it belongs to (store/cluster/stages.py), if any
    best_metrics: dict[str, Any] | None = None  # once finished: {metric: {"value", "step"}} (the report's best)
    cancel_requested: bool = False
    delete_requested: bool = False

    @field_validator("max_seconds", "started_at", "finished_at", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if value in ("", None) else value

    @field_validator("created_at", "lease_until", "version", "attempt", mode="before")
    @classmethod
    def _blank_is_zero(cls, value: Any) -> Any:
        return 0 if value in ("", None) else value

    @field_validator("gpus_needed", mode="before")
    @classmethod
    def _blank_is_one(cls, value: Any) -> Any:
        return 1 if value in ("", None) else value

    @field_validator("blueprint_json", "lifecycle", "ctx", mode="before")
    @classmethod
    def _none_is_empty_map(cls, value: Any) -> Any:
        return {} if value is None else plain(value)

    @field_validator("log_tail", "problems", mode="before")
    @classmethod
    def _none_is_empty_list(cls, value: Any) -> Any:
        return [] if value is None else plain(value)

    @field_validator("cancel_requested", "delete_requested", mode="before")
    @classmethod
    def _flag(cls, value: Any) -> Any:
        return value in ("1", 1, True)

    @classmethod
    def from_hash(cls, decoded: dict[str, Any]) -> ExperimentRecord:
        """From `store.decode(hgetall)` (JSON fields already decoded)."""
        return cls.model_validate(decoded)

    @property
    def finished(self) -> bool:
        return self.state == FINISHED
