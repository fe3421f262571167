"""Check an AgentJet YAML and launch command before the first attempt, and plan the fixes.

The rules come from what makes real runs fail or waste their time slot (see
docs/background.md#agentjet-yaml-and-launch): the test probe that ends training
early, a bare result file name that crashes the first validation, a swanlab logger with no
key, `--autokill` that would kill every python process on a shared node. The plan is pure
data; a worker writes the patched YAML copy and runs `plan.command`.

When a key is absent, AgentJet's own default (ajet/default_config/ajet_default.yaml)
applies, so the rules reason with those defaults: `logger: swanlab`, `test_freq: 20`,
`total_epochs: 50`, `n_gpus_per_node: 8`, `nnodes: 1`, `val_before_train: False`,
`execute_test: False`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from ajet_runner.statemachine.blueprint.parse import template_placeholders, validate_blueprint
from ajet_runner.statemachine.blueprint.swarm_blueprint import SwarmSpec, swarm_problems, swarm_spec
from ajet_runner.statemachine.blueprint.sweep import sweep_changes
from ajet_runner.statemachine.blueprint.yamlload import load_yaml_file
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.fixes.repairs import MISSING, get_dotted, set_dotted
from ajet_runner.statemachine.logs import checkpoints as ckpt
from ajet_runner.statemachine.models import Blueprint, ConfigChange, Level, Problem
from ajet_runner.statemachine.shell import command as cmdlib
from ajet_runner.statemachine.shell.script_launcher import hidden_launcher
from ajet_runner.statemachine.shell.syntax import unquote

__all__ = [
    "EnvDecision",
    "SECONDS_PER_STEP_GUESS",
    "TRAIN_RESULT_RELPATH",
    "VAL_RESULT_RELPATH",
    "PreflightPlan",
    "gang_shape",
    "gpu_check_decision",
    "gpus_needed",
    "launch_workdir",
    "nnodes",
    "plan_preflight",
    "preflight",
]

TC = "ajet.trainer_common"
VAL_KEY = f"{TC}.val_print_to_markdown_file_path"
TRAIN_KEY = f"{TC}.train_print_to_markdown_file_path"
VAL_RESULT_RELPATH = "saved_val_result/val.md"
TRAIN_RESULT_RELPATH = "saved_train_result/train.md"
AGENTJET_DEFAULTS: dict[str, Any] = {
    f"{TC}.logger": "swanlab",
    f"{TC}.test_freq": 20,
    f"{TC}.total_epochs": 50,
    f"{TC}.n_gpus_per_node": 8,
    f"{TC}.nnodes": 1,
}
WITH_RAY = "--with-ray"
WITH_RAY_CLUSTER = "--with-ray-cluster"
SECONDS_PER_STEP_GUESS = 60.0
"""A fast RL step (rollout + update) on one node; real steps take 1 to 10 minutes.

A run whose `total_training_steps` at this pace would end before half of `exp_max_time` is
flagged as too short: it leaves most of its slot unused, whatever the real step time is.
"""
SHORT_RUN_SHARE = 0.5
NEVER_TEST_FREQ = 100_000
AUTOKILL_REASON = (
    "--autokill runs `ray stop --force` and kills every process on the host whose command line "
    "contains python, ray or vllm (other experiments and this runner included); replaced by a "
    "scoped cleanup of this experiment's own processes. Without it the launcher checks that "
    "every GPU is at least 95% free before training."
)
KILL_REASON = (
    "--kill <keywords> kills every process on the host matching the keywords; replaced by a "
    "scoped cleanup of this experiment's own processes"
)
# AgentJet's own environment check looks only at SWANLAB_API_KEY (SWANLAB_MODE=offline does
# not satisfy it: the run still stops at start), so swanlab has no local-mode exemption.
_LOGGER_CREDENTIALS = {
    "swanlab": ("SWANLAB_API_KEY", "", set()),
    "wandb": ("WANDB_API_KEY", "WANDB_MODE", {"offline", "disabled", "dryrun"}),
}


class EnvDecision(BaseModel):
    """A preflight decision that depended on the environment: which variable, what it decided."""

    variable: str
    is_set: bool
    decision: str


class PreflightPlan(BaseModel):
    """What to change before launching, and what is wrong or worth knowing."""

    changes: list[ConfigChange] = Field(default_factory=list)
    command: str = ""
    command_changes: list[ConfigChange] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list)
    cleanup_on_stop: bool = False
    gpus_needed: int | None = None
    nnodes: int = 1
    val_result_path: str = ""
    train_result_path: str = ""
    env_decisions: list[EnvDecision] = Field(default_factory=list)
    environment: str = ""  # whose environment the env-dependent decisions read
    swarm: dict[str, Any] | None = None  # {"server_command", "port"} for a swarm experiment
    launcher_hidden: str = ""  # no launcher call in the command: what runs it, and that no change applies

    @property
    def ok(self) -> bool:
        """No error: the experiment may be launched (after applying the changes)."""
        return not any(p.level == Level.error for p in self.problems)


def read_yaml_data(path: Path | str) -> dict[str, Any]:
    """The YAML's data (PyYAML safe_load), `{}` when its root is not a mapping.

    A YAML syntax error propagates as `yaml.YAMLError`.
    """
    data = load_yaml_file(path)
    return data if isinstance(data, dict) else {}


def _int(value: Any) -> int | None:
    """An integer setting, or None when it is not one (bools and junk included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _setting(data: Mapping[str, Any], key: str) -> Any:
    """The value AgentJet will use: the YAML's, else AgentJet's default."""
    value = get_dotted(data, key, MISSING)
    return AGENTJET_DEFAULTS.get(key) if value is MISSING or value is None else value


def gpus_needed(yaml_data: Mapping[str, Any]) -> int:
    """GPUs the run asks for: `n_gpus_per_node` x `nnodes` (AgentJet defaults 8 x 1)."""
    data = yaml_data if isinstance(yaml_data, Mapping) else {}
    per_node = _int(_setting(data, f"{TC}.n_gpus_per_node"))
    nodes = _int(_setting(data, f"{TC}.nnodes"))
    per_node = per_node if per_node is not None and per_node > 0 else 8
    nodes = nodes if nodes is not None and nodes > 0 else 1
    return per_node * nodes


def nnodes(yaml_data: Mapping[str, Any]) -> int:
    """Nodes the run spans (`ajet.trainer_common.nnodes`, default 1)."""
    data = yaml_data if isinstance(yaml_data, Mapping) else {}
    nodes = _int(_setting(data, f"{TC}.nnodes"))
    return nodes if nodes is not None and nodes > 0 else 1


def gang_shape(yaml_data: Mapping[str, Any]) -> tuple[int, int]:
    """(nodes, GPUs per node) of the run: a multi-node run holds `per node` GPUs on each of `nodes` nodes."""
    nodes = nnodes(yaml_data)
    return nodes, gpus_needed(yaml_data) // nodes


def _saved_step(directory: str) -> int | None:
    """The step verl would resume from in a checkpoint dir (its tracker naming an existing
    global_step_N), else None."""
    try:
        with open(os.path.join(directory, ckpt.TRACKER), encoding="utf-8") as fh:
            step = ckpt.tracker_step(fh.read(64))
    except (OSError, UnicodeDecodeError):
        return None
    return step if step is not None and os.path.isdir(os.path.join(directory, f"global_step_{step}")) else None


def _duration(seconds: float) -> str:
    return format_limit(seconds)


def _console_instead(value: Any, names: list[str], gone: set[str]) -> Any:
    """The logger setting with the loggers in `gone` replaced by console (a string stays a string)."""
    if isinstance(value, str):
        return "console"
    new: list[str] = []
    for name in names:
        name = "console" if name in gone else name
        if name not in new:
            new.append(name)
    return new


def _absolute_result_dir(bp: Blueprint) -> str:
    """exp_result_dir, a relative one under the codebase dir ("" when not given)."""
    result_dir = bp.exp_result_dir
    if result_dir and not os.path.isabs(result_dir) and bp.exp_codebase_dir:
        result_dir = os.path.join(bp.exp_codebase_dir, result_dir)
    return result_dir


def _result_file_reason(given: str, *, sweep: bool) -> str:
    """Why the runner sets a result file's path in the result dir (`given`: the YAML's value, "" if none)."""
    if given and sweep:
        return "the experiments of a sweep run at once: each writes its own file in its own result dir"
    if given:
        return "a bare file name crashes the first validation (its directory is '')"
    return "without it the metrics exist only in the console log"


def _names_with_checkpoints(data: dict[str, Any], workdir: str, names: list[str]) -> list[tuple[str, str, int]]:
    """(name, checkpoint dir, latest saved step) of each name whose checkpoint dir already holds a checkpoint."""
    taken: list[tuple[str, str, int]] = []
    for name in names:
        where = ckpt.checkpoint_dir(data, name, workdir)
        step = _saved_step(where)
        if step is not None:
            taken.append((name, where, step))
    return taken


def _hazards(analysis: cmdlib.CommandAnalysis) -> list[str]:
    """The hazardous flags (`--autokill`, …) the launcher calls of a command carry."""
    return [h for call in analysis.calls for h in call.hazards]


def _listed_gpus(visible: str) -> int:
    """How many GPUs a CUDA_VISIBLE_DEVICES value lists."""
    return len([d for d in visible.split(",") if d.strip()])


class _Planner:
    def __init__(self, bp: Blueprint, env: Mapping[str, str] | None) -> None:
        self.bp = bp
        self.env = env
        self.problems: list[Problem] = []
        self.changes: list[ConfigChange] = []
        self.env_decisions: list[EnvDecision] = []
        self.hidden = ""  # no visible launcher call: why no change applies (statemachine/shell/script_launcher.py)

    def read_env(self, variable: str, decision: str) -> None:
        self.env_decisions.append(EnvDecision(variable=variable, is_set=bool((self.env or {}).get(variable)),
                                              decision=decision))

    def problem(self, level: Level, field: str, message: str) -> None:
        self.problems.append(Problem(level=level, field=field, message=message))

    def change(self, key: str, old: Any, new: Any, reason: str) -> None:
        old = None if old is MISSING else old
        self.changes.append(ConfigChange(key=key, old=old, new=new, reason=reason))

    # -- the command ---------------------------------------------------------------------

    def workdir(self, cmd: str) -> str:
        """Where the launcher runs: the codebase dir, moved by any `cd X` before the launcher."""
        cwd = self.bp.exp_codebase_dir
        segments = cmdlib.split_chain(cmd)
        stop = cmdlib.launcher_segment(cmd)
        for segment in segments[: stop if stop is not None else len(segments)]:
            try:
                words = shlex.split(segment)
            except ValueError:
                continue
            if len(words) == 2 and words[0] in ("cd", "pushd") and not words[1].startswith(("-", "$", "~")):
                cwd = os.path.join(cwd, words[1])
        return os.path.normpath(cwd) if cwd else ""

    def hidden_launcher(self, cmd: str) -> None:
        """No launcher call in the command: read the script that runs it (statemachine/shell/script_launcher.py) and
        say that no preflight change applies (`self.hidden`; plan_preflight turns the changes into advice)."""
        hidden = hidden_launcher(cmd, self.workdir(cmd))
        self.hidden = hidden.sentence() if hidden is not None else (
            "no launcher call is visible in the command, so no preflight change applies (the YAML, flags and "
            "command run as written)")
        self.problem(Level.warning, "exp_launch_command", self.hidden)
        if hidden is None or not hidden.conf or not self.bp.exp_yaml_path:
            return
        base = os.path.dirname(hidden.script) if hidden.script.lower().endswith("makefile") else self.workdir(cmd)
        if os.path.normpath(os.path.join(base, hidden.conf)) != self.bp.yaml_abspath():
            self.problem(Level.warning, "exp_launch_command", f"the script's --conf {hidden.conf} is not "
                         f"exp_yaml_path {self.bp.exp_yaml_path}: the checks below read exp_yaml_path")

    def plan_command(self) -> tuple[str, list[ConfigChange], bool]:
        """The command to run: every launcher call rewritten, or an error naming what cannot be read.

        Works on all launcher calls (chains, subshells, functions, `bash -c` strings, heredocs fed
        to a shell); anything the analysis cannot read with certainty is refused, never guessed.
        """
        field = "exp_launch_command"
        original = self.bp.exp_launch_command.strip("\n")
        analysis = self.analyze(original)
        if analysis is None or analysis.refusals or not analysis.calls:
            return original, [], False
        changes: list[ConfigChange] = []
        spelled = _hazards(analysis)
        cmd = self.drop_hazards(original, spelled, changes)
        written = self.check_confs(cmd)
        cmd = self.pin_expanded_conf(cmd, changes)
        final = cmdlib.analyze_command(cmd)
        left = _hazards(final)
        if left or final.refusals:
            self.problem(Level.error, field, "the rewritten command still carries "
                         + ", ".join([*left, *final.refusals]))
        if self.bp.exp_yaml_path:
            self._other_confs(cmd, written)
        return cmd, changes, bool(spelled)

    def _other_confs(self, cmd: str, written: set[str]) -> None:
        """A warning for each `--conf` of the command that is not exp_yaml_path (the one the runner checks)."""
        for conf in sorted(written):
            resolved = os.path.normpath(os.path.join(self.workdir(cmd), conf))
            if resolved != self.bp.yaml_abspath():
                self.problem(Level.warning, "exp_launch_command",
                             f"--conf {conf} is not exp_yaml_path {self.bp.exp_yaml_path}; "
                             f"the runner checks and patches exp_yaml_path")

    def analyze(self, original: str) -> cmdlib.CommandAnalysis | None:
        """The command's analysis, its refusals and notes said as problems (None: the command is empty)."""
        field = "exp_launch_command"
        if not original.strip():
            self.problem(Level.error, field, "the launch command is empty")
            return None
        analysis = cmdlib.analyze_command(original)
        for reason in analysis.refusals:
            self.problem(Level.error, field, f"cannot be run safely: {reason}")
        if not analysis.calls and not analysis.refusals:
            self.hidden_launcher(original)
        read = "script the runner does not look into"  # a note the hidden-launcher sentence replaces
        for note in (n for n in analysis.notes if not (self.hidden and read in n)):
            self.problem(Level.warning, field, note)
        return analysis

    def drop_hazards(self, cmd: str, spelled: list[str], changes: list[ConfigChange]) -> str:
        """The command without the `--autokill` / `--kill` spellings in `spelled` (each removal a change)."""
        if not spelled:
            return cmd
        kinds = {cmdlib.hazard_of(unquote(h)) for h in spelled}
        reason = "; ".join(r for flag, r in (("--autokill", AUTOKILL_REASON), ("--kill", KILL_REASON))
                           if flag in kinds)
        where = ", ".join(dict.fromkeys(f"`{h}`" for h in spelled))
        new = cmdlib.remove_hazards(cmd)
        changes.append(ConfigChange(key="exp_launch_command", old=cmd, new=new, reason=f"removed {where}: {reason}"))
        return new

    def check_confs(self, cmd: str) -> set[str]:
        """Every launcher call needs one --conf, and all name one YAML; the --conf values written out."""
        field = "exp_launch_command"
        calls = cmdlib.analyze_command(cmd).calls
        if any(call.conf is None for call in calls):
            self.problem(Level.error, field, "the launcher is run without --conf <yaml>"
                         + (f" ({len(calls)} launcher calls, each needs one)" if len(calls) > 1 else ""))
        written = {call.conf for call in calls if call.conf is not None and not call.conf_expanded}
        if len(written) > 1:
            self.problem(Level.error, field,
                         f"the launcher calls name different YAMLs ({', '.join(sorted(written))}); the runner "
                         "checks and patches one (exp_yaml_path): one experiment per YAML")
        return written

    def pin_expanded_conf(self, cmd: str, changes: list[ConfigChange]) -> str:
        """A --conf only known at run time is pointed at exp_yaml_path (or refused when there is none)."""
        field = "exp_launch_command"
        expanded = [call.conf for call in cmdlib.analyze_command(cmd).calls if call.conf_expanded]
        if not expanded:
            return cmd
        if not self.bp.exp_yaml_path:
            self.problem(Level.error, field, f"--conf {expanded[0]} is only known at run time and there is no "
                         "exp_yaml_path to use instead")
            return cmd
        new = cmdlib.replace_conf(cmd, self.bp.exp_yaml_path)
        changes.append(ConfigChange(
            key=field, old=cmd, new=new,
            reason=f"--conf {expanded[0]} is only known at run time; pointed at exp_yaml_path "
                   f"{self.bp.exp_yaml_path}, which the runner checks and patches"))
        return new

    # -- the YAML --------------------------------------------------------------------------

    def parse(self, text: str) -> dict[str, Any] | None:
        names = template_placeholders(text[:1_000_000])
        if names:
            self.problem(Level.error, "exp_yaml_path", f"the YAML is a template, not a config: it still holds the "
                         f"placeholder(s) {', '.join(names)}; fill them in")
            return None
        try:
            data = yaml.safe_load(text)
        except Exception as exc:  # noqa: BLE001 - any loader failure is the user's YAML, not ours
            first = str(exc).strip().splitlines()
            detail = " ".join(first[:4]) if first else type(exc).__name__
            self.problem(Level.error, "exp_yaml_path", f"the YAML cannot be parsed: {detail}")
            return None
        if not isinstance(data, dict):
            self.problem(Level.error, "exp_yaml_path",
                         f"the YAML's root is {type(data).__name__}, not a mapping with an `ajet:` key")
            return None
        return data

    def check_structure(self, data: dict[str, Any]) -> bool:
        """Root `ajet`, `hydra.searchpath`, `defaults` with `_self_` last. False when `ajet` is unusable."""
        ajet = data.get("ajet")
        if not isinstance(ajet, dict):
            roots = ", ".join(str(k) for k in data) or "none"
            self.problem(Level.error, "ajet", f"no `ajet:` mapping at the root (root keys: {roots}); "
                         "AgentJet reads its settings there")
        hydra = data.get("hydra")
        if not isinstance(hydra, dict) or not isinstance(hydra.get("searchpath"), list):
            self.problem(Level.error, "hydra",
                         "`hydra.searchpath` is missing; the launcher edits that list and fails without it")
        defaults = data.get("defaults")
        if not isinstance(defaults, list):
            self.problem(Level.error, "defaults",
                         "`defaults:` is missing; the launcher edits that list and fails without it")
        elif not defaults or defaults[-1] != "_self_":
            self.problem(Level.error, "defaults",
                         "`_self_` must be the last entry of `defaults:`, otherwise AgentJet's defaults "
                         "override this YAML's own values")
        return isinstance(ajet, dict)

    def sweep(self, data: dict[str, Any], now: float) -> None:
        """One experiment of a sweep (statemachine/blueprint/sweep.py): its values and its own experiment name."""
        if not self.bp.exp_sweep_values:
            return
        stamp = time.strftime("%Y%m%d_%H%M", time.localtime(now))
        changes, problems = sweep_changes(self.bp.exp_sweep_values, data, yaml_path=self.bp.yaml_abspath(),
                                          launch_stamp=stamp)
        for c in changes:
            set_dotted(data, c.key, c.new)
        self.changes += changes
        self.problems += problems

    def execute_test(self, data: dict[str, Any]) -> None:
        key = "ajet.execute_test"
        value = get_dotted(data, key, MISSING)
        if value is not MISSING and value is not False:
            self.change(key, value, False, "the test probe ends training early (exit 1) when it is on; "
                        "benchmark YAMLs ship with it on")

    def val_before_train(self, data: dict[str, Any]) -> None:
        key = f"{TC}.val_before_train"
        if get_dotted(data, "ajet.enable_swarm_mode", False) is True:
            self.problem(Level.warning, key,
                         "swarm mode: val_before_train is left off (AgentJet rejects it there)")
            return
        value = get_dotted(data, key, MISSING)
        if value is not True:
            self.change(key, value, True,
                        "a validation at step 0 gives the baseline the report compares against")

    def result_files(self, data: dict[str, Any], workdir: str) -> tuple[str, str]:
        paths: list[str] = []
        result_dir = _absolute_result_dir(self.bp)
        for key, relpath in ((VAL_KEY, VAL_RESULT_RELPATH), (TRAIN_KEY, TRAIN_RESULT_RELPATH)):
            value = get_dotted(data, key, MISSING)
            given = value.strip() if isinstance(value, str) else ""
            if given and os.path.dirname(given) and not self.bp.exp_sweep_values:
                paths.append(os.path.normpath(os.path.join(workdir, given)))
                continue
            if not result_dir:
                self.problem(Level.error, key, "not set, and there is no exp_result_dir to put it in")
                paths.append("")
                continue
            name = os.path.basename(given) if given else os.path.basename(relpath)
            new = os.path.normpath(os.path.join(result_dir, os.path.dirname(relpath), name))
            why = _result_file_reason(given, sweep=bool(self.bp.exp_sweep_values))
            self.change(key, value, new, f"{why}; the runner reads the results from the result dir")
            paths.append(new)
        return paths[0], paths[1]

    def test_freq(self, data: dict[str, Any]) -> None:
        key = f"{TC}.test_freq"
        freq = _int(_setting(data, key))
        steps = _int(get_dotted(data, f"{TC}.total_training_steps"))
        if freq is None:
            return
        if freq <= 0:
            self.problem(Level.warning, key, f"test_freq={freq} disables periodic validation")
        elif freq >= NEVER_TEST_FREQ:
            self.problem(Level.warning, key,
                         f"test_freq={freq} means almost never: validation runs only at the start and on the "
                         "last step, so the report has no reward curve and a plateau cannot be seen; "
                         "a value like 10 or 20 is usual")
        elif steps is not None and steps > 0 and freq > steps:
            self.problem(Level.warning, key,
                         f"test_freq={freq} is larger than total_training_steps={steps}: only the last step "
                         "would be evaluated")

    def run_length(self, data: dict[str, Any]) -> None:
        epochs = _number(_setting(data, f"{TC}.total_epochs"))
        if epochs is not None and epochs < 1:
            self.problem(Level.warning, f"{TC}.total_epochs",
                         f"total_epochs={epochs:g}: no full epoch will run")
        steps = _int(get_dotted(data, f"{TC}.total_training_steps"))
        budget = self.bp.exp_max_time_seconds
        if steps is None or steps <= 0 or not budget:
            return
        estimate = steps * SECONDS_PER_STEP_GUESS
        if estimate < SHORT_RUN_SHARE * budget:
            self.problem(Level.warning, f"{TC}.total_training_steps",
                         f"total_training_steps={steps} is short for exp_max_time {_duration(budget)}: "
                         f"at about {format_limit(SECONDS_PER_STEP_GUESS)} per step the run ends after "
                         f"~{_duration(estimate)}, leaving most of its time unused")

    def logger(self, data: dict[str, Any]) -> None:
        if self.env is None:
            return
        key = f"{TC}.logger"
        raw = get_dotted(data, key, MISSING)
        value = _setting(data, key)
        names = [value] if isinstance(value, str) else list(value) if isinstance(value, list) else []
        missing = self.logger_credentials(names)
        if not missing:
            return
        new = _console_instead(value, names, {name for name, _ in missing})
        needs = ", ".join(f"{name} needs {var}" for name, var in missing)
        reason = (f"{needs}, which is not set on this node: the run would fail at start; "
                  "console needs no credential, and its `step:N - …` lines are what the runner reads (tensorboard, the "
                  "launcher's own advice, crashes agentjet 0.0.1 at the first validation on the string-valued "
                  "dataset name)")
        self.change(key, raw, new, reason)
        self.problem(Level.warning, key, f"logger switched to console: {reason}")

    def logger_credentials(self, names: list[str]) -> list[tuple[str, str]]:
        """The loggers in `names` whose credential is not set here, with its variable (each one read is said)."""
        env = self.env or {}
        missing = []
        for name, (key_var, mode_var, local_modes) in _LOGGER_CREDENTIALS.items():
            if name not in names:
                continue
            local = bool(mode_var) and env.get(mode_var, "") in local_modes
            if not env.get(key_var) and not local:
                missing.append((name, key_var))
                self.read_env(key_var, f"not set: logger {name} switched to console")
            else:
                why = f"{mode_var}={env.get(mode_var)}" if local and not env.get(key_var) else "set"
                self.read_env(mode_var if why != "set" else key_var, f"{why}: logger {name} kept")
        return missing

    def gpus(self, data: dict[str, Any]) -> int:
        needed = gpus_needed(data)
        nodes = _int(_setting(data, f"{TC}.nnodes")) or 1
        visible = (self.env or {}).get("CUDA_VISIBLE_DEVICES")
        per_node = needed // nodes
        count = _listed_gpus(visible) if visible is not None else None
        if self.env is not None:
            self.read_env("CUDA_VISIBLE_DEVICES", f"lists {count} GPU(s) for n_gpus_per_node={per_node}"
                          if count is not None else "not set: the run sees every GPU of the node")
        if count is not None and count < per_node:
            self.problem(Level.warning, f"{TC}.n_gpus_per_node",
                         f"n_gpus_per_node={per_node} but CUDA_VISIBLE_DEVICES lists {count} GPU(s)")
        return needed

    def ray_cluster(self, data: dict[str, Any], cmd: str) -> tuple[str, list[ConfigChange]]:
        """A multi-node run needs `--with-ray-cluster` (every node runs the command; the head is the node
        named by MASTER_ADDR); `--with-ray` starts a single-node head instead and excludes it."""
        nodes = nnodes(data)
        if nodes <= 1 or not cmdlib.analyze_command(cmd).calls:
            return cmd, []
        changes = []
        if cmdlib.has_flag(cmd, WITH_RAY):
            new = cmdlib.remove_flag(cmd, WITH_RAY)
            changes.append(ConfigChange(key="exp_launch_command", old=cmd, new=new, reason=(
                f"nnodes={nodes}: {WITH_RAY} starts a single-node Ray head and cannot be combined with "
                f"{WITH_RAY_CLUSTER}")))
            cmd = new
        if not cmdlib.has_flag(cmd, WITH_RAY_CLUSTER):
            new = cmdlib.add_flag(cmd, WITH_RAY_CLUSTER)
            changes.append(ConfigChange(key="exp_launch_command", old=cmd, new=new, reason=(
                f"nnodes={nodes}: a multi-node run; the runner starts the command on {nodes} nodes with "
                f"MASTER_ADDR/MASTER_PORT/NODE_RANK/NNODES, and {WITH_RAY_CLUSTER} makes the head start Ray "
                "and the other nodes join it")))
            cmd = new
        return cmd, changes

    def model_path(self, data: dict[str, Any]) -> None:
        """A local model path (absolute, ./, ../, ~) that does not exist here stops AgentJet at start."""
        key = "ajet.model.path"
        value = get_dotted(data, key, MISSING)
        if not isinstance(value, str) or not value.strip().startswith(("/", "./", "../", "~")):
            return  # a hub id such as Qwen/Qwen2.5-7B-Instruct is downloaded, not looked up
        path = os.path.expanduser(value.strip())
        if not os.path.isabs(path) and self.bp.exp_codebase_dir:
            path = os.path.normpath(os.path.join(self.bp.exp_codebase_dir, path))
        if not os.path.exists(path):
            self.problem(Level.warning, key,
                         f"the model path {value} does not exist on this node: AgentJet stops at start with "
                         "`Model path ... does not exist` (fix the path or download the model first)")

    def experiment_name(self, data: dict[str, Any], workdir: str, now: float) -> None:
        """A new experiment never resumes another one's weights: when the name this run will have
        (explicit, or AgentJet's `<yaml stem>_<YYYYmmdd_HHMM>` for this minute or the next) already has
        a verl checkpoint under its checkpoint dir, the run gets its own checkpoint dir in the result
        dir (statemachine/logs/checkpoints.py has the naming and the layout)."""
        key = "ajet.experiment_name"
        explicit = ckpt.explicit_name(data)
        taken = _names_with_checkpoints(data, workdir, self._run_names(explicit, now))
        if not taken:
            sweep = bool(self.bp.exp_sweep_values or self.bp.exp_sweep.strip())  # a sweep names each experiment
            if explicit is not None and not sweep:
                self.problem(Level.warning, key, f"experiment_name={explicit!r} is fixed: AgentJet appends to the same "
                             "result files, and a later run with this name would find (and so resume from) its "
                             "checkpoint; give a new experiment its own name")
            return
        name, where, step = taken[0]
        result_dir = _absolute_result_dir(self.bp)
        whose = (f"experiment_name={name!r}" if explicit is not None else
                 f"the name AgentJet gives this run ({name!r}, the YAML's name and this minute)")
        if not result_dir:
            self.problem(Level.error, key, f"{whose} already has checkpoints in {where} (latest global_step_{step}): "
                         "verl would resume from them, continuing an earlier experiment's weights; give this "
                         "experiment its own name (there is no exp_result_dir to isolate its checkpoints in)")
            return
        isolated = os.path.normpath(os.path.join(result_dir, ckpt.ISOLATED_DIR))
        reason = (f"{whose} already has checkpoints in {where} (latest global_step_{step}); verl would resume from "
                  "them and this new experiment would continue an earlier one's weights: its checkpoints go to the "
                  "result dir instead, so it trains from step 0")
        self.change(ckpt.BASE_KEY, get_dotted(data, ckpt.BASE_KEY, MISSING), isolated, reason)
        self.problem(Level.warning, key, f"{reason} ({ckpt.BASE_KEY}: {isolated})")

    def _run_names(self, explicit: str | None, now: float) -> list[str]:
        """The names this run may get: the explicit one, or AgentJet's for this minute and the next."""
        if explicit is not None:
            return [explicit]
        return list(dict.fromkeys(
            ckpt.agentjet_name(self.bp.yaml_abspath() or "experiment.yaml", t) for t in (now, now + 60)))


def launch_workdir(bp: Blueprint, command: str) -> str:
    """Where the launcher runs (the codebase dir, moved by any `cd X` before it): relative paths in
    the YAML (results files, checkpoint_base_dir) are relative to it."""
    return _Planner(bp, None).workdir(command)


# Programs that run the launcher behind them and are looked up on PATH (shell builtins such as `time`,
# `exec` and `command` are not).
_PREFIX_PROGRAMS = frozenset({"proxychains", "proxychains4", "nohup", "timeout", "nice", "setsid", "stdbuf",
                              "taskset", "ionice", "numactl", "xvfb-run", "uv", "srun", "env", "sudo"})


def _programs_before_launcher(words: list[str]) -> list[str]:
    """The wrapper programs and the python of one launcher call, as written (`proxychains4`, `python`)."""
    stop = next((k for k in range(len(words) - 1) if words[k] == "-m" and words[k + 1] == "ajet.launcher"), len(words))
    python = stop - 1
    while python >= 0 and words[python].startswith("-"):  # python's own options: `python -u -m ...`
        python -= 1
    out = [w for w in words[: max(python, 0)] if os.path.basename(w) in _PREFIX_PROGRAMS]
    if stop < len(words) and python >= 0:
        out.append(words[python])
    return out


def prefix_problems(bp: Blueprint, cmd: str, env: Mapping[str, str], environment: str) -> list[Problem]:
    """Every program written in front of a launcher call (`proxychains4 -q python -m ajet.launcher`) and the
    python itself must be found on the PATH the attempt gets (the venv's bin, then `env`'s PATH): a missing one
    ends the attempt at once with exit 127. Judged only when `env` has a PATH (the node's, or `check`'s shell)."""
    if "PATH" not in env:
        return []
    venv_bin = os.path.dirname(bp.exp_venv_exe) if os.path.isabs(bp.exp_venv_exe) else ""
    search = os.pathsep.join(p for p in (venv_bin, env["PATH"]) if p)
    problems: list[Problem] = []
    seen: set[str] = set()
    for call in cmdlib.analyze_command(cmd).calls:
        try:
            words = shlex.split(call.text)
        except ValueError:
            continue
        for word in _programs_before_launcher(words):
            if word in seen:
                continue
            seen.add(word)
            where = _not_runnable(word, search, environment)
            if not where:
                continue
            shown = call.text.split("\n")[0][:120]
            problems.append(Problem(level=Level.error, field="exp_launch_command", message=(
                f"the launch command runs `{word}` (in `{shown}`), but {word} {where}: install it there or take it "
                "out of the command")))
    return problems


def _not_runnable(word: str, search: str, environment: str) -> str:
    """Why program `word` cannot run (a path: missing or not executable; a name: not on `search`), or ""."""
    if "/" in word:
        return "" if os.path.isfile(word) and os.access(word, os.X_OK) else "does not exist or is not executable"
    if shutil.which(word, path=search) is not None:
        return ""
    return f"is not on the PATH the attempt gets (the venv's bin, then the PATH of {environment})"


def plan_preflight(bp: Blueprint, yaml_text: str, *, env: Mapping[str, str] | None = None,
                   now: float | None = None) -> PreflightPlan:
    """Plan the YAML and command changes for a blueprint; never raises on a broken YAML.

    `env` is the environment the run will get (None: unknown, credential checks skipped); `now` the
    launch time AgentJet's experiment name will carry (default: now).
    """
    p = _Planner(bp, env)
    command, command_changes, cleanup = p.plan_command()
    plan = PreflightPlan(command=command, command_changes=command_changes, cleanup_on_stop=cleanup)
    data = p.parse(yaml_text if isinstance(yaml_text, str) else "")
    if data is not None and p.check_structure(data):
        workdir = p.workdir(command)
        p.sweep(data, time.time() if now is None else now)  # first: every check below sees the sweep's values
        p.execute_test(data)
        p.val_before_train(data)
        plan.val_result_path, plan.train_result_path = p.result_files(data, workdir)
        p.test_freq(data)
        p.run_length(data)
        p.logger(data)
        plan.gpus_needed = p.gpus(data)
        plan.nnodes = nnodes(data)
        plan.command, cluster_changes = p.ray_cluster(data, plan.command)
        plan.command_changes = [*plan.command_changes, *cluster_changes]
        p.model_path(data)
        p.experiment_name(data, workdir, time.time() if now is None else now)
        if p.hidden:
            plan.val_result_path, plan.train_result_path = _as_written(data, workdir)
    plan.changes = p.changes
    if p.hidden:  # nothing reaches a launcher the command does not show: advice, not changes
        plan.changes = []
        plan.problems = p.problems + [Problem(level=Level.warning, field=c.key, message=(
            f"{_NOT_CHANGED}{_NOT_REACHED}): {c.reason}; set it to {c.new!r} in the YAML the script uses if you want "
            "it")) for c in p.changes]
        plan.launcher_hidden = p.hidden
    else:
        plan.problems = p.problems
    plan.env_decisions = p.env_decisions
    return plan


_NOT_CHANGED = "not changed ("
_NOT_REACHED = "the launcher is not in the command, so the runner's YAML copy would not reach it"


def _as_written(data: dict[str, Any], workdir: str) -> tuple[str, str]:
    """The results files the YAML itself names (resolved from the launch directory); "" for one it does not."""
    out = []
    for key in (VAL_KEY, TRAIN_KEY):
        value = get_dotted(data, key, MISSING)
        given = value.strip() if isinstance(value, str) else ""
        out.append(os.path.normpath(os.path.join(workdir, given)) if given else "")
    return out[0], out[1]


_SEVERITY = {Level.warning: 1, Level.error: 2}


def merge_problems(own: list[Problem], extra: list[Problem]) -> list[Problem]:
    """Add the preflight's problems, minus those a field already has at the same or a worse level."""
    worst: dict[str, int] = {}
    for p in own:
        worst[p.field] = max(worst.get(p.field, 0), _SEVERITY[p.level])
    merged = list(own)
    for p in extra:
        if _SEVERITY[p.level] > worst.get(p.field, 0) and p not in merged:
            merged.append(p)
    return merged


def preflight(bp: Blueprint, *, env: Mapping[str, str], environment: str, check_disk: bool = True) -> PreflightPlan:
    """The one preflight `check` and a worker both run: validate the blueprint, read its YAML,
    plan the changes. `env` is the environment the decisions read (the node's, as the worker
    sees it, or the submitting shell's for `check`), named by `environment` in the output.

    Problems stop at the blueprint's own when it has errors (the YAML is then not read). A swarm
    experiment declared by its `[exp_swarm_server]` part gets no YAML preflight: its client
    configures the job in Python.
    """
    problems = validate_blueprint(bp, check_disk=check_disk)
    plan = PreflightPlan(environment=environment)
    if bp.exp_swarm_declared or bp.exp_swarm_server.strip():
        spec = swarm_spec(bp)
        plan.swarm = spec.public() if spec else None
        plan.problems = merge_problems(problems, swarm_problems(bp, spec))
        return plan
    if any(p.level == Level.error for p in problems) or not check_disk:
        plan.problems = problems
        return plan
    yaml_text, unread = _read_yaml_text(bp)
    if unread is not None:
        plan.problems = [*problems, unread]
        return plan
    return _yaml_preflight(bp, yaml_text, problems, env=env, environment=environment)


def _read_yaml_text(bp: Blueprint) -> tuple[str, Problem | None]:
    """The blueprint's YAML as text, or the error saying it cannot be read."""
    try:
        return Path(bp.yaml_abspath()).read_text(encoding="utf-8"), None
    except (OSError, UnicodeDecodeError) as exc:
        return "", Problem(level=Level.error, field="exp_yaml_path", message=f"cannot read the YAML: {exc}")


def _yaml_preflight(bp: Blueprint, yaml_text: str, problems: list[Problem], *, env: Mapping[str, str],
                    environment: str) -> PreflightPlan:
    """The plan for a readable YAML, with the blueprint's own `problems` merged in (and a YAML set in the
    YAML to swarm mode making the experiment a swarm client)."""
    plan = plan_preflight(bp, yaml_text, env=env)
    plan.environment = environment
    if plan.launcher_hidden:  # the sentence says more than the blueprint's "does not mention the YAML"
        problems = [p for p in problems if not _unmentioned_yaml(p)]
    plan.problems = merge_problems(problems, [*plan.problems, *prefix_problems(bp, plan.command, env, environment)])
    spec = swarm_spec(bp, yaml_text)  # `ajet.enable_swarm_mode: true` in the YAML
    if spec is not None:
        _as_swarm_client(plan, bp, spec)
    return plan


def _as_swarm_client(plan: PreflightPlan, bp: Blueprint, spec: SwarmSpec) -> None:
    """The swarm server reads the YAML as written and the launch command is the client (no launcher): no
    config or command change is made, so none is planned or warned about."""
    dropped = {c.key for c in plan.changes}
    if plan.launcher_hidden:  # the client runs no launcher by design: no "not changed" advice either
        dropped |= {p.field for p in plan.problems if p.message.startswith(_NOT_CHANGED)}
        plan.problems = [p for p in plan.problems if not p.message.startswith(plan.launcher_hidden)]
        plan.launcher_hidden = ""
    plan.changes, plan.command_changes, plan.command = [], [], bp.exp_launch_command
    plan.val_result_path = plan.train_result_path = ""
    plan.problems = [p for p in plan.problems if p.field not in dropped and not _unmentioned_yaml(p)]
    plan.swarm = spec.public()
    plan.problems = merge_problems(plan.problems, swarm_problems(bp, spec))


def _unmentioned_yaml(p: Problem) -> bool:
    """The blueprint check's "the command does not mention the YAML"."""
    return p.field == "exp_launch_command" and "does not mention the YAML" in p.message


SKIP_GPU_CHECK = "--skip-check-avail-gpu"
GPU_RULE = ("every GPU nvidia-smi lists must be at least 95% free, whatever CUDA_VISIBLE_DEVICES says")


def gpu_check_decision(command: str, *, gpus: list[int] | None, node_gpus: int, hazard_removed: bool,
                       skip_supported: bool | None = True, launcher: str = "") -> tuple[ConfigChange | None,
                                                                                         Problem | None]:
    """What becomes of AgentJet's all-GPUs check (`check_avail_gpu`: {rule}) for this launch.

    The launcher skips it with `--autokill` / `--kill`; the preflight strips those (`hazard_removed`),
    which turns it back on. Where the runner knows this run's GPUs (`gpus`: a managed node's) and the
    node is shared or a hazard was removed, it adds `--skip-check-avail-gpu` and checks those GPUs
    itself before launch; where it does not, or the launcher has no such flag (`skip_supported` False:
    agentjet 0.0.1), a warning says the launcher's check will run. (None, None): nothing to say.
    """
    if cmdlib.launcher_segment(command) is None or cmdlib.has_flag(command, SKIP_GPU_CHECK):
        return None, None
    shared = gpus is not None and len(gpus) < node_gpus
    if not shared and not hazard_removed:
        return None, None  # the whole node, and nothing turned the check on: the launcher's check is right
    field = "exp_launch_command"
    why_on = ("--autokill/--kill was removed, which turns AgentJet's all-GPUs check back on" if hazard_removed
              else f"this node's {node_gpus} GPUs are shared with other runs")
    if gpus is None:
        return None, Problem(level=Level.warning, field=field, message=(
            f"{why_on}: the launcher will check its rule ({GPU_RULE}). This node does not assign GPUs to runs, so "
            "a GPU busy with anything fails the launch (gpu_busy); the runner then confines the run to the GPUs "
            "nvidia-smi reports free and checks those itself"))
    if skip_supported is False:
        where = f" ({launcher})" if launcher else ""
        return None, Problem(level=Level.warning, field=field, message=(
            f"{why_on}, and this AgentJet launcher{where} has no {SKIP_GPU_CHECK}: its check will run "
            f"({GPU_RULE}), so a busy GPU anywhere on the node fails this run's launch (gpu_busy)"))
    return _skip_gpu_check(command, gpus, why_on), None


def _skip_gpu_check(command: str, gpus: list[int], why_on: str) -> ConfigChange | None:
    """The change adding the skip flag to every launcher call that lacks it (None: nothing to add): the runner
    checks this run's `gpus` itself before launch."""
    new = cmdlib.add_flag(command, SKIP_GPU_CHECK)
    if new == command:
        return None
    shown = ",".join(str(g) for g in gpus)
    return ConfigChange(
        key="exp_launch_command", old=command, new=new,
        reason=f"{why_on}; this run has GPUs {gpus} (CUDA_VISIBLE_DEVICES), which AgentJet's check does not "
               f"look at: the runner checks GPUs {shown} itself before launch (at least 95% free memory)",
    )


def shared_gpus_change(command: str, gpus: list[int] | None, node_gpus: int) -> ConfigChange | None:
    """On a node shared with other runs, AgentJet's all-GPUs-free check would fail (it ignores
    CUDA_VISIBLE_DEVICES): the launch command gets `--skip-check-avail-gpu`, since the runner's GPU
    reservation already keeps runs on disjoint GPUs. None when nothing is to change."""
    if gpus is None or len(gpus) >= node_gpus:
        return None
    change, _ = gpu_check_decision(command, gpus=gpus, node_gpus=node_gpus, hazard_removed=False)
    return change
