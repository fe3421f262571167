"""Experiment names and verl checkpoints: what a relaunch resumes from. Pure.

AgentJet (`ajet/utils/config_utils.py: prepare_experiment_config`) names an experiment
`<yaml file stem>_<YYYYmmdd_HHMM>` (local time) when `ajet.experiment_name` is unset or
`read_yaml_name`, keeps an explicit name as written (`|` becomes `-`), and logs
`Experiment Name: <name>`. verl saves checkpoints under `trainer.default_local_dir` =
`{checkpoint_base_dir}/{project_name}/{experiment_name}` (relative to the trainer's working
directory), one `global_step_N/` each plus `latest_checkpointed_iteration.txt`; with
`resume_mode: auto` a start whose dir holds a checkpoint prints `Load from checkpoint folder: …`,
`Setting global step to N`, `Resuming from …`, and otherwise `Training from scratch`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["AUTO_NAME", "CHECKPOINT_BASE_DEFAULT", "HEAD_CHARS", "NAME_KEY", "PROJECT_DEFAULT", "StartFacts",
           "StartScan", "agentjet_name", "checkpoint_dir", "explicit_name", "parse_start", "tracker_step"]

NAME_KEY = "ajet.experiment_name"
BASE_KEY = "ajet.trainer_common.checkpoint_base_dir"
PROJECT_KEY = "ajet.project_name"
AUTO_NAME = "read_yaml_name"
CHECKPOINT_BASE_DEFAULT = "./saved_checkpoints"  # ajet_default.yaml
PROJECT_DEFAULT = "ajet_default_project"  # ajet_default.yaml
TRACKER = "latest_checkpointed_iteration.txt"
ISOLATED_DIR = "checkpoints"  # in the result dir: a new experiment whose name already has checkpoints

_NAME = re.compile(r"Experiment Name: (\S.*?)\s*$")
_STEP = re.compile(r"^Setting global step to (\d+)\s*$")
_FOLDER = re.compile(r"^Load from checkpoint folder: (\S.*?)\s*$")
_SCRATCH = re.compile(r"^Training from scratch\s*$")


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def explicit_name(data: Mapping[str, Any]) -> str | None:
    """The name a YAML fixes (as AgentJet would use it), or None when AgentJet picks one at launch."""
    name = _get(data, NAME_KEY)
    if name is None or name == AUTO_NAME:
        return None
    return str(name).replace("|", "-")


def agentjet_name(yaml_path: str, at: float | None = None) -> str:
    """The name AgentJet gives an unnamed experiment launched at `at` (local time, minute resolution)."""
    stem = os.path.basename(yaml_path).replace(".yaml", "")
    return f"{stem}_{time.strftime('%Y%m%d_%H%M', time.localtime(at))}"


def checkpoint_dir(data: Mapping[str, Any], name: str, workdir: str) -> str:
    """`{checkpoint_base_dir}/{project_name}/{experiment_name}`, from the YAML or AgentJet's defaults,
    relative to the working directory the trainer runs in."""
    base = _get(data, BASE_KEY) or CHECKPOINT_BASE_DEFAULT
    project = _get(data, PROJECT_KEY) or PROJECT_DEFAULT
    path = os.path.join(str(base), str(project), name)
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(workdir, path))


def tracker_step(text: str) -> int | None:
    """The step in `latest_checkpointed_iteration.txt`, or None when it does not hold one."""
    text = text.strip()
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class StartFacts:
    """What an attempt's log says about how it started: the experiment name AgentJet used, the global
    step training started from (0 = from scratch; None = not said yet) and the checkpoint it loaded."""

    experiment_name: str = ""
    start_step: int | None = None
    resumed_from: str = ""

    @property
    def complete(self) -> bool:
        return bool(self.experiment_name) and self.start_step is not None


HEAD_CHARS = 32 * 1024 * 1024  # the name and the resume lines come before training: never look further
_START_MARKERS = ("Experiment Name: ", "Setting global step to ", "Training from scratch",
                  "Load from checkpoint folder: ")


def _start_step(line: str) -> int | None:
    """The step a start line names: `Setting global step to N`, or 0 for `Training from scratch`."""
    if line.startswith("Setting global step to ") and (m := _STEP.match(line)):
        return int(m.group(1))
    if line.startswith("Training from scratch") and _SCRATCH.match(line):
        return 0
    return None


class StartScan:
    """The start facts of a log as it streams by (the watch's scanner feeds it each block of lines), so
    nothing at an attempt's end reads the log again for them — "not found" included.

    `settled` says the answer is final: both facts found, or the log's first `limit` characters (or all
    of it, once `close()`d) were seen from its first byte without a gap. A gap (`gap()`: bytes skipped
    before that) unsettles a missing fact: the reader must then look at the log itself."""

    def __init__(self, limit: int = HEAD_CHARS) -> None:
        self.limit = limit
        self.name, self.folder = "", ""
        self.step: int | None = None
        self.seen = 0  # characters of the log looked at, from its start
        self.from_start = True  # fed from byte 0 with no gap
        self.gapped = False  # fed from byte 0 up to a gap: a reader need only look after it
        self.done = False  # nothing more to learn: complete, or past `limit`

    def take(self, line: str) -> bool:
        """One cleaned line (the first of each fact counts); True once both facts are known."""
        if not self.name and "Experiment Name: " in line and (m := _NAME.search(line)):
            self.name = m.group(1)
        elif self.step is None and (step := _start_step(line)) is not None:
            self.step = step
        elif not self.folder and line.startswith("Load from checkpoint folder: ") and (m := _FOLDER.match(line)):
            self.folder = m.group(1)
        return bool(self.name) and self.step is not None

    def feed(self, block: str, lines: Iterable[str]) -> None:
        """A block of cleaned lines (`block` is them joined): one substring test per marker per block,
        the lines themselves only when a marker is in it."""
        if self.done:
            return
        if any(m in block for m in _START_MARKERS):
            for line in lines:
                if self.take(line):
                    self.done = True
                    return
        self.seen += len(block) + 1
        if self.seen >= self.limit:
            self.done = True

    def gap(self) -> None:
        """Bytes after what was fed will not be: a fact not yet found may be in them."""
        if not self.done:
            self.gapped = self.gapped or self.from_start
            self.from_start = False

    def close(self) -> None:
        """The log ended here (everything before was fed): a fact still missing is not in it."""
        if self.from_start:
            self.done = True

    @property
    def settled(self) -> bool:
        return (self.done and self.from_start) or (bool(self.name) and self.step is not None)

    @property
    def facts(self) -> StartFacts:
        step = self.step
        return StartFacts(experiment_name=self.name, start_step=step, resumed_from=self.folder if step else "")

    def checkpoint(self) -> dict[str, Any]:
        return {"name": self.name, "step": self.step, "folder": self.folder, "seen": self.seen,
                "from_start": self.from_start, "gapped": self.gapped, "done": self.done, "limit": self.limit}

    @classmethod
    def resume(cls, state: Mapping[str, Any] | None) -> StartScan:
        """From `checkpoint()`; a scanner saved before this existed (None) knows nothing: not from the start."""
        scan = cls()
        if not isinstance(state, Mapping):
            scan.from_start = False
            return scan
        scan.limit = int(state.get("limit") or HEAD_CHARS)
        scan.name, scan.folder = str(state.get("name") or ""), str(state.get("folder") or "")
        step = state.get("step")
        scan.step = int(step) if step is not None else None
        scan.seen = int(state.get("seen") or 0)
        scan.from_start, scan.done = bool(state.get("from_start")), bool(state.get("done"))
        scan.gapped = bool(state.get("gapped"))
        return scan


def parse_start(lines: Iterable[str]) -> StartFacts:
    """Read the facts from cleaned log lines (the first of each counts)."""
    scan = StartScan()
    for line in lines:
        if scan.take(line):
            break
    return scan.facts
