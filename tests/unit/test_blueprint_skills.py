"""Blueprints in the layouts the real skills write (tests/corpus/blueprints/skills/, docs/blueprint-layouts.md),
and what the parser refuses: a command line that is not shell, text after a path, a swarm command that cannot
be split, a template left unfilled."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from ajet_runner.statemachine.blueprint import parse_deadline
from ajet_runner.statemachine.blueprint.command_field import non_shell_reason
from ajet_runner.statemachine.blueprint.parse import ParseDeadline, parse_blueprint, validate_blueprint
from ajet_runner.statemachine.blueprint.swarm_blueprint import split_swarm_command, swarm_spec
from ajet_runner.statemachine.fixes.preflight import preflight
from ajet_runner.statemachine.models import Blueprint, Level

SKILLS = Path(__file__).resolve().parent.parent / "corpus" / "blueprints" / "skills"
EXPECTED = json.loads((SKILLS / "expected.json").read_text(encoding="utf-8"))


def _doc(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _errors(bp: Blueprint, *, check_disk: bool = False) -> dict[str, str]:
    """Error messages by field (several for one field joined with ` | `)."""
    found: dict[str, str] = {}
    for p in validate_blueprint(bp, check_disk=check_disk):
        if p.level == Level.error:
            found[p.field] = f"{found[p.field]} | {p.message}" if p.field in found else p.message
    return found


# ------------------------------------------------------------------------------- corpus


def test_the_skills_corpus_is_complete() -> None:
    files = sorted(p.name for p in SKILLS.glob("*.md"))
    assert files == sorted(EXPECTED) and len(files) >= 18
    assert any(n.startswith("zh_") for n in files) and any("swarm" in n for n in files)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_skills_corpus_blueprint_parses_as_expected(name: str) -> None:
    exp = EXPECTED[name]
    bp = parse_blueprint((SKILLS / name).read_text(encoding="utf-8"))
    got = {
        "purpose": bp.exp_purpose, "codebase_dir": bp.exp_codebase_dir, "venv_exe": bp.exp_venv_exe,
        "yaml_path": bp.exp_yaml_path or None, "launch_command": bp.exp_launch_command,
        "result_dir": bp.exp_result_dir, "max_time_seconds": bp.exp_max_time_seconds,
        "swarm_server_command": bp.exp_swarm_server or None,
        "swarm_client_delay_seconds": bp.exp_swarm_client_delay_seconds,
    }
    spec = swarm_spec(bp) if bp.exp_swarm_server else None
    got["swarm_port"] = spec.port if spec else None
    assert {k: v for k, v in got.items() if k in exp} == {k: exp[k] for k in got if k in exp}
    if "launch_command_joined" in exp:  # the older corpus's convention: continuations joined
        assert re.sub(r"[ \t]*\\\n[ \t]*", " ", bp.exp_launch_command) == exp["launch_command_joined"]
    for note in exp["notes"]:
        lines = [ln for ln in bp.notes.split("\n") if note["text"] in ln]
        assert lines or note["text"] in bp.notes, note
        if note["part"]:
            assert any(f"[{note['part']}]" in ln for ln in lines), (note, lines)
    errors = [p for p in validate_blueprint(bp, check_disk=False) if p.level == Level.error]
    assert {p.field for p in errors} == {e["field"] for e in exp["errors"]}, [str(p) for p in errors]
    for e in exp["errors"]:
        assert any(e["contains"] in p.message for p in errors if p.field == e["field"]), e
    assert "(under )" not in bp.notes and "- purpose:" not in bp.exp_purpose


# ------------------------------------------------------------------- the command field

_LEADER_COMMAND = """
    ## [exp_launch_command]
    - description: Command that starts training
    - command:
        cd /c && \\
        python -m ajet.launcher --conf /c/a.yaml \\
          --with-ray
    {after}
"""


def test_the_command_is_exactly_the_command_field_and_the_hint_a_note() -> None:
    bp = parse_blueprint(_doc(_LEADER_COMMAND.format(after="- hint: Not 100% reliable.")))
    assert bp.exp_launch_command == "cd /c && \\\npython -m ajet.launcher --conf /c/a.yaml \\\n  --with-ray"
    assert "(under [exp_launch_command]) hint: Not 100% reliable." in bp.notes
    assert not bp.parse_problems


@pytest.mark.parametrize(("inside", "reason"), [
    ("- retry: drop --with-ray when it fails", "a markdown list item"),
    ("Then leave it alone until the first validation.", "prose"),
    ("- note: it takes an hour", "a markdown list item"),
    ("然后等待第一个验证结果。", "prose"),
    ("Run the trainer again if it dies", "prose"),
    ("1. start the server first", "a markdown list item"),
])
def test_a_line_in_the_command_that_is_not_shell_is_refused_quoted(inside: str, reason: str) -> None:
    text = _doc(_LEADER_COMMAND.format(after="")).replace("      --with-ray\n", f"      --with-ray\n    {inside}\n")
    bp = parse_blueprint(text)
    message = _errors(bp)["exp_launch_command"]
    assert repr(inside) in message and reason in message


@pytest.mark.parametrize("block", [
    "cat > notes.txt <<'EOF'\nThen leave it alone until the end.\n- item: x\nEOF\npython -m ajet.launcher --conf a",
    "python -c 'print(1)\nThen a line of a quoted string.'\npython -m ajet.launcher --conf a.yaml",
    "# Then comes the launcher (a comment)\npython -m ajet.launcher --conf a.yaml",
    "if [ -d /c ]; then\n  cd /c\nfi\npython -m ajet.launcher --conf a.yaml",
    "python -m ajet.launcher \\\n  --conf a.yaml \\\n  - \\\n  --with-ray",
    "Xvfb :99 &\nDISPLAY=:99 python -m ajet.launcher --conf a.yaml",
])
def test_shell_that_looks_like_prose_is_not_refused(block: str) -> None:
    bp = parse_blueprint(f"## [exp_launch_command]\n```bash\n{block}\n```\n")
    assert bp.exp_launch_command == block
    assert "exp_launch_command" not in _errors(bp)


def test_a_note_ends_the_command_and_shell_after_it_is_refused() -> None:
    text = _doc(_LEADER_COMMAND.format(after="")).replace("      --with-ray\n", "      --with-ray\n    Note: slow\n")
    bp = parse_blueprint(text)
    assert bp.exp_launch_command.endswith("--with-ray") and "(under [exp_launch_command]) Note: slow" in bp.notes
    assert "exp_launch_command" not in _errors(bp)
    hidden = parse_blueprint("## [exp_launch_command]\npython a.py\nNote: then\npython b.py\n")
    assert "'python b.py'" in _errors(hidden)["exp_launch_command"]


def test_non_shell_reason_is_conservative() -> None:
    assert non_shell_reason("python -m ajet.launcher --conf a.yaml") == ""
    assert non_shell_reason("export A=1 && source .venv/bin/activate") == ""
    assert non_shell_reason("Rscript train.R") == ""
    assert non_shell_reason("- hint: x") == "a markdown list item"
    assert non_shell_reason("  - foo", continued=True) == ""  # an argument after a `\`
    assert non_shell_reason("- key: value", continued=True) == "a markdown list item"


def test_more_shell_after_a_blank_line_is_refused_not_guessed() -> None:
    bp = parse_blueprint("## [exp_launch_command]\ncd /x\n\npython -m ajet.launcher --conf a.yaml\n")
    assert bp.exp_launch_command == "cd /x"
    assert "'python -m ajet.launcher --conf a.yaml'" in _errors(bp)["exp_launch_command"]
    fenced = parse_blueprint("## [exp_launch_command]\n```\npython -m ajet.launcher --conf a.yaml\n```\npython x.py\n")
    assert "'python x.py'" in _errors(fenced)["exp_launch_command"]
    prose = parse_blueprint("## [exp_launch_command]\n```\npython -m ajet.launcher --conf a.yaml\n```\n"
                            "The run takes an hour.\n\n- hint: adapt it\n")
    assert "exp_launch_command" not in _errors(prose)
    assert "(under [exp_launch_command]) The run takes an hour." in prose.notes


def test_several_code_blocks_run_the_launcher_one_and_say_so() -> None:
    bp = parse_blueprint("## [exp_launch_command]\nPrepare:\n```bash\npip install -e .\n```\nRun:\n"
                         "```bash\npython -m ajet.launcher --conf a.yaml\n```\n")
    assert bp.exp_launch_command == "python -m ajet.launcher --conf a.yaml"
    assert "pip install -e ." in bp.notes
    warning = next(p for p in bp.parse_problems if p.field == "exp_launch_command")
    assert warning.level == Level.warning and "2 code blocks" in warning.message


def test_two_value_fields_in_one_part_are_refused() -> None:
    bp = parse_blueprint("## [exp_launch_command]\n- content 1: `python a.py`\n- content 2: `python b.py`\n")
    assert "2 value fields" in _errors(bp)["exp_launch_command"]


# ------------------------------------------------------------------------------ paths


@pytest.mark.parametrize(("written", "kept", "dropped"), [
    ("/r`x`y/more", "/r", "`x`y/more"),
    ("/data/run (v2)/results", "/data/run", "(v2)/results"),
    ("/data/a<b>/x", "/data/a", "<b>/x"),
    ("/data/x is where the results go", "/data/x", "is where the results go"),
])
@pytest.mark.parametrize("layout", ["[exp_result_dir] {}\n", "## [exp_result_dir]\n- path: {}\n"])
def test_text_after_a_path_is_an_error_naming_what_would_be_kept_and_dropped(
        layout: str, written: str, kept: str, dropped: str) -> None:
    """Issue 26 item 6: the result dir was silently `/r`, `/data/run`, `/data/a` — a parent of what the
    author wrote, whose files the archive step then moved."""
    message = _errors(parse_blueprint(layout.format(written)))["exp_result_dir"]
    assert repr(kept) in message and repr(dropped) in message and repr(written) in message


@pytest.mark.parametrize(("written", "path", "remark"), [
    ("/data/x (the results)", "/data/x", "(the results)"),
    ("`/data/run (v2)/results`", "/data/run (v2)/results", ""),
    ("/data/x — absolute", "/data/x", "— absolute"),
    ("/data/x, see below", "/data/x", "see below"),
    ("/data/x # the results", "/data/x", "# the results"),
    ("/data/x.", "/data/x", ""),
    ("/mnt/my data/results", "/mnt/my data/results", ""),
])
def test_a_remark_after_a_path_is_kept_as_a_note(written: str, path: str, remark: str) -> None:
    bp = parse_blueprint(f"## [exp_result_dir]\n- path: {written}\n")
    assert bp.exp_result_dir == path and "exp_result_dir" not in _errors(bp)
    if remark:
        assert f"(under [exp_result_dir]) {remark}" in bp.notes


# ------------------------------------------------------------------------------ swarm


def test_swarm_split_forms() -> None:
    tmux, _ = split_swarm_command('tmux new-session -d -s s -c /c "ajet-swarm start --swarm-port=10100"\n'
                                  "sleep 20\npython -m roll")
    assert tmux is not None and tmux.server == "cd /c && ajet-swarm start --swarm-port=10100"
    assert (tmux.client, tmux.delay_seconds, tmux.form) == ("python -m roll", 20.0, "tmux")
    bg, _ = split_swarm_command("cd /c\nexport A=1\npython -m ajet.swarm_cli start --swarm-port 10101 &\npython r.py")
    assert bg is not None and bg.server == "cd /c\nexport A=1\npython -m ajet.swarm_cli start --swarm-port 10101"
    assert bg.client == "cd /c\nexport A=1\npython r.py" and bg.delay_seconds is None
    launcher, _ = split_swarm_command("python -m ajet.launcher --swarm-server &\nsleep 5s\npython r.py")
    assert launcher is not None and launcher.server == "python -m ajet.launcher --swarm-server"
    assert split_swarm_command("python -m ajet.launcher --conf a.yaml") == (None, "")


@pytest.mark.parametrize(("command", "words"), [
    ("ajet-swarm start --swarm-port=10100\npython r.py", "foreground"),
    ("nohup ajet-swarm start > srv.log 2>&1 &\npython r.py", "redirected"),
    ("ajet-swarm start &\npython r.py\najet-swarm start &", "a second swarm server"),
    ("ajet-swarm start &\nsleep 30", "no client"),
    ("pip install x\najet-swarm start &\npython r.py", "before any line that starts a swarm server"),
    ("(ajet-swarm start &> s.log) & (ajet-swarm overwatch)", "a form the runner does not read"),
])
def test_a_swarm_command_that_cannot_be_split_is_refused_saying_what_to_write(command: str, words: str) -> None:
    split, refusal = split_swarm_command(command)
    assert split is None and words in refusal and "## [exp_swarm_server]" in refusal
    bp = parse_blueprint(f"## [exp_yaml_path]\nNA\n## [exp_launch_command]\n```bash\n{command}\n```\n")
    assert words in _errors(bp)["exp_launch_command"]


def test_swarm_bullets_need_a_server_and_a_client() -> None:
    bp = parse_blueprint("## [exp_yaml_path]\n- path: NA\n## [exp_launch_command]\n- server: `ajet-swarm start`\n")
    assert "one `- server:` and one `- client:`" in _errors(bp)["exp_launch_command"]


def test_the_split_survives_storage_for_the_worker() -> None:
    bp = parse_blueprint((SKILLS / "en_swarm_tmux_sleep_client.md").read_text(encoding="utf-8"))
    again = Blueprint.model_validate(json.loads(json.dumps(bp.stored())))
    assert (again.exp_swarm_server, again.exp_swarm_form, again.exp_swarm_client_delay_seconds) == (
        bp.exp_swarm_server, "tmux", 30.0)
    assert again.exp_launch_command == bp.exp_launch_command and again.parse_problems == bp.parse_problems
    assert "exp_swarm_server" not in bp.public() and "parse_problems" not in bp.public()


# -------------------------------------------------------------------------- templates


def _classic(tmp_path: Path, yaml_text: str, command: str = "python -m ajet.launcher --conf a.yaml") -> Blueprint:
    (tmp_path / "a.yaml").write_text(yaml_text, encoding="utf-8")
    return parse_blueprint(_doc(f"""
        [exp_purpose] p
        [exp_codebase_dir] {tmp_path}
        [exp_venv_exe] {sys.executable}
        [exp_yaml_path] a.yaml
        [exp_launch_command] {command}
        [exp_result_dir] {tmp_path}/results
        [exp_max_time] 1h
    """))


@pytest.mark.parametrize("placeholder", ["{{MODEL_PATH}}", "${MaxTime}", "${subject_dir}"])
def test_a_yaml_template_is_refused_as_a_template_naming_its_placeholders(tmp_path: Path, placeholder: str) -> None:
    bp = _classic(tmp_path, f"ajet:\n  model:\n    path: {placeholder}\n  experiment_name: x\n")
    message = _errors(bp, check_disk=True)["exp_yaml_path"]
    assert "is a template" in message and placeholder in message and "not valid YAML" not in message


def test_omegaconf_interpolation_is_not_a_template(tmp_path: Path) -> None:
    bp = _classic(tmp_path, "ajet:\n  a: 1\n  b: ${ajet.a}\n")
    assert "exp_yaml_path" not in _errors(bp, check_disk=True)


def test_an_unfilled_max_time_is_a_template_but_a_defined_one_is_fine() -> None:
    assert "${MaxTime}" in _errors(parse_blueprint("## [exp_max_time]\n- time: ${MaxTime}\n"))["exp_max_time"]
    bp = parse_blueprint("[exp_max_time] ${MaxTime} = 5 小时\n")
    assert bp.exp_max_time_seconds == 5 * 3600 and "exp_max_time" not in _errors(bp)


_GOOD_YAML = ("ajet:\n  execute_test: false\n  trainer_common:\n    logger: tensorboard\n"
              "hydra:\n  searchpath:\n    - file://ajet/default_config\ndefaults:\n  - ajet_default\n  - _self_\n")


def test_a_launcher_prefix_missing_on_path_is_a_preflight_error(tmp_path: Path) -> None:
    """`proxychains4 python …` on a node without proxychains4 exits 127 at launch: refused before."""
    bp = _classic(tmp_path, _GOOD_YAML, "proxychains4 -q python -m ajet.launcher --conf a.yaml")
    (tmp_path / "bare").mkdir()  # the host's own tools are not the test's: proxychains4 may be in /usr/bin
    bare = {"PATH": str(tmp_path / "bare")}
    plan = preflight(bp, env=bare, environment="node n1")
    (problem,) = [p for p in plan.problems if p.level == Level.error]
    assert problem.field == "exp_launch_command" and "`proxychains4`" in problem.message
    assert "node n1" in problem.message
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "proxychains4").write_text("#!/bin/sh\nexec \"$@\"\n")
    (tools / "proxychains4").chmod(0o755)
    plan = preflight(bp, env={"PATH": f"{tools}:{tmp_path / 'bare'}"}, environment="node n1")
    assert not [p for p in plan.problems if p.level == Level.error]
    gone = _classic(tmp_path, _GOOD_YAML, f"{tmp_path}/nope/python -m ajet.launcher --conf a.yaml")
    assert any("does not exist" in p.message for p in preflight(gone, env=bare, environment="x").problems)


# ------------------------------------------------------------------------- bounds


def test_a_parse_past_its_deadline_raises() -> None:
    text = "## [exp_purpose]\n" + "- purpose: x\n" * 900
    with pytest.raises(ParseDeadline):
        parse_blueprint(text, deadline=parse_deadline.after(-1))
    assert parse_blueprint(text, deadline=parse_deadline.after(60)).exp_purpose.startswith("x")


def test_nesting_deeper_than_the_tokenizer_reads_is_an_error_not_a_silent_loss() -> None:
    deep = "".join("  " * k + "- x\n" for k in range(8)) + "\n## [exp_result_dir]\n/r\n"
    errors = _errors(parse_blueprint(deep))
    assert "nest too deep at line" in errors["blueprint"]
    shallow = "".join("  " * k + "- x\n" for k in range(3)) + "\n## [exp_result_dir]\n/r\n"
    assert parse_blueprint(shallow).exp_result_dir == "/r" and "blueprint" not in _errors(parse_blueprint(shallow))


def test_an_unclosed_fence_is_text_and_swallows_nothing() -> None:
    bp = parse_blueprint("## [exp_launch_command]\n```bash\npython -m ajet.launcher --conf a.yaml\n"
                         "## [exp_result_dir]\n/r\n")
    assert bp.exp_launch_command == "python -m ajet.launcher --conf a.yaml" and bp.exp_result_dir == "/r"


def test_the_environment_is_not_read_for_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AJET_TEST_ROOT", os.sep + "data")
    bp = parse_blueprint("## [exp_launch_command]\n- command: `cd $AJET_TEST_ROOT && python x.py`\n")
    assert bp.exp_launch_command == "cd $AJET_TEST_ROOT && python x.py"
