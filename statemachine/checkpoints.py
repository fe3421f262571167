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

__all__ = ["AUTO_NAME", "CHECKPOINT_BASE_DEFAULT", "NAME_KEY", "PROJECT_DEFAULT", "StartFacts", "agentjet_name",
           "checkpoint_dir", "explicit_name", "parse_start", "tracker_step"]

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


def parse_start(lines: Iterable[str]) -> StartFacts:
    """Read the facts from cleaned log lines (the first of each counts)."""
    name, step, folder = "", None, ""
    for line in lines:
        if not name and "Experiment Name: " in line and (m := _NAME.search(line)):
            name = m.group(1)
        elif step is None and line.startswith("Setting global step to ") and (m := _STEP.match(line)):
            step = int(m.group(1))
        elif step is None and line.startswith("Training from scratch") and _SCRATCH.match(line):
            step = 0
        elif not folder and line.startswith("Load from checkpoint folder: ") and (m := _FOLDER.match(line)):
            folder = m.group(1)
        if name and step is not None:
            break
    return StartFacts(experiment_name=name, start_step=step, resumed_from=folder if step else "")
