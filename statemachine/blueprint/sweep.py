"""Sweeps: one blueprint expanded into one experiment per combination of YAML values (a grid). Pure.

A sweep is written as the blueprint's optional `[exp_sweep]` part, one dotted YAML key per line with
its values, in any of the layouts people use for such lists:

    ## [exp_sweep]
    - ajet.trainer_common.lr: 1.0e-6, 5.0e-6
    - ajet_sim.seed: [1, 2]
    ajet.rollout.temperature = 0.7, 1.0

or given on the command line (`submit --sweep KEY=V1,V2`, repeatable; a key given there replaces the
part's). Values are YAML scalars (`0.6`, `1e-5`, `true`, `null`, `"a,b"`); a value list in brackets is
read as YAML flow (so a value may hold a comma). The grid is every combination, the first key varying
slowest. Each experiment gets its own result dir under the blueprint's (`<result_dir>/<key>=<value>,…`),
a purpose that names its values, and — applied by the preflight on the runner's patched copy, never the
user's file — its values, its own experiment name (AgentJet would give experiments launched in one
minute one name, so one checkpoint dir) and its own results files.

The part is request text, so its work is bounded before any YAML is read: at most MAX_PART_BYTES for the
part, MAX_SPEC_CHARS per line or `--sweep` option, MAX_VALUES per key counted on the raw text, value lists
one bracket deep (a value is a single YAML value), and the caller's parse deadline checked per line.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from pydantic import BaseModel, Field

from ajet_runner.statemachine.blueprint.parse_deadline import check as check_deadline
from ajet_runner.statemachine.blueprint.yamlload import load_yaml_text
from ajet_runner.statemachine.models import ConfigChange, Level, Problem

__all__ = ["MAX_EXPERIMENTS", "MAX_EXPERIMENTS_ALLOWED",
           "SWEEP_FIELD", "SweepAxis", "SweepPlan", "format_value", "is_seed_key",
           "member_slug", "parse_sweep_options", "parse_sweep_text", "plan_sweep", "sweep_changes"]

SWEEP_FIELD = "exp_sweep"
MAX_EXPERIMENTS = 64  # by default: a grid larger than this is a typo far more often than a plan
MAX_EXPERIMENTS_ALLOWED = 1000  # what a submitter may allow explicitly (`submit --max-experiments N`, the API's
# max_experiments)
MAX_VALUES = 32  # per key
MAX_LINES = 200  # of the part read
MAX_PART_BYTES = 8 * 1024  # the whole [exp_sweep] part (a real one is a few hundred bytes)
MAX_SPEC_CHARS = 2000  # one line of the part, one --sweep option
MAX_NESTING = 1  # `[a, b]`: a value list is one bracket deep, its values are plain
SLUG_MAX = 120  # characters of a result dir's sweep component (longer: shortened with a hash)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*")
_LINE = re.compile(r"\s*(?:[-*+]\s+|\d{1,3}[.)]\s+)?`?(?P<key>[^`:=\s]+)`?\s*(?P<sep>[:=])\s*(?P<rest>.*?)\s*$")
_COMMENTARY = frozenset({"description", "desc", "hint", "note", "notes", "remark", "comment", "说明", "备注"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@%-]+")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
SWEEP_REASON = "the sweep's value for this experiment ([exp_sweep] or submit --sweep)"


class SweepAxis(BaseModel):
    """One swept key and its values, in order."""

    key: str
    values: list[Any] = Field(default_factory=list)


class SweepMember(BaseModel):
    """One experiment of the grid: its values (in the axes' order), result dir and purpose."""

    index: int
    values: dict[str, Any]
    result_dir: str
    purpose: str
    label: str  # `key=value, key=value`: how reports and purposes name it


class SweepPlan(BaseModel):
    """The axes (the part's, with the command line's keys replacing or adding) and the grid."""

    axes: list[SweepAxis] = Field(default_factory=list)
    members: list[SweepMember] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.level == Level.error for p in self.problems)

    def public(self) -> dict[str, Any]:
        """The JSON `check` prints under "sweep"."""
        return {"keys": [a.key for a in self.axes], "axes": [a.model_dump(mode="json") for a in self.axes],
                "experiments": [m.model_dump(mode="json") for m in self.members]}


def _problem(message: str, level: Level = Level.error) -> Problem:
    return Problem(level=level, field=SWEEP_FIELD, message=message)


def scalar(text: str) -> Any:
    """One value as the YAML would hold it; numbers in any float spelling (`1e-5`, which YAML 1.1 reads
    as a string) are numbers."""
    text = text.strip()
    if not text:
        return ""
    try:
        value = load_yaml_text(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and text[0] not in "'\"":  # a quoted value stays text
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return value  # a mapping or a list is not one value: `_values` refuses it


def _raw_shape(text: str) -> tuple[int, int]:
    """(values, bracket depth) of a value list as written, outside quotes, without parsing it: what the caps
    are checked on before any YAML is read (a comma in brackets or quotes does not separate values)."""
    depth = deepest = 0
    commas = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            quote, escaped = _in_quote(ch, quote, escaped)
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth <= 1:
            commas += 1
    return commas + 1, deepest


def _in_quote(ch: str, quote: str, escaped: bool) -> tuple[str, bool]:
    """After `ch` inside `quote`: the quote still open ("" once closed) and whether the next character is
    escaped (a backslash escapes only in double quotes)."""
    if escaped:
        return quote, False
    if ch == "\\" and quote == '"':
        return quote, True
    return ("" if ch == quote else quote), False


def _values(rest: str, key: str = "the key") -> tuple[list[Any], str]:
    """The values after a key (`a, b`, `[a, "b,c"]`), and a problem ('' when none). The caps (characters,
    values, nesting) are checked on the raw text first: YAML reads only what passed them."""
    rest = rest.strip()
    problem = _cap_problem(rest, key)
    if problem:
        return [], problem
    values, problem = _read_values(rest)
    if problem:
        return [], problem
    if any(isinstance(v, (dict, list)) for v in values):
        return [], f"{rest[:60]!r}: each value must be a single YAML value (a number, a word, true/false, null)"
    if any(v == "" for v in values):
        return [], f"{rest[:60]!r} has an empty value (two commas, or a comma at the end)"
    return values, ""


def _cap_problem(rest: str, key: str) -> str:
    """Why the raw value text (stripped) is over a cap (characters, nesting, values), or ""."""
    if len(rest) > MAX_SPEC_CHARS:
        return f"the values are {len(rest):,} characters long; at most {MAX_SPEC_CHARS:,} are read"
    count, depth = _raw_shape(rest)
    if not rest.startswith("["):
        count = rest.count(",") + 1  # the plain form splits at every comma
    if depth > MAX_NESTING:
        return (f"{rest[:60]!r} nests brackets {depth} deep; a value list is one level (`[a, b]`) and each "
                "value a single YAML value")
    if not rest.startswith("[") and depth:
        return f"{rest[:60]!r}: each value must be a single YAML value (a number, a word, true/false, null)"
    if count > MAX_VALUES:
        return f"{key} has {count} values, more than {MAX_VALUES}"
    return ""


def _read_values(rest: str) -> tuple[list[Any], str]:
    """The values of a YAML flow list (`[a, "b,c"]`) or a plain comma list, and a problem ('' when none)."""
    if not rest.startswith("["):
        return ([scalar(v) for v in rest.split(",")] if rest else []), ""
    try:
        loaded = load_yaml_text(rest)
    except yaml.YAMLError as exc:
        return [], f"the value list {rest[:60]!r} is not YAML flow ({str(exc).splitlines()[0]})"
    if not isinstance(loaded, list):
        return [], f"the value list {rest[:60]!r} is not a list"
    return [scalar(v) if isinstance(v, str) else v for v in loaded], ""


def _axis(key: str, rest: str, where: str) -> tuple[SweepAxis | None, Problem | None]:
    if not _KEY.fullmatch(key):
        return None, _problem(f"{where}: {key!r} is not a dotted YAML key such as ajet.trainer_common.lr")
    values, why = _values(rest, key)
    if why:
        return None, _problem(f"{where}: {why}")
    if not values:
        return None, _problem(f"{where}: {key} has no values; write `{key}: v1, v2`")
    if len(values) > MAX_VALUES:
        return None, _problem(f"{where}: {key} has {len(values)} values, more than {MAX_VALUES}")
    distinct = list(dict.fromkeys(format_value(v) for v in values))
    if len(distinct) < len(values):
        return None, _problem(f"{where}: {key} repeats a value ({', '.join(format_value(v) for v in values)})")
    return SweepAxis(key=key, values=values), None


def _unfence(text: str) -> list[str]:
    lines = [ln for ln in text.replace("\r\n", "\n").split("\n")[:MAX_LINES]]
    return [ln for ln in lines if not ln.strip().startswith(("```", "~~~"))]


def parse_sweep_text(text: str, deadline: float | None = None) -> tuple[list[SweepAxis], list[Problem]]:
    """The `[exp_sweep]` part: one `key: values` (or `key = values`) per line, as a bullet or plain, with
    `- description:`/`- hint:` bullets and blank lines ignored. Every other line is a problem naming it.
    ParseDeadline once `deadline` passes."""
    axes: list[SweepAxis] = []
    problems: list[Problem] = []
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_PART_BYTES:
        return [], [_problem(f"the [exp_sweep] part is {size:,} bytes; at most {MAX_PART_BYTES:,} are read (one "
                             "`key: v1, v2` line per swept key)")]
    for number, line in enumerate(_unfence(text), start=1):
        check_deadline(deadline, "the [exp_sweep] part")
        if not line.strip() or line.strip().startswith("#"):
            continue
        if len(line) > MAX_SPEC_CHARS:
            problems.append(_problem(f"line {number} of [exp_sweep] is {len(line):,} characters long; at most "
                                     f"{MAX_SPEC_CHARS:,} are read"))
            continue
        m = _LINE.match(line)
        if m is None:
            problems.append(_problem(f"line {number} of [exp_sweep] is not `key: v1, v2`: {line.strip()[:80]!r}"))
            continue
        key = m.group("key").strip("*_")
        if key.lower() in _COMMENTARY:
            continue
        axis, problem = _axis(key, m.group("rest"), f"line {number} of [exp_sweep]")
        if problem is not None:
            problems.append(problem)
        elif axis is not None:
            axes.append(axis)
    return _no_repeated_keys(axes, problems, "[exp_sweep]")


def parse_sweep_options(specs: Iterable[str], deadline: float | None = None
                        ) -> tuple[list[SweepAxis], list[Problem]]:
    """`--sweep KEY=V1,V2` options (also `KEY=[V1, V2]`)."""
    axes: list[SweepAxis] = []
    problems: list[Problem] = []
    for spec in specs:
        check_deadline(deadline, "the --sweep options")
        if len(spec) > MAX_SPEC_CHARS:
            problems.append(_problem(f"a --sweep option is {len(spec):,} characters long; at most "
                                     f"{MAX_SPEC_CHARS:,} are read"))
            continue
        key, sep, rest = spec.partition("=")
        if not sep:
            problems.append(_problem(f"--sweep {spec[:80]!r} is not KEY=V1,V2"))
            continue
        axis, problem = _axis(key.strip(), rest, f"--sweep {spec[:80]!r}")
        if problem is not None:
            problems.append(problem)
        elif axis is not None:
            axes.append(axis)
    return _no_repeated_keys(axes, problems, "--sweep")


def _no_repeated_keys(axes: list[SweepAxis], problems: list[Problem], where: str
                      ) -> tuple[list[SweepAxis], list[Problem]]:
    seen: set[str] = set()
    for axis in axes:
        if axis.key in seen:
            problems.append(_problem(f"{where} names {axis.key} twice: give all its values on one line"))
        seen.add(axis.key)
    return axes, problems


def format_value(value: Any) -> str:
    """A value as a person writes it in YAML: `0.6`, `1e-05`, `true`, `null`, `gsm8k`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)  # 2.0 stays visibly a float
    return str(value)


def member_label(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in values.items())


def member_slug(values: Mapping[str, Any]) -> str:
    """The result dir's component: `key=value,key=value` with unsafe characters as `_`; shortened with a
    hash when long (two experiments never share one)."""
    slug = ",".join(f"{k}={_UNSAFE.sub('_', format_value(v))}" for k, v in values.items())
    slug = slug.lstrip(".") or "sweep"
    if len(slug) > SLUG_MAX:
        digest = hashlib.sha1(slug.encode()).hexdigest()[:10]
        slug = f"{slug[:SLUG_MAX - 11]}-{digest}"
    return slug


def name_suffix(values: Mapping[str, Any]) -> str:
    """The experiment-name part: the keys' last components and values (`lr1e-05_seed1`)."""
    parts = [f"{k.rsplit('.', 1)[-1]}{format_value(v)}" for k, v in values.items()]
    text = _NAME_UNSAFE.sub("-", "_".join(parts)).strip("-_")
    if len(text) > 60:
        text = f"{text[:49]}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"
    return text or "sweep"


def plan_sweep(part_text: str, options: Iterable[str] = (), *, result_dir: str, purpose: str,
               deadline: float | None = None, max_experiments: int = MAX_EXPERIMENTS) -> SweepPlan:
    """The grid of a blueprint's `[exp_sweep]` part and `--sweep` options (options replace the part's keys
    they name); no axes at all gives an empty plan (not a sweep). ParseDeadline once `deadline` (the
    request's parse deadline, `parse_deadline.after`) passes. `max_experiments`: the combinations
    allowed, MAX_EXPERIMENTS unless the submitter raised it (up to MAX_EXPERIMENTS_ALLOWED)."""
    part_axes, problems = parse_sweep_text(part_text, deadline) if part_text.strip() else ([], [])
    option_axes, option_problems = parse_sweep_options(options, deadline)
    problems += option_problems
    axes = _merged_axes(part_axes, option_axes)
    plan = SweepPlan(axes=axes, problems=problems)
    if part_text.strip() and not part_axes and not problems:
        plan.problems.append(_problem("[exp_sweep] names no key: write one `key: v1, v2` line per swept key"))
    if not axes or not plan.ok:
        return plan
    refusal = _grid_refusal(axes, max_experiments, result_dir)
    if refusal:
        plan.problems.append(_problem(refusal))
    else:
        plan.members.extend(_members(axes, result_dir, purpose))
    return plan


def _merged_axes(part_axes: list[SweepAxis], option_axes: list[SweepAxis]) -> list[SweepAxis]:
    """The part's axes, those an option names replaced by the option's (which come last)."""
    given = {a.key for a in option_axes}
    return [a for a in part_axes if a.key not in given] + option_axes


def _grid_refusal(axes: list[SweepAxis], max_experiments: int, result_dir: str) -> str:
    """Why the grid of `axes` is not run ("" when it is): too many combinations, or no dir to hold them."""
    total = math.prod(len(a.values) for a in axes)
    cap = min(max_experiments, MAX_EXPERIMENTS_ALLOWED)
    if total > cap:
        return too_many(total, " x ".join(str(len(a.values)) for a in axes), cap)
    if not result_dir:
        return "a sweep puts each experiment in a dir under exp_result_dir, which is missing"
    return ""


def _members(axes: list[SweepAxis], result_dir: str, purpose: str) -> list[SweepMember]:
    """One experiment per combination of the axes' values: its label leads the purpose, its slug names its dir."""
    first = (purpose.strip().splitlines() or [""])[0]
    rest = purpose.strip().split("\n", 1)[1] if "\n" in purpose.strip() else ""
    members: list[SweepMember] = []
    for index, combo in enumerate(itertools.product(*(a.values for a in axes))):
        values = {a.key: v for a, v in zip(axes, combo, strict=True)}
        label = member_label(values)
        text = f"[{label}] {first}".rstrip() + (f"\n{rest}" if rest else "")
        members.append(SweepMember(index=index, values=values, label=label, purpose=text,
                                   result_dir=os.path.join(result_dir, member_slug(values))))
    return members


def too_many(total: int, shape: str, cap: int) -> str:
    """The refusal of a grid over the cap: the cap, and the way past it when there is one."""
    head = f"the sweep makes {total} experiments ({shape}), more than {cap}"
    if total > MAX_EXPERIMENTS_ALLOWED:
        return f"{head} (a stage holds at most {MAX_EXPERIMENTS_ALLOWED}): split it into stages"
    return (f"{head}: split it into stages, or allow it explicitly with `submit --max-experiments {total}` "
            f"(API: \"max_experiments\": {total}; at most {MAX_EXPERIMENTS_ALLOWED})")


def is_seed_key(key: str) -> bool:
    """A key that only picks a random seed: experiments differing in nothing else are repeats."""
    last = key.rsplit(".", 1)[-1].lower()
    return last == "seed" or last.endswith("_seed") or last.startswith("seed_")


def _get(data: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def sweep_changes(values: Mapping[str, Any], data: Mapping[str, Any], *, yaml_path: str,
                  launch_stamp: str) -> tuple[list[ConfigChange], list[Problem]]:
    """What the preflight applies for one sweep experiment: each value, then its own experiment name
    (`<name>_<values>`; AgentJet's own `<yaml stem>_<stamp>` when the YAML leaves it unset). Problems:
    a swept key the YAML does not hold (its value is added; AgentJet's defaults may hold it)."""
    from ajet_runner.statemachine.logs.checkpoints import AUTO_NAME, NAME_KEY, explicit_name

    changes: list[ConfigChange] = []
    problems: list[Problem] = []
    for key, value in values.items():
        present, old = _get(data, key)
        if not present:
            problems.append(Problem(level=Level.warning, field=key, message=(
                f"the sweep sets {key}, which the YAML does not hold: it is added (check the spelling; AgentJet's "
                "default config may define it)")))
        changes.append(ConfigChange(key=key, old=old, new=value, reason=SWEEP_REASON))
    if NAME_KEY not in values:
        fixed = explicit_name(data)
        stem = os.path.basename(yaml_path or "experiment.yaml").replace(".yaml", "")
        base = fixed if fixed is not None else f"{stem}_{launch_stamp}"
        present, old = _get(data, NAME_KEY)
        changes.append(ConfigChange(
            key=NAME_KEY, old=old if present else None, new=f"{base}_{name_suffix(values)}", reason=(
                "the experiments of a sweep start together: with one name (" + (
                    f"the YAML's {fixed!r}" if fixed is not None else f"AgentJet's `<yaml stem>_<minute>`, "
                    f"{AUTO_NAME if present else 'unset'} here") + ") they would share one checkpoint dir and "
                "resume each other's weights; each gets its own")))
    return changes, problems
