"""What the report shows (`ReportData`, its inputs) and the names of the files it writes."""

from __future__ import annotations

from typing import Any

from pydantic import field_serializer, field_validator

from ajet_runner.resultdir.names import PLOT_NAME, REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME
from ajet_runner.statemachine.logs.results import normalize_key
from ajet_runner.statemachine.models import Evaluation
from ajet_runner.store.records import Attempt, Loose, RepairRecord, plain
from ajet_runner.workers.report.report_consts import (  # noqa: F401 - the names this module always gave
    CELL_CHARS,
    CONTROL_RE,
    COUNT_METRICS,
    DELTA_METRICS,
    LOG_TAIL_LINES,
    NA,
    PIPE_RE,
    REPORT_VERSION,
)

_Input = Loose
AttemptInfo = Attempt  # the name the report code has always used


class ReportData(_Input):
    """Everything the report shows; `results.json` holds exactly this plus computed fields."""

    id: str
    purpose: str = ""
    node: str = ""
    tmux_session: str = ""
    tmux_socket: str = ""
    # Where the attempts ran (workers/executors/): the executor, its host or job, how to attach.
    executor: str = "local"
    ran_on: str = ""
    attach: str = ""
    outcome: str = ""
    reason: str = ""
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    max_seconds: float | None = None
    result_dir: str
    blueprint_path: str = ""
    yaml_path: str = ""
    patched_yaml_path: str = ""
    launcher_hidden: str = ""  # no launcher call in the command: what runs it; no preflight change applied
    attempts: list[AttemptInfo] = []
    preflight_changes: list[dict[str, Any]] = []
    preflight_problems: list[dict[str, Any]] = []
    repairs: list[RepairRecord] = []
    evaluations: list[Evaluation] = []  # stored as Evaluation.to_json writes them
    final: dict[str, Any] = {}
    best: dict[str, Any] = {}
    train_steps: int = 0
    log_tail: list[str] = []
    history: list[dict[str, Any]] = []
    preflight_env: dict[str, Any] = {}  # {"environment", "decisions": [{"variable", "is_set", "decision"}]}
    results_source: str = ""  # where the evaluations came from (file, bytes after launch, console log)
    previous_run: str = ""  # an earlier run's files, moved aside (relative to the result dir)
    nodes: list[dict[str, Any]] = []  # a multi-node run: every rank {rank, node, gpus, session, log, ...}
    master: dict[str, Any] = {}  # a multi-node run: {"master_addr", "master_port", "nnodes"} of the last attempt
    swarm: dict[str, Any] = {}  # swarm mode: {"spec", "reused", "history"} of the swarm server
    # Evaluations of earlier attempts a resume or a restart took out of the curve, each with its
    # attempt and why; and per attempt where training started ({"attempt", "start_step", "how",
    # "resumed_from", "experiment_name"}, how: from scratch | resumed | restarted | start not logged).
    superseded_evaluations: list[dict[str, Any]] = []
    attempt_starts: list[dict[str, Any]] = []
    # What a stage comparison needs besides (statemachine/comparison/compare.py): the launch command as the blueprint
    # gives it, the sweep values this experiment ran with, and its stage.
    launch_command: str = ""
    sweep: dict[str, Any] = {}
    stage: str = ""

    @field_validator("final", "best", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else plain(value)

    @field_validator("evaluations", mode="before")
    @classmethod
    def _stored_evaluations(cls, value: Any) -> Any:
        """The stored form, tolerantly (Evaluation.from_json, metric keys without `(pass@4)` suffixes): an item
        that is no mapping, or names no step, carries no evaluation."""
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            return value
        items = (e.to_json() if isinstance(e, Evaluation) else plain(e) for e in value)
        # the stored form again (not the instances): revalidating an instance goes through model_dump, which
        # leaves the attempt out
        return [e.to_json() for e in (Evaluation.from_json(item, normalize_key) for item in items) if e is not None]

    @field_serializer("evaluations")
    def _evaluations_stored(self, value: list[Evaluation]) -> list[dict[str, Any]]:
        return [e.to_json() for e in value]

    @field_validator("history", "preflight_changes", "preflight_problems", mode="before")
    @classmethod
    def _dicts_only(cls, value: Any) -> Any:
        """Items that are not mappings carry nothing renderable; drop them rather than refuse the report."""
        if value is None:
            return []
        value = plain(value)
        return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else value

__all__ = ["CELL_CHARS", "COUNT_METRICS", "DELTA_METRICS", "LOG_TAIL_LINES", "NA", "PLOT_NAME", "REPAIR_LOG_NAME",
           "REPORT_NAME", "REPORT_VERSION", "RESULTS_NAME", "AttemptInfo", "RepairRecord", "ReportData"]
