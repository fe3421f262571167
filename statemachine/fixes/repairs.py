"""Turn a failure's repair plan into concrete changes for the next attempt.

A signature's plan is generic ("lower max_model_len by a quarter", "relaunch through
proxychains4"); what it means depends on this experiment's YAML, command and node. The
resolver works that out, and says plainly what it skipped and why. When nothing in the
plan would change anything, `applicable` is False so the runner gives up instead of
relaunching the same failing attempt.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from ajet_runner.statemachine.failures.failing_line import FailingCommand
from ajet_runner.statemachine.fixes.failure import yaml_digest
from ajet_runner.statemachine.fixes.gpu_check import SKIP_FLAG, GpuFacts, describe, free_gpus
from ajet_runner.statemachine.models import ConfigChange, RepairAction
from ajet_runner.statemachine.shell import command as cmdlib

__all__ = ["CLEANUP_TARGETS", "MISSING", "STEP_UNIT_KEYS", "ResolvedRepair", "del_dotted", "get_dotted",
           "resolve_avoiding_repeats", "resolve_repair", "set_dotted", "step_unit_note"]

CLEANUP_TARGETS = ("ray", "gpu_processes", "session", "swarm_server")
PROCESS_CLEANUPS = ("ray", "gpu_processes", "session")  # all mean: kill this experiment's marked processes
CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Sentinel for `get_dotted(..., default=MISSING)`: tells an absent key from an explicit null."""


def get_dotted(data: Any, key: str, default: Any = None) -> Any:
    """`data["a"]["b"]["c"]` for key `a.b.c`, or `default` when any step is absent or not a map."""
    node = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def set_dotted(data: MutableMapping[str, Any], key: str, value: Any) -> None:
    """Set `a.b.c` in place, creating missing maps; a non-map in the way is replaced by a map."""
    parts = key.split(".")
    node: MutableMapping[str, Any] = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, MutableMapping):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def del_dotted(data: MutableMapping[str, Any], key: str) -> bool:
    """Remove `a.b.c` in place; False when it was not there."""
    parts = key.split(".")
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, MutableMapping) or part not in node:
            return False
        node = node[part]
    if not isinstance(node, MutableMapping) or parts[-1] not in node:
        return False
    del node[parts[-1]]
    return True


class ResolvedRepair(BaseModel):
    """What the next attempt changes, and a human-readable account of the plan.

    `applied` says what will be done (key, old -> new; the variable and its value; the flag), `skipped`
    what was considered and not done, and why; `notes` is both, in plan order. `chosen` are the indexes
    of plan actions with an `alternative` label that were applied; `yaml_digest` is the next attempt's
    YAML data (statemachine/fixes/failure.py)."""

    yaml_changes: list[ConfigChange] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    command: str = ""
    cleanups: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    applied: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    chosen: list[int] = Field(default_factory=list)
    yaml_digest: str = ""
    applicable: bool = False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _scaled(current: int | float, factor: float, minimum: float | None) -> int | float:
    """`current * factor`, kept an int for ints (rounded away from `current` so it moves)."""
    if isinstance(current, int):
        raw = current * factor
        new: int | float = math.floor(raw) if factor < 1 else math.ceil(raw)
        floor = 1 if minimum is None and factor < 1 and current >= 1 else minimum
        if floor is not None:
            new = max(new, math.ceil(floor))
        return int(new)
    new = round(current * factor, 6)  # 0.85 * 0.9 reads 0.765, not 0.7649999999999999
    return max(new, minimum) if minimum is not None else new


def _label(action: RepairAction) -> str:
    return f" ({action.description})" if action.description else ""


def _shown_target(target: FailingCommand | None) -> str:
    """The command a prefix goes in front of, as the repair log names it."""
    return f"`{target.shown}`" if target is not None and not target.launcher else "the launcher"


def _target_value(action: RepairAction, current: Any) -> tuple[Any, str]:
    """The value a `set_yaml` action gives its key (from `current`: MISSING when absent), and why it gives
    none ("" when it does): a factor scales a number, else the action's value is set."""
    if action.factor is not None and current is not MISSING:
        if not _is_number(current):
            return MISSING, f"current value {current!r} is not a number, cannot scale it"
        return _scaled(current, action.factor, action.minimum), ""
    if action.value is not None:
        return action.value, ""
    if action.factor is not None:
        return MISSING, "the key is not in the YAML and no value is given"
    return MISSING, "no value or factor given"


class _GpuChoice(NamedTuple):
    chosen: list[int]
    source: str  # how the runner knows them
    assigned: bool  # the node assigned them (the run already sees only them)


def _gpu_choice(command: str, facts: GpuFacts | None) -> _GpuChoice | str:
    """The GPUs to confine the run to, or why it is not confined."""
    if cmdlib.launcher_segment(command) is None:
        return "not confined: the command does not run ajet.launcher"
    if facts is None:
        return "not confined: the runner has no GPU facts for this run"
    if not facts.skip_flag:
        return (f"not confined: this AgentJet launcher has no {SKIP_FLAG}, and its own check "
                "looks at every GPU whatever CUDA_VISIBLE_DEVICES says")
    if facts.assigned is not None:
        return _GpuChoice(list(facts.assigned), "this node assigned them to the run", True)
    return _free_choice(facts)


def _free_choice(facts: GpuFacts) -> _GpuChoice | str:
    """The first GPUs nvidia-smi reports free enough, as many as the run needs, or why there are none."""
    if facts.listed is None:
        return f"not confined: {facts.unavailable or 'nvidia-smi is not available'}"
    free = free_gpus(facts.listed)
    if len(free) < facts.needed:
        return (f"not confined: nvidia-smi reports {len(free)} GPU(s) at least 95 % free "
                f"({describe(facts.listed)}), the run needs {facts.needed}")
    busy = [g.index for g in facts.listed if g.index not in free]
    seen = f"; {describe(facts.listed, busy)}" if busy else ""
    return _GpuChoice(free[: facts.needed], f"nvidia-smi reports them at least 95 % free{seen}", False)


class _Resolver:
    def __init__(self, yaml_data: Mapping[str, Any], command: str, env: Mapping[str, str],
                 installed: Callable[[str], bool], own_processes: bool | None, gpus: GpuFacts | None,
                 yaml_unreached: str = "", failing: FailingCommand | None = None) -> None:
        self.data: dict[str, Any] = copy.deepcopy(dict(yaml_data)) if isinstance(yaml_data, Mapping) else {}
        self.original = copy.deepcopy(self.data)
        self.command = command
        self.original_command = command
        self.base_env = env
        self.installed = installed
        self.own_processes = own_processes
        self.gpus = gpus
        self.yaml_unreached = yaml_unreached  # why a YAML change would not reach the launcher ("" : it would)
        self.failing = failing  # the command whose output holds the failure (offsets into `command`)
        self.changes: dict[str, ConfigChange] = {}
        self.env: dict[str, str] = {}
        self.cleanups: list[str] = []
        self.notes: list[str] = []
        self.applied: list[str] = []
        self.skipped: list[str] = []

    def did(self, text: str) -> None:
        self.notes.append(text)
        self.applied.append(text)

    def skip(self, action: RepairAction, why: str) -> None:
        text = f"skipped {action.kind} {action.key or action.value}: {why}{_label(action)}"
        self.notes.append(text)
        self.skipped.append(text)

    def _yaml_reachable(self, action: RepairAction) -> bool:
        """Whether a YAML change of `action` can reach the launcher; skipped with the reason when not."""
        if not action.key:
            self.skip(action, "no YAML key given")
            return False
        if self.yaml_unreached:
            self.skip(action, self.yaml_unreached)
            return False
        return True

    def set_yaml(self, action: RepairAction) -> None:
        if not self._yaml_reachable(action):
            return
        current = get_dotted(self.data, action.key, MISSING)
        new, refusal = _target_value(action, current)
        if refusal:
            self.skip(action, refusal)
            return
        if current is not MISSING and current == new and type(current) is type(new):
            bound = " (already at its minimum)" if action.factor is not None else ""
            self.skip(action, f"already {current!r}{bound}")
            return
        set_dotted(self.data, action.key, new)
        reason = action.description or f"repair: set {action.key}"
        first_old = get_dotted(self.original, action.key, None)
        self.changes[action.key] = ConfigChange(key=action.key, old=first_old, new=new, reason=reason)
        shown = "(absent)" if current is MISSING else repr(current)
        self.did(f"set {action.key}: {shown} -> {new!r}{_label(action)}")
        note = step_unit_note(action.key, current, new, self.data)
        if note:
            self.did(note)

    def unset_yaml(self, action: RepairAction) -> None:
        if not self._yaml_reachable(action):
            return
        current = get_dotted(self.data, action.key, MISSING)
        if current is MISSING:
            self.skip(action, "the key is not in the YAML")
            return
        del_dotted(self.data, action.key)
        reason = action.description or f"repair: unset {action.key}"
        first_old = get_dotted(self.original, action.key, None)
        self.changes[action.key] = ConfigChange(key=action.key, old=first_old, new=None, reason=reason, unset=True)
        self.did(f"unset {action.key} (was {current!r}){_label(action)}")

    def set_env(self, action: RepairAction) -> None:
        if not action.key or action.value is None:
            self.skip(action, "no variable name or value given")
            return
        value = str(action.value)
        current = self.env.get(action.key, self.base_env.get(action.key))
        if current == value:
            self.skip(action, f"{action.key} is already {value!r}")
            return
        self.env[action.key] = value
        was = f" (was {current!r})" if current is not None else ""
        self.did(f"set env {action.key}={value}{was}{_label(action)}")

    def prefix_command(self, action: RepairAction) -> None:
        prefix = str(action.value or "").strip()
        if not prefix:
            self.skip(action, "no prefix given")
            return
        target = self.failing if self.command == self.original_command else None  # offsets hold until a rewrite
        line = _shown_target(target)
        if action.requires and not self.installed(action.requires):
            self.skip(action, f"{action.requires} is not installed on this node, so {line} cannot run behind it "
                      "(install and configure it on the node for the proxy)")
            return
        new = self._prefixed(target, prefix)
        if new is None:
            self.skip(action, "the log does not tie the failure to one command of the launch command, and it "
                      "shows no launcher call to put it in front of")
            return
        if new == self.command:
            self.skip(action, f"{line} already runs behind it")
            return
        self.command = new
        why = (f"the command whose output holds the failure: {target.how}" if target is not None else
               "the log does not tie the failure to one command: the launcher's")
        self.did(f"run {line} behind `{prefix}` ({why}){_label(action)}")

    def _prefixed(self, target: FailingCommand | None, prefix: str) -> str | None:
        """The command with `prefix` in front of the failing command (`target`, when not the launcher) or of
        the launcher; None when no command is known and the command shows no launcher call."""
        if target is not None and not target.launcher:
            return cmdlib.prefix_command_at(self.command, target.start, prefix)
        if target is None and not cmdlib.analyze_command(self.command).calls:
            return None
        return cmdlib.prefix_launcher(self.command, prefix)

    def flag(self, action: RepairAction) -> None:
        flag = str(action.value or "").strip()
        if not flag:
            self.skip(action, "no flag given")
            return
        if cmdlib.launcher_segment(self.command) is None:
            self.skip(action, "the command does not run ajet.launcher, so a launcher flag cannot be set")
            return
        present = cmdlib.has_flag(self.command, flag)
        if action.kind == "add_flag":
            if present:
                self.skip(action, "the command already has it")
                return
            self.command = cmdlib.add_flag(self.command, flag)
            self.did(f"add {flag} to the launcher{_label(action)}")
        else:
            if not present:
                self.skip(action, "the command does not have it")
                return
            self.command = cmdlib.remove_flag(self.command, flag)
            self.did(f"remove {flag} from the launcher{_label(action)}")

    def cleanup(self, action: RepairAction) -> None:
        target = str(action.value or "")
        if target not in CLEANUP_TARGETS:
            self.skip(action, f"unknown cleanup target, expected one of {', '.join(CLEANUP_TARGETS)}")
            return
        if target in self.cleanups:
            return
        if target in PROCESS_CLEANUPS and self.own_processes is False:
            self.skip(action, "no process of this experiment is running (none carries its marker), "
                      "so there is nothing of its own to stop")
            return
        self.cleanups.append(target)
        self.did(f"clean up {target} before relaunching{_label(action)}")

    def confine_gpus(self, action: RepairAction) -> None:
        """Run on GPUs the runner knows are free, and skip the launcher's all-GPUs check (which ignores
        CUDA_VISIBLE_DEVICES); the runner checks those GPUs itself before launch (workers/drive/states/
        launching.py). Says which GPUs, or why the run was not confined."""
        choice = _gpu_choice(self.command, self.gpus)
        if isinstance(choice, str):
            self.skip(action, choice)
            return
        value = ",".join(str(g) for g in choice.chosen)
        current = self.env.get(CUDA_VISIBLE, self.base_env.get(CUDA_VISIBLE))
        if not choice.assigned and current != value:
            self.env[CUDA_VISIBLE] = value
            self.did(f"set env {CUDA_VISIBLE}={value}: confined the run to GPU(s) {value} ({choice.source})")
        if not cmdlib.has_flag(self.command, SKIP_FLAG):
            self.command = cmdlib.add_flag(self.command, SKIP_FLAG)
            self.did(f"add {SKIP_FLAG} to the launcher: the runner checks GPU(s) {value} itself before launch "
                     "(at least 95 % free memory, the launcher's rule)")
        elif not choice.assigned and current == value:
            self.skip(action, f"already confined to GPU(s) {value} with {SKIP_FLAG}")
        elif choice.assigned:
            self.skip(action, f"the run already uses its GPU(s) {value} ({choice.source}) with {SKIP_FLAG}")


STEP_UNIT_KEYS = ("ajet.data.train_batch_size",)  # what a training step is made of


def step_unit_note(key: str, old: Any, new: Any, data: Mapping[str, Any]) -> str:
    """The line a repair log and report carry when a change alters what one training step is (""
    otherwise): a halved batch trains half the samples per step and, with `total_training_steps` unset,
    doubles the steps of an epoch, so steps before and after the change are not the same unit."""
    if key not in STEP_UNIT_KEYS or not _is_number(old) or not _is_number(new) or old == new:
        return ""
    ratio = old / new
    fixed = get_dotted(data, "ajet.trainer_common.total_training_steps", None)
    count = (f"total_training_steps={fixed} is fixed, so the run keeps its step count and trains on "
             f"{1 / ratio:.3g}x the samples" if _is_number(fixed) and fixed > 0 else
             f"an epoch now has {ratio:.3g}x as many steps (total_training_steps is unset)")
    return (f"step unit changed: {key} {old!r} -> {new!r}, one step is {1 / ratio:.3g}x the samples it was; {count}. "
            "Steps of the attempts before and after this change are not comparable (the evaluations carry their "
            "attempt)")


def resolve_repair(actions: list[RepairAction], *, yaml_data: Mapping[str, Any], command: str,
                   env: Mapping[str, str], installed: Callable[[str], bool], own_processes: bool | None = None,
                   gpus: GpuFacts | None = None, banned: Mapping[int, str] | None = None,
                   yaml_unreached: str = "", failing: FailingCommand | None = None) -> ResolvedRepair:
    """Apply a plan, in order, to this experiment's YAML data, command and environment.

    `installed(program)` tells whether a program exists on the node (for `prefix_command`);
    `own_processes` whether any process of this experiment still runs (False: a process cleanup has
    nothing to stop and is skipped; None: unknown); `gpus` the facts `confine_gpus` needs; `banned`
    action indexes not to apply, with the reason (an alternative an earlier attempt already tried);
    `yaml_unreached` why the runner's YAML copy would not reach the launcher (a launcher inside a script):
    YAML actions are then skipped with it, never claimed; `failing` the command whose output holds the
    failure (statemachine/failures/failing_line.py): `prefix_command` goes in front of it, else of the launcher.
    Changes compound: two actions on one key yield one change from the original value.
    """
    r = _Resolver(yaml_data, command, env, installed, own_processes, gpus, yaml_unreached, failing)
    picked = _apply_actions(r, actions, banned or {})
    changes = [c for c in r.changes.values() if _changes_original(r.original, c)]
    applicable = bool(changes or r.env or r.command != command or r.cleanups)
    if not applicable:
        nothing = "nothing in the repair plan changes this experiment; relaunching would fail the same way"
        r.notes.append(nothing)
        r.skipped.append(nothing)
    return ResolvedRepair(yaml_changes=changes, env=r.env, command=r.command, cleanups=r.cleanups,
                          notes=r.notes, applied=r.applied, skipped=r.skipped, chosen=picked,
                          yaml_digest=yaml_digest(r.data), applicable=applicable)


def _apply_actions(r: _Resolver, actions: list[RepairAction], banned: Mapping[int, str]) -> list[int]:
    """Apply each action in order, except banned ones and alternatives of one already applied; the indexes
    of the alternatives that changed something."""
    handlers: dict[str, Callable[[RepairAction], None]] = {
        "set_yaml": r.set_yaml,
        "unset_yaml": r.unset_yaml,
        "set_env": r.set_env,
        "prefix_command": r.prefix_command,
        "add_flag": r.flag,
        "remove_flag": r.flag,
        "cleanup": r.cleanup,
        "confine_gpus": r.confine_gpus,
    }
    chosen: set[str] = set()
    picked: list[int] = []
    for index, action in enumerate(actions):
        if action.alternative in chosen:
            r.skip(action, f"an alternative ({action.alternative}) was already applied")
            continue
        if index in banned:
            r.skip(action, banned[index])
            continue
        before = (len(r.changes), dict(r.env), r.command, len(r.cleanups))
        handlers[action.kind](action)
        if action.alternative and before != (len(r.changes), r.env, r.command, len(r.cleanups)):
            chosen.add(action.alternative)
            picked.append(index)
    return picked


def _changes_original(original: Any, c: ConfigChange) -> bool:
    """Whether a change, compounded over the plan, still differs from the original YAML."""
    before = get_dotted(original, c.key, MISSING)
    return before is not MISSING if c.unset else before != c.new


def resolve_avoiding_repeats(actions: list[RepairAction], *, identical: Callable[[ResolvedRepair], int | None],
                             **kwargs: Any) -> tuple[ResolvedRepair, int | None]:
    """Resolve the plan; when the next attempt would repeat an earlier failed one (`identical` returns its
    number) and the plan has alternatives, try the next alternative instead (the ones applied are banned,
    naming that attempt), until the next attempt is new or no alternative is left.

    Returns the resolution and the attempt it would still repeat (None: a new attempt)."""
    banned: dict[int, str] = {}
    while True:
        resolved = resolve_repair(actions, banned=banned, **kwargs)
        same = identical(resolved)
        fresh = [i for i in resolved.chosen if i not in banned]
        if same is None or not fresh:
            return resolved, same
        for index in fresh:
            banned[index] = f"attempt {same} already ran with it and failed the same way"
