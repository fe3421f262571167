"""Parsing bounds on request text (issue 37 item 5): the sweep part is capped in bytes, characters and values
before any YAML is read and inside the parse deadline; nesting is bounded with a problem naming the limit
(never a RecursionError); NUL and control characters in a blueprint are refused naming the field."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ajet_runner.statemachine.blueprint import parse_deadline
from ajet_runner.statemachine.blueprint import sweep as sweep_module
from ajet_runner.statemachine.blueprint.parse import ParseDeadline, parse_blueprint, validate_blueprint
from ajet_runner.statemachine.blueprint.sweep import MAX_PART_BYTES, MAX_SPEC_CHARS, MAX_VALUES, plan_sweep
from ajet_runner.statemachine.blueprint.yamlload import MAX_YAML_DEPTH, YamlTooDeep, load_yaml_file, load_yaml_text

BASE = """## [exp_purpose]
Bounds.

## [exp_codebase_dir]
/tmp/code

## [exp_venv_exe]
/usr/bin/python3

## [exp_yaml_path]
cfg.yaml

## [exp_launch_command]
python -m ajet.launcher --conf cfg.yaml

## [exp_result_dir]
/tmp/results

## [exp_max_time]
1 hour
"""

# The red-team pass's shapes: an 87 KB sweep line (15,000 values), deeply nested `[`, in both sweep forms.
LONG_LINE = "ajet.x: " + ", ".join(str(i) for i in range(15_000))
HOSTILE_PARTS = {
    "87 KB line": LONG_LINE,
    "nested [ (part cap)": "ajet.x: " + "[" * 20_000,
    "nested [ in one line": "ajet.x: " + "[" * (MAX_SPEC_CHARS - 20),
    "nested [ after a value": "ajet.x: 1, " + "[" * (MAX_SPEC_CHARS - 20),
    "nested { }": "ajet.x: [" + "{a: " * 400 + "}" * 400 + "]",
    "many values in brackets": "ajet.x: [" + ", ".join(str(i) for i in range(MAX_VALUES + 1)) + "]",
    "many plain values": "ajet.x: " + ",".join("1" for _ in range(MAX_VALUES + 1)),
    "many short lines": "\n".join(f"ajet.k{i}: 1, 2" for i in range(2_000)),
}


def _no_yaml(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A double for the sweep's YAML reads: records what would have been parsed."""
    seen: list[str] = []

    def load(text: str) -> Any:
        seen.append(text)
        return yaml.safe_load(text) if len(text) < 200 else None

    monkeypatch.setattr(sweep_module, "load_yaml_text", load)
    return seen


@pytest.mark.parametrize("name", list(HOSTILE_PARTS))
def test_a_hostile_sweep_part_is_refused_before_any_yaml_is_read(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _no_yaml(monkeypatch)
    plan = plan_sweep(HOSTILE_PARTS[name], result_dir="/tmp/results", purpose="p")
    assert not plan.ok and plan.members == []
    assert all(len(text) < 200 for text in seen), [t[:60] for t in seen]  # only values that passed the caps
    message = " ".join(p.message for p in plan.problems)
    assert any(str(limit) in message.replace(",", "") for limit in (MAX_PART_BYTES, MAX_SPEC_CHARS, MAX_VALUES,
                                                                  "deep")), message


def test_the_limits_are_named_and_a_real_sweep_still_passes() -> None:
    big = plan_sweep(LONG_LINE, result_dir="/r", purpose="p")
    assert [p.message for p in big.problems] == [
        f"the [exp_sweep] part is {len(LONG_LINE):,} bytes; at most {MAX_PART_BYTES:,} are read (one "
        "`key: v1, v2` line per swept key)"]
    nested = plan_sweep("ajet.x: [1, [2]]", result_dir="/r", purpose="p")
    assert "nests brackets 2 deep; a value list is one level" in nested.problems[0].message
    many = plan_sweep("ajet.x: " + ",".join(str(i) for i in range(40)), result_dir="/r", purpose="p")
    assert many.problems[0].message == f"line 1 of [exp_sweep]: ajet.x has 40 values, more than {MAX_VALUES}"
    option = plan_sweep("", ["ajet.x=" + "[" * 3000], result_dir="/r", purpose="p")
    assert "is 3,007 characters long; at most 2,000 are read" in option.problems[0].message
    ok = plan_sweep('ajet.x: ["a,b", c]\najet.y: 1e-5, 2e-5\n- ajet.z = [true, null]', result_dir="/r", purpose="p")
    assert ok.ok and [a.values for a in ok.axes] == [["a,b", "c"], [1e-5, 2e-5], [True, None]]


def test_the_parse_deadline_counts_the_threads_cpu_not_its_wait_for_a_core() -> None:
    """A busy machine (here: a sleep, the thread holding no core) does not use up a real blueprint's budget;
    the thread's own work does."""
    deadline = parse_deadline.after(0.05)
    time.sleep(0.2)
    parse_deadline.check(deadline)  # 0.2 s of wall clock, ~0 of CPU: not past
    spin_until = time.thread_time() + 0.06
    while time.thread_time() < spin_until:
        pass
    with pytest.raises(ParseDeadline):
        parse_deadline.check(deadline)


def test_the_sweep_part_is_read_inside_the_parse_deadline() -> None:
    with pytest.raises(ParseDeadline):
        plan_sweep("ajet.x: 1, 2", result_dir="/r", purpose="p", deadline=parse_deadline.after(-1))
    with pytest.raises(ParseDeadline):
        plan_sweep("", ["ajet.x=1,2"], result_dir="/r", purpose="p", deadline=parse_deadline.after(-1))
    bp = parse_blueprint(BASE + "\n## [exp_sweep]\najet.x: 1, 2\n")
    with pytest.raises(ParseDeadline):  # validate_blueprint reads the part with the request's deadline
        validate_blueprint(bp, check_disk=False, deadline=parse_deadline.after(-1))


@pytest.mark.parametrize("text", [
    "a: " + "[" * 3000,
    "a: " + "[" * 3000 + "]" * 3000,
    "a: " + "{a: " * 3000 + "}" * 3000,
    "".join(" " * i + "k:\n" for i in range(400)),
    "- " * 500 + "x",
])
def test_yaml_nesting_is_bounded_with_the_limit_named(text: str, tmp_path: Path) -> None:
    with pytest.raises(YamlTooDeep, match=f"deeper than {MAX_YAML_DEPTH} levels"):
        load_yaml_text(text)
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(yaml.YAMLError):
        load_yaml_file(path)


def test_yaml_at_the_limit_loads_and_so_do_many_shallow_brackets() -> None:
    at_limit = "a: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1)
    data = load_yaml_text(at_limit)
    assert isinstance(data, dict)
    flat = "items: [" + ", ".join(f"[{i}, {i}]" for i in range(500)) + "]"  # many brackets, 3 deep
    assert len(load_yaml_text(flat)["items"]) == 500


def test_a_deep_yaml_is_a_blueprint_problem_not_a_crash(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "cfg.yaml").write_text("ajet: " + "[" * 5000 + "\n")
    bp = parse_blueprint(BASE.replace("/tmp/code", str(code)).replace("/tmp/results", str(tmp_path / "r")))
    problems = [p for p in validate_blueprint(bp) if p.level == "error"]
    assert [(p.field, "deeper than 100 levels" in p.message) for p in problems] == [("exp_yaml_path", True)]


@pytest.mark.parametrize(("where", "bad", "field", "what"), [
    ("/tmp/results", "/tmp/res\x00ults", "exp_result_dir", "a NUL byte"),
    ("/tmp/code", "/tmp/co\x1bde", "exp_codebase_dir", "the control character '\\x1b'"),
    ("cfg.yaml", "cfg\n.yaml", "exp_yaml_path", None),  # a line break ends the value: not a control there
    ("Bounds.", "Bounds\x1b[2J.", "exp_purpose", "the control character '\\x1b'"),
    ("1 hour", "1 ho\x00ur", "exp_max_time", "a NUL byte"),
    ("--conf cfg.yaml", "--conf cfg.yaml\x07", "exp_launch_command", "the control character '\\x07'"),
])
def test_nul_and_control_characters_are_refused_naming_the_field(where: str, bad: str, field: str,
                                                                 what: str | None) -> None:
    bp = parse_blueprint(BASE.replace(where, bad))
    errors = [p for p in validate_blueprint(bp, check_disk=True) if p.level == "error"]
    if what is None:
        assert not any("control character" in p.message or "NUL" in p.message for p in errors)
        return
    assert [p.field for p in errors] == [field], errors
    assert f"holds {what}" in errors[0].message


def test_tabs_and_line_breaks_stay_text() -> None:
    bp = parse_blueprint(BASE.replace("Bounds.", "Bounds.\tTabbed\nSecond line"))
    assert not any("control" in p.message for p in validate_blueprint(bp, check_disk=False))


def test_a_stage_request_shares_one_parse_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from ajet_runner.service import stage_submit

    texts = [(BASE.replace("/tmp/results", f"/tmp/results{k}") + "\n## [exp_sweep]\najet.x: 1, 2\n", f"/bp/{k}.md")
             for k in range(3)]
    planned, _, problems = stage_submit.expand_blueprints(texts)
    assert problems == [] and len(planned) == 6
    monkeypatch.setattr(stage_submit, "PARSE_DEADLINE_SECONDS", -1.0)  # past before the first blueprint
    planned, _, problems = stage_submit.expand_blueprints(texts)
    assert planned == [] and [p.field for p in problems] == [f"/bp/{k}.md: blueprint" for k in range(3)]
    assert all("took over " in p.message and " to parse" in p.message for p in problems)


def test_a_hostile_result_dir_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    from ajet_runner.resultdir.names import RESULTS_NAME
    from ajet_runner.resultdir.stage_inputs import ORIGINAL_CONFIG, read_facts, read_original_config

    (tmp_path / RESULTS_NAME).write_text("[" * 100_000)
    (tmp_path / ORIGINAL_CONFIG).write_text("ajet: " + "[" * 100_000)
    assert read_facts(str(tmp_path)) is None and read_original_config(str(tmp_path)) is None
