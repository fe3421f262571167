"""Validate a parsed blueprint: what keeps it from running (errors) and what looks wrong (warnings).

The parser's own findings (`Blueprint.parse_problems`: a command line that is not shell, text after a
path, a swarm command that cannot be split) come first, so `check`, the API and `run` refuse a
blueprint for the same reasons. With `check_disk`, paths are checked on this machine; nothing is created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from ajet_runner.statemachine.blueprint.swarm_blueprint import swarm_problems, swarm_spec
from ajet_runner.statemachine.blueprint.sweep import MAX_EXPERIMENTS_ALLOWED, SWEEP_FIELD, plan_sweep
from ajet_runner.statemachine.durations import DURATION_MAX_CHARS, format_limit
from ajet_runner.statemachine.models import BLUEPRINT_FIELDS, Blueprint, Level, Problem
from ajet_runner.statemachine.shell.command import LAUNCH_COMMAND_MAX_CHARS

__all__ = ["BLUEPRINT_MAX_LINES", "FIELD_MAX_CHARS", "template_placeholders", "validate_blueprint"]

# Only the first lines of a blueprint are read (a longer one is refused): the markdown tokenizer costs
# 5-40 us a line (more for nested lists and quotes), and no input may take over 100 ms. Real blueprints
# have tens to a few hundred lines.
BLUEPRINT_MAX_LINES = 1_000

class _Problems(list[Problem]):
    """The problems found so far, with short helpers to add one."""

    def error(self, fld: str, message: str) -> None:
        self.append(Problem(level=Level.error, field=fld, message=message))

    def warning(self, fld: str, message: str) -> None:
        self.append(Problem(level=Level.warning, field=fld, message=message))


_WHAT = {
    "exp_purpose": "a short statement of what the experiment tests",
    "exp_codebase_dir": "the absolute path of the experiment code (the run starts there)",
    "exp_venv_exe": "the absolute path of the python executable of the virtual environment",
    "exp_yaml_path": "the experiment YAML, relative to the codebase or absolute",
    "exp_launch_command": "the command that starts training",
    "exp_result_dir": "the absolute path of the directory for results",
    "exp_max_time": "the maximum run time, e.g. `12 hours`",
}


def _unset_vars(value: str) -> str:
    names = re.findall(r"\$\{?(\w+)\}?", value)
    return f" (it contains the unset variable ${names[0]})" if names else ""


def _check_absolute(bp: Blueprint, fld: str, problems: _Problems) -> bool:
    value = getattr(bp, fld)
    if os.path.isabs(value):
        return True
    problems.error(fld, f"{fld} must be an absolute path, got {value!r}{_unset_vars(value)}")
    return False


def _check_missing(bp: Blueprint, problems: _Problems) -> None:
    for fld in BLUEPRINT_FIELDS:
        if fld == "exp_yaml_path" and (bp.exp_swarm_declared or bp.exp_swarm_server or bp.exp_yaml_na):
            continue  # a swarm client configures its job in Python; the YAML may be "NA"
        if fld == "exp_max_time":
            present = bool(bp.exp_max_time_text.strip()) or bp.exp_max_time_seconds is not None
        else:
            present = bool(getattr(bp, fld).strip())
        if present:
            continue
        message = f"{fld} is missing: the blueprint should give {_WHAT[fld]}"
        if fld == "exp_purpose":
            problems.warning(fld, message)
        else:
            problems.error(fld, message)


def _check_codebase(path: str, problems: _Problems) -> None:
    if not os.path.exists(path):
        problems.error("exp_codebase_dir", f"the codebase {path} does not exist")
    elif not os.path.isdir(path):
        problems.error("exp_codebase_dir", f"the codebase {path} is not a directory")


def _check_venv_exe(exe: str, problems: _Problems) -> None:
    fld = "exp_venv_exe"
    if not os.path.exists(exe):
        problems.error(fld, f"the python executable {exe} does not exist")
    elif os.path.isdir(exe):
        candidates = (os.path.join(exe, "bin", "python"), os.path.join(exe, "python"))
        hint = next((c for c in candidates if os.path.isfile(c)), "")
        problems.error(fld, f"{exe} is a directory, not a python executable"
                       + (f" (did you mean {hint}?)" if hint else ""))
    elif not os.access(exe, os.X_OK):
        sibling = os.path.join(os.path.dirname(exe), "python")
        hint = f" (did you mean {sibling}?)" if os.path.basename(exe) != "python" and os.path.isfile(sibling) else ""
        problems.error(fld, f"the python executable {exe} is not executable{hint}")


def _check_yaml(bp: Blueprint, check_disk: bool, problems: _Problems) -> None:
    fld = "exp_yaml_path"
    path = bp.yaml_abspath()
    codebase = os.path.normpath(bp.exp_codebase_dir) if os.path.isabs(bp.exp_codebase_dir) else ""
    if codebase and os.path.isabs(path) and os.path.commonpath([codebase, path]) != codebase:
        problems.warning(fld, f"the YAML {path} is outside the codebase {codebase}: AgentJet accepts an "
                         "absolute --conf, and resolves the YAML's hydra.searchpath from the codebase (the "
                         "working directory), not from the YAML's folder")
    if not check_disk or not os.path.isabs(path):
        return
    problem = _yaml_file_problem(bp, path)
    if problem:
        problems.error(fld, problem)


def _yaml_file_problem(bp: Blueprint, path: str) -> str:
    """Why the YAML at absolute `path` is not a config the launcher can read, or "": missing, not a file,
    unreadable, a template still holding placeholders, not YAML, or not a mapping."""
    import yaml

    from ajet_runner.statemachine.blueprint.yamlload import load_yaml_file

    if not os.path.exists(path):
        return f"the YAML {path} does not exist{_unset_vars(bp.exp_yaml_path)}"
    if not os.path.isfile(path):
        return f"the YAML {path} is not a file"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            names = template_placeholders(fh.read(YAML_TEMPLATE_SCAN_CHARS))
    except OSError as exc:
        return f"cannot read the YAML {path}: {exc.strerror}"
    if names:
        return (f"the YAML {path} is a template, not a config: it still holds the placeholder(s) "
                f"{', '.join(names)}; fill them in (or point exp_yaml_path at the filled-in copy)")
    try:
        data = load_yaml_file(path)
    except OSError as exc:
        return f"cannot read the YAML {path}: {exc.strerror}"
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return f"the YAML {path} is not valid YAML: {' '.join(str(exc).split())}"
    if not isinstance(data, dict):
        return f"the YAML {path} does not hold a mapping of settings (it holds a {type(data).__name__})"
    return ""


def _check_result_dir(path: str, problems: _Problems) -> None:
    fld = "exp_result_dir"
    if os.path.exists(path):
        if not os.path.isdir(path):
            problems.error(fld, f"the result dir {path} exists but is not a directory")
        elif not os.access(path, os.W_OK | os.X_OK):
            problems.error(fld, f"the result dir {path} is not writable")
        return
    ancestor = os.path.dirname(os.path.normpath(path))
    while not os.path.exists(ancestor):
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            break
        ancestor = parent
    if not os.path.isdir(ancestor):
        problems.error(fld, f"the result dir {path} cannot be created: {ancestor} is not a directory")
    elif not os.access(ancestor, os.W_OK | os.X_OK):
        problems.error(fld, f"the result dir {path} cannot be created: {ancestor} is not writable")


# Length caps per field: no real value comes near them, and they bound every parser's time.
FIELD_MAX_CHARS = {"exp_purpose": 2_000, "exp_codebase_dir": 4_096, "exp_venv_exe": 4_096, "exp_yaml_path": 4_096,
                   "exp_result_dir": 4_096, "exp_launch_command": LAUNCH_COMMAND_MAX_CHARS,
                   "exp_max_time": DURATION_MAX_CHARS}


def _check_lengths(bp: Blueprint, problems: _Problems) -> None:
    for fld, cap in FIELD_MAX_CHARS.items():
        value = bp.exp_max_time_text if fld == "exp_max_time" else getattr(bp, fld)
        if len(value) > cap:
            problems.error(fld, f"{fld} is {len(value):,} characters long; at most {cap:,} are accepted")


def _check_max_time(bp: Blueprint, problems: _Problems) -> None:
    secs, text = bp.exp_max_time_seconds, bp.exp_max_time_text
    if len(text) > DURATION_MAX_CHARS:
        return  # reported by _check_lengths
    if secs is None and text.strip():
        problems.error("exp_max_time", f"cannot read a duration from {text!r}: write it like `12 hours`")
    elif secs is not None and secs <= 0:
        problems.error("exp_max_time", f"the maximum run time must be positive, got {format_limit(secs)}"
                       + (f" from {text!r}" if text else ""))


def _mentions_yaml(bp: Blueprint) -> bool:
    cmd = bp.exp_launch_command
    written = bp.exp_yaml_path.strip()
    candidates = {written, os.path.basename(written), bp.yaml_abspath()}
    if os.path.isabs(written) and os.path.isabs(bp.exp_codebase_dir):
        candidates.add(os.path.relpath(written, bp.exp_codebase_dir))
    return any(c and c in cmd for c in candidates)


_TEMPLATE_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")
# The skills' own placeholders: in a value (never in commentary) they mean the template was not filled
# in. Other `${NAME}` are real shell or OmegaConf interpolation and stay legal.
_SKILL_PLACEHOLDER = re.compile(r"\$\{(MaxTime|subject_dir|path_to_blue_print|runner|MAX_PARALLEL_BLUEPRINTS|"
                                r"TestFreq)\}|\{EXP_STAGE\}|\?\?\?")
YAML_TEMPLATE_SCAN_CHARS = 1_000_000


def template_placeholders(text: str) -> list[str]:
    """The template placeholders in `text` as written (`{{YAML_PATH}}`, `${MaxTime}`), each once."""
    found = ["{{" + n + "}}" for n in _TEMPLATE_PLACEHOLDER.findall(text or "")]
    found += [m.group(0) for m in _SKILL_PLACEHOLDER.finditer(text or "")]
    return list(dict.fromkeys(found))


def _check_placeholders(bp: Blueprint, problems: _Problems) -> bool:
    """A template (`{{CODEBASE}}`, `${MaxTime}` left in) names each placeholder per field."""
    found = False
    for fld in BLUEPRINT_FIELDS:
        value = bp.exp_max_time_text if fld == "exp_max_time" else getattr(bp, fld)
        if fld == "exp_purpose":
            names = ["{{" + n + "}}" for n in _TEMPLATE_PLACEHOLDER.findall(value or "")]
        elif fld == "exp_max_time":  # `${MaxTime} = 12 hours` defines it: only a value with no duration is a template
            names = template_placeholders(value) if bp.exp_max_time_seconds is None else []
        else:
            names = template_placeholders(value)
        names = list(dict.fromkeys(names))
        if names:
            found = True
            problems.error(fld, f"{fld} still holds the template placeholder(s) {', '.join(names)}: "
                           "this blueprint is a template; replace them with real values")
    return found


def sweep_part_problems(bp: Blueprint, deadline: float | None = None) -> list[Problem]:
    """What is wrong with the `[exp_sweep]` part itself (statemachine/blueprint/sweep.py), and a sweep without a YAML
    to change."""
    # The part itself is wrong only past what any stage may hold; the submitter's cap is the stage's to apply.
    found = plan_sweep(bp.exp_sweep, result_dir=bp.exp_result_dir, purpose=bp.exp_purpose,
                       deadline=deadline, max_experiments=MAX_EXPERIMENTS_ALLOWED).problems
    if (bp.exp_swarm_declared or bp.exp_swarm_server or not bp.exp_yaml_path or bp.exp_yaml_na) and not any(
            p.field == SWEEP_FIELD for p in found if p.level == Level.error):
        found.append(Problem(level=Level.error, field=SWEEP_FIELD, message=(
            "a sweep sets YAML values, but this blueprint has no YAML the runner configures (a swarm client "
            "configures its job in Python, or [exp_yaml_path] is missing): drop [exp_sweep] or name the YAML")))
    return found


# A NUL or another control character has no place in a blueprint: in a path it made os.path raise (a 500),
# in a purpose it writes escape sequences onto every terminal that lists it. Tabs and line breaks are text.
_ONE_LINE_FIELDS = ("exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_result_dir", "exp_val_result_path")
_TEXT_FIELDS = ("exp_purpose", "exp_launch_command", "exp_max_time", "exp_swarm_server", "exp_sweep", "notes")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _check_control_chars(bp: Blueprint, problems: _Problems) -> bool:
    """An error per field holding a NUL or a control character; True when there was one."""
    found = False
    for fld in (*_ONE_LINE_FIELDS, *_TEXT_FIELDS):
        value = bp.exp_max_time_text if fld == "exp_max_time" else getattr(bp, fld)
        m = (_CONTROL if fld in _ONE_LINE_FIELDS else _CONTROL_IN_TEXT).search(value or "")
        if m is not None:
            found = True
            what = "a NUL byte" if m.group() == "\x00" else f"the control character {m.group()!r}"
            problems.error(fld, f"{fld} holds {what} at character {m.start() + 1}: a blueprint is plain text")
    return found


def validate_blueprint(bp: Blueprint, *, check_disk: bool = True, deadline: float | None = None) -> list[Problem]:
    """Everything that keeps `bp` from running (errors) or looks wrong (warnings).

    With `check_disk`, paths are checked on this machine; nothing is created. `deadline` (from
    `parse_deadline.after`) bounds the sweep part's parse as it bounds the blueprint's: ParseDeadline.
    """
    problems = _Problems(bp.parse_problems)
    if bp.source_lines > BLUEPRINT_MAX_LINES:
        problems.error("blueprint", f"the blueprint has {bp.source_lines:,} lines; at most {BLUEPRINT_MAX_LINES:,} "
                       "are read (put long notes in a file and name it)")
    if _check_control_chars(bp, problems):
        return list(problems)  # no path holding a NUL goes near the disk
    _check_lengths(bp, problems)
    _check_missing(bp, problems)
    if _check_placeholders(bp, problems):
        return list(problems)  # a template: nothing else can be judged yet
    _check_paths(bp, check_disk, problems)
    _check_max_time(bp, problems)
    if bp.exp_swarm_declared or bp.exp_swarm_server:
        _check_swarm(bp, problems)
    if bp.exp_sweep.strip() and not bp.exp_sweep_values:
        problems.extend(sweep_part_problems(bp, deadline))
    return list(problems)


def _check_paths(bp: Blueprint, check_disk: bool, problems: _Problems) -> None:
    """The codebase, venv, YAML and result dir: absolute, and (with `check_disk`) there and usable."""
    _check_dirs(bp, (("exp_codebase_dir", _check_codebase), ("exp_venv_exe", _check_venv_exe)), check_disk, problems)
    if bp.exp_yaml_path:
        _check_yaml(bp, check_disk, problems)
    if bp.exp_launch_command and bp.exp_yaml_path and not _mentions_yaml(bp):
        problems.warning("exp_launch_command", f"the launch command does not mention the YAML "
                         f"{bp.exp_yaml_path!r}: check that it trains with that config")
    _check_dirs(bp, (("exp_result_dir", _check_result_dir),), check_disk, problems)


def _check_dirs(bp: Blueprint, checks: tuple[tuple[str, Callable[[str, _Problems], None]], ...], check_disk: bool,
                problems: _Problems) -> None:
    """Each given path field: absolute, then (with `check_disk`) its own check on this machine."""
    for fld, check in checks:
        value = getattr(bp, fld)
        if value and _check_absolute(bp, fld, problems) and check_disk:
            check(value, problems)


def _check_swarm(bp: Blueprint, problems: _Problems) -> None:
    spec = swarm_spec(bp)
    if spec is None:  # the part is there but holds no command
        problems.error("exp_swarm_server", "the swarm server command is empty: give the command "
                       "that starts it, e.g. `ajet-swarm start --swarm-port=10086`")
    problems.extend(swarm_problems(bp, spec))
