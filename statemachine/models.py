"""Plain data shared by the core and its adapters.

These shapes are a contract: the CLI prints them as JSON, the store keeps them in
Redis, the report renders them. Keep them small, serialisable and free of I/O.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer

BLUEPRINT_FIELDS = (
    "exp_purpose",
    "exp_codebase_dir",
    "exp_venv_exe",
    "exp_yaml_path",
    "exp_launch_command",
    "exp_result_dir",
    "exp_max_time",
)


class Level(str, Enum):
    error = "error"
    warning = "warning"


class Problem(BaseModel):
    """One thing wrong with an input, named by the field it concerns."""

    level: Level
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.level.value}: {self.field}: {self.message}"


_NOT_PUBLIC = {"exp_max_time_text", "exp_swarm_server", "exp_val_result_path", "exp_swarm_declared",
               "exp_swarm_form", "exp_swarm_client_delay_seconds", "exp_yaml_na", "parse_problems", "exp_sweep",
               "exp_sweep_values", "exp_host", "exp_host_source"}


class Blueprint(BaseModel):
    """The 8 parts of an experiment blueprint, as parsed (values are never invented)."""

    exp_purpose: str = ""
    exp_codebase_dir: str = ""
    exp_venv_exe: str = ""
    exp_yaml_path: str = ""
    exp_launch_command: str = ""
    exp_result_dir: str = ""
    exp_max_time_seconds: float | None = None
    notes: str = ""
    exp_max_time_text: str = Field(default="", exclude=True)
    # Swarm mode (optional parts): the swarm server's start command and the client's results file.
    exp_swarm_server: str = ""
    exp_val_result_path: str = ""
    exp_swarm_declared: bool = False  # the [exp_swarm_server] part is present (or split from the command)
    # How swarm mode was written: "part" ([exp_swarm_server]), "bullets" (`- server:` / `- client:`), "tmux" or
    # "background" (split from the launch command), "" (classic, or from the YAML).
    exp_swarm_form: str = ""
    exp_swarm_client_delay_seconds: float | None = None  # the `sleep N` dropped between server and client
    exp_yaml_na: bool = False  # [exp_yaml_path] says NA / N/A / 无 (a swarm client configures its own job)
    # A sweep (statemachine/blueprint/sweep.py): the `[exp_sweep]` part's text as written, and, on each experiment a
    # sweep expanded into, the YAML values that experiment runs with (the preflight applies them).
    exp_sweep: str = ""
    exp_sweep_values: dict[str, Any] = Field(default_factory=dict)
    # The ssh host the experiment runs on (statemachine/shell/ssh_login.py): `user@host:port` or an ssh config alias,
    # "" to run where the worker is; and where the blueprint says so (a login line, [exp_host], the command).
    exp_host: str = ""
    exp_host_source: str = ""
    # What the parser itself found wrong (a command line that is not shell, text after a path, ...):
    # validation reports these first, so `check`, the API and `run` refuse the same blueprint alike.
    parse_problems: list[Problem] = Field(default_factory=list)
    source_lines: int = Field(default=0, exclude=True)  # lines in the text parsed (only the first are read)

    def yaml_abspath(self) -> str:
        """The YAML as an absolute path (relative paths are relative to the codebase)."""
        if not self.exp_yaml_path:
            return ""
        if os.path.isabs(self.exp_yaml_path):
            return os.path.normpath(self.exp_yaml_path)
        return os.path.normpath(os.path.join(self.exp_codebase_dir, self.exp_yaml_path))

    def public(self) -> dict[str, Any]:
        """The JSON shape `ajet-runner check --json` prints under "blueprint"."""
        return self.model_dump(exclude=_NOT_PUBLIC)


    def stored(self) -> dict[str, Any]:
        """What a worker needs: the public parts plus the swarm parts and the max-time text
        (which may state a first-step timeout)."""
        return {**self.public(), **self.model_dump(mode="json", include=_NOT_PUBLIC),
                "exp_max_time_text": self.exp_max_time_text}  # excluded from every dump but this one


class ConfigChange(BaseModel):
    """One change the preflight makes (or proposes) to an AgentJet YAML."""

    key: str
    old: Any = None
    new: Any = None
    reason: str
    unset: bool = False  # remove the key (AgentJet's default applies) instead of setting `new`

    @model_serializer(mode="wrap")
    def _omit_unset_flag(self, handler: Any) -> dict[str, Any]:
        """`unset` appears only when true, so the pinned JSON of ordinary changes stays as it was."""
        data = handler(self)
        if not data.get("unset"):
            data.pop("unset", None)
        return data


class Evaluation(BaseModel):
    """One evaluation of a run (one validation, at one step, on one dataset), the one type from the log line or
    results file a parser read it from to the stage report: the parsers, the rules, the report and its plot hold
    it; `to_json` is its stored form (the report's evaluations, results.json) and `from_json` reads that back,
    tolerant of what older writers stored."""

    step: int
    dataset: str = ""
    metrics: dict[str, float] = Field(default_factory=dict)
    # The attempt that produced it, once the report can tell (a relaunch starts one). model_dump leaves it out (the
    # parsers' summaries and `results --json` keep their contract); to_json writes it when known.
    attempt: int | None = Field(None, exclude=True)

    def get(self, metric: str) -> float | None:
        """The metric's value when it is a finite number; None when absent, NaN or infinite."""
        value = self.metrics.get(metric)
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    def to_json(self) -> dict[str, Any]:
        """{"step", "dataset", "metrics"} and "attempt" when known."""
        out: dict[str, Any] = {"step": self.step, "dataset": self.dataset, "metrics": dict(self.metrics)}
        if self.attempt is not None:
            out["attempt"] = self.attempt
        return out

    @classmethod
    def from_json(cls, raw: Any, key: Callable[[str], str] = str) -> Evaluation | None:
        """The stored form back (None when it holds no step): metrics under "metrics", or a flat dict whose
        other keys are the metrics; numbers as numbers or numeric text ("87.5%" is 87.5); a step under "step"
        or "global_steps". `key` renames each metric key (the parsers' normalize_key)."""
        if not isinstance(raw, dict):
            return None
        step = _whole(raw.get("step", raw.get("global_steps")))
        if step is None:
            return None
        given = raw.get("metrics")
        if not isinstance(given, dict):
            given = {k: v for k, v in raw.items() if k not in ("step", "global_steps", "dataset", "attempt")}
        metrics: dict[str, float] = {}
        for name, value in given.items():
            number = _number(value)
            if number is not None:
                metrics.setdefault(key(str(name)), number)
        return cls.model_construct(step=step, dataset=str(raw.get("dataset") or ""), metrics=metrics,
                                   attempt=_whole(raw.get("attempt")))


def _number(value: Any) -> float | None:
    """A metric value as float (NaN and inf kept), or None when it is no number at all."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip().rstrip("%"))
    except ValueError:
        return None


def _whole(value: Any) -> int | None:
    """A step or attempt number: a finite number, truncated; else None."""
    number = _number(value)
    return int(number) if number is not None and math.isfinite(number) else None


class RepairAction(BaseModel):
    """One step of a repair plan. `kind` decides which other fields matter.

    - set_yaml: `key` (dotted) gets `value`, or its current number times `factor`
      (integers stay integers, never below `minimum`).
    - unset_yaml: remove `key` from the YAML, so AgentJet's default applies.
    - set_env: environment variable `key` = `value` for the next attempt.
    - prefix_command: put `value` (e.g. "proxychains4 -q") before the command when the
      program `requires` is installed; otherwise the action is not applicable.
    - add_flag / remove_flag: a launcher flag (`value`, e.g. "--skip-check-avail-gpu").
    - cleanup: `value` names what to clean: "ray", "gpu_processes", "session".
    - confine_gpus: run on GPUs the runner knows are free (a managed node's, or those nvidia-smi
      reports at least 95 % free: CUDA_VISIBLE_DEVICES) and add `--skip-check-avail-gpu`; the
      runner checks those GPUs itself before launch. Skipped, saying why, when it cannot.

    Actions that share a non-empty `alternative` label are alternatives: only the first one
    that changes something is applied (e.g. a proxy prefix, else offline mode).
    """

    kind: Literal["set_yaml", "unset_yaml", "set_env", "prefix_command", "add_flag", "remove_flag", "cleanup",
                  "confine_gpus"]
    key: str = ""
    value: Any = None
    factor: float | None = None
    minimum: float | None = None
    requires: str = ""
    alternative: str = ""
    description: str = ""


class Finding(BaseModel):
    """A failure signature recognised at one line of a log."""

    signature: str
    fatal: bool
    line: int
    text: str
    explanation: str
    repairable: bool = True
    repair: list[RepairAction] = Field(default_factory=list)


class Diagnosis(BaseModel):
    findings: list[Finding] = Field(default_factory=list)
    completed_run: bool = False

    @property
    def cause(self) -> Finding | None:
        """The first fatal finding: the reason the run failed."""
        return next((f for f in self.findings if f.fatal), None)
