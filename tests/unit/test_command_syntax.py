"""What the tree-sitter analysis reads that bashlex could not, and what it refuses as unreadable.

Each test here failed on the bashlex analysis (a refusal where the command is plain bash, a hole
where --autokill got through, a rewrite that dropped a redirection, a chain split inside a function).
"""

from __future__ import annotations

import shlex

import pytest

from ajet_runner.statemachine.fixes.preflight import plan_preflight
from ajet_runner.statemachine.models import Blueprint
from ajet_runner.statemachine.shell.command import (
    add_flag,
    analyze_command,
    launcher_segment,
    remove_hazards,
    replace_conf,
    split_chain,
)

YAML = "ajet:\n  execute_test: false\nhydra:\n  searchpath: [file://x]\ndefaults:\n  - _self_\n"
LAUNCH = "python -m ajet.launcher --conf a.yaml"


def _plan(command: str):
    bp = Blueprint(exp_codebase_dir="/repo", exp_yaml_path="a.yaml", exp_launch_command=command,
                   exp_result_dir="/r", exp_max_time_seconds=3600)
    return plan_preflight(bp, YAML, env={})


def _errors(plan) -> list[str]:
    return [p.message for p in plan.problems if p.level.value == "error" and p.field == "exp_launch_command"]


def _warnings(plan) -> list[str]:
    return [p.message for p in plan.problems if p.level.value == "warning" and p.field == "exp_launch_command"]


@pytest.mark.parametrize(("cmd", "rewritten"), [
    (f"case $MODE in\n  full) {LAUNCH} --autokill ;;\n  *) echo skip ;;\nesac",
     f"case $MODE in\n  full) {LAUNCH} ;;\n  *) echo skip ;;\nesac"),
    (f"[[ -f a.yaml && $HOST == gpu* ]] && {LAUNCH} --auto", f"[[ -f a.yaml && $HOST == gpu* ]] && {LAUNCH}"),
    (f"timeout $((3600 * 10)) {LAUNCH} --autokill", f"timeout $((3600 * 10)) {LAUNCH}"),
    (f"(( RETRIES = 2 )); {LAUNCH} --k=python", f"(( RETRIES = 2 )); {LAUNCH}"),
    (f"case x in --autokill) echo pattern only;; esac; {LAUNCH}", f"case x in --autokill) echo pattern only;; esac; "
                                                                  f"{LAUNCH}"),
])
def test_case_tests_and_arithmetic_are_read(cmd: str, rewritten: str) -> None:
    plan = _plan(cmd)
    assert not _errors(plan), plan.problems
    assert plan.command == rewritten


def test_arithmetic_in_a_launcher_argument_is_still_run_time() -> None:
    assert any("only known at run time" in e for e in _errors(_plan(f"{LAUNCH} --x $((1 + 1))")))


def test_a_herestring_fed_to_a_shell_is_read_like_a_heredoc() -> None:
    """bashlex dropped herestrings: `bash <<< '... --autokill'` ran the launcher with --autokill."""
    plan = _plan(f"bash <<< '{LAUNCH} --autokill'")
    assert not _errors(plan) and plan.command == f"bash <<< '{LAUNCH}'"
    assert [c.where for c in analyze_command(plan.command).calls] == ["in the herestring fed to `bash`"]
    expanded = _errors(_plan(f'bash <<< "{LAUNCH} $EXTRA --autokill"'))
    assert any("herestring fed to `bash` is expanded at run time" in e for e in expanded), expanded


@pytest.mark.parametrize("cmd", [
    f"{{ echo --autokill; }} > args; {LAUNCH}",  # a group's redirection writes what is inside it
    "A=$(echo --autokill) bash train.sh",  # an inert program's output captured into a variable
    f"for flag in --autokill; do echo $flag; done; {LAUNCH}",  # no command word holds it
])
def test_hazards_written_where_the_runner_cannot_follow_are_refused(cmd: str) -> None:
    errors = _errors(_plan(cmd))
    assert any("carries --autokill" in e for e in errors), errors


def test_removing_a_flag_keeps_the_redirection_before_it() -> None:
    """bash passes `--autokill` after `> out.log` to the launcher; removing it must leave `> out.log`."""
    assert remove_hazards(f"{LAUNCH} > out.log --autokill") == f"{LAUNCH} > out.log"
    assert remove_hazards(f"{LAUNCH} 2>&1 --kill python --with-ray") == f"{LAUNCH} 2>&1 --with-ray"
    assert add_flag(f"{LAUNCH} > out.log --with-ray", "--x") == f"{LAUNCH} > out.log --with-ray --x"


def test_rewrites_splice_bytes_of_non_ascii_text() -> None:
    cmd = "cd 实验 && python -m ajet.launcher --conf 配置.yaml --autokill  # 备注 --autokill"
    assert remove_hazards(cmd) == "cd 实验 && python -m ajet.launcher --conf 配置.yaml  # 备注 --autokill"
    assert replace_conf(cmd, "/副本/p.yaml") == cmd.replace("配置.yaml", shlex.quote("/副本/p.yaml"))


@pytest.mark.parametrize(("cmd", "where"), [
    (f"{LAUNCH} --conf 'a.yaml", "line 1"),  # unterminated quote: bash runs nothing of the line
    (f"if true; then\n  {LAUNCH} --autokill", "line 1"),  # no `fi`
    (f"{LAUNCH} --autokill && &&", "unexpected `&& &&` at line 1, column 50"),  # bash stops before the line
    (f"echo $((\n{LAUNCH}", "line 1"),  # before the launcher: everything after is unsure
    (f"bash <<EOF\n{LAUNCH} --autokill", "line 1"),  # a heredoc without its terminator
])
def test_unreadable_text_at_or_before_the_launcher_is_refused(cmd: str, where: str) -> None:
    errors = _errors(_plan(cmd))
    assert any("bash parser cannot read it" in e and where in e for e in errors), errors
    assert not analyze_command(cmd).calls  # nothing is rewritten on a guess


def test_unreadable_text_after_the_launchers_line_is_a_warning() -> None:
    """bash runs a script line by line and stops at the syntax error: the launcher line ran as rewritten."""
    plan = _plan(f"{LAUNCH} --autokill\necho 'unterminated")
    assert not _errors(plan) and plan.command == f"{LAUNCH}\necho 'unterminated"
    assert any("cannot read what follows the launcher" in w and "line 2" in w for w in _warnings(plan))
    quiet = analyze_command("echo 'unterminated")
    assert not quiet.refusals and any("runs as written" in n for n in quiet.notes)


def test_the_chain_keeps_functions_ifs_and_heredocs_whole() -> None:
    assert split_chain("f() { cd x; make; }\nf && run") == ["f() { cd x; make; }", "f", "run"]
    assert split_chain("if a; then b; fi; c") == ["if a; then b; fi", "c"]
    script = f"cd sub\nbash <<'EOF'\n{LAUNCH}\nEOF"
    assert split_chain(script) == ["cd sub", f"bash <<'EOF'\n{LAUNCH}\nEOF"] and launcher_segment(script) == 1
    assert split_chain("a && ") == ["a"]


def test_the_launcher_segment_of_a_nested_call_is_the_command_holding_it() -> None:
    """Used for `cd` tracking: the `bash -c` string runs after `cd /x`."""
    assert launcher_segment(f"cd /x && bash -c '{LAUNCH}'") == 1
    assert launcher_segment(f"echo hi; x=$({LAUNCH})") == 1
