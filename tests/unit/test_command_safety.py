"""`--autokill` / `--kill` never reach the launcher, however written; every launcher call is rewritten.

The property test is checked by running bash: the rewritten command is executed with stub
`python`/`proxychains4` programs that record each launcher call's arguments, which are then
parsed by an argparse parser with the real launcher's options. Whatever the spelling, either
the analysis refuses the command or no recorded call parses to --autokill / --kill.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.fixes.preflight import plan_preflight
from ajet_runner.statemachine.models import Blueprint
from ajet_runner.statemachine.shell.command import (
    LAUNCH_COMMAND_MAX_CHARS,
    add_flag,
    analyze_command,
    conf_path,
    has_flag,
    hazard_of,
    prefix_launcher,
    remove_hazards,
    replace_conf,
)

YAML = "ajet:\n  execute_test: false\nhydra:\n  searchpath: [file://x]\ndefaults:\n  - _self_\n"
LAUNCH = "python -m ajet.launcher --conf a.yaml"


def _plan(command: str):
    bp = Blueprint(exp_codebase_dir="/repo", exp_yaml_path="a.yaml", exp_launch_command=command,
                   exp_result_dir="/r", exp_max_time_seconds=3600)
    return plan_preflight(bp, YAML, env={})


def _errors(plan) -> list[str]:
    return [p.message for p in plan.problems if p.level.value == "error" and p.field == "exp_launch_command"]


# ------------------------------------------------------------------------- the repros


def test_second_launcher_call_in_a_chain_is_rewritten_too() -> None:
    """Repro (issue 18, 3): only the first call was checked; the second kept --autokill and the raw YAML."""
    cmd = "python -m ajet.launcher --conf A && python -m ajet.launcher --conf A --autokill"
    plan = _plan(cmd)
    assert "--autokill" not in plan.command and plan.command.count("ajet.launcher") == 2
    assert plan.command_changes and "--autokill" in plan.command_changes[0].reason
    pointed = replace_conf(plan.command, "/copy/p.yaml")
    assert pointed == "python -m ajet.launcher --conf /copy/p.yaml && python -m ajet.launcher --conf /copy/p.yaml"
    assert add_flag(pointed, "--skip-check-avail-gpu").count("--skip-check-avail-gpu") == 2
    assert add_flag(add_flag(pointed, "--x"), "--x") == add_flag(pointed, "--x")


def test_lexer_defects_read_right() -> None:
    """Repro (issue 18, 9): `${CONF:-x y.yaml}`, `<(cat x.yaml)` and a comment inside `$()`."""
    assert conf_path("python -m ajet.launcher --conf ${CONF:-x y.yaml} --with-ray") == "${CONF:-x y.yaml}"
    call = analyze_command("python -m ajet.launcher --conf ${CONF:-x y.yaml} --with-ray").calls[0]
    assert call.conf_expanded and call.args == ("--conf", "${CONF:-x y.yaml}", "--with-ray")
    plan = _plan("python -m ajet.launcher --conf ${CONF:-x y.yaml} --with-ray")
    assert plan.command == "python -m ajet.launcher --conf a.yaml --with-ray"
    assert "only known at run time" in plan.command_changes[0].reason
    sub = analyze_command("diff <(cat x.yaml) b.yaml; python -m ajet.launcher --conf a.yaml")
    assert [c.conf for c in sub.calls] == ["a.yaml"] and not sub.refusals
    commented = "x=$(python -m ajet.launcher --conf a.yaml # the (main) run\n)"
    assert [c.conf for c in analyze_command(commented).calls] == ["a.yaml"]
    assert replace_conf(commented, "/p.yaml") == "x=$(python -m ajet.launcher --conf /p.yaml # the (main) run\n)"


@pytest.mark.parametrize("cmd", [
    'bash -c "python -m ajet.launcher --conf a.yaml --autokill"',
    "sh -c 'cd . && python -m ajet.launcher --conf a.yaml --auto'",
    "bash -lc 'python -m ajet.launcher --conf=a.yaml --autok=1'",
    "env A=1 proxychains4 -q python -m ajet.launcher --conf a.yaml --kill 'python|ray'",
    "python -m ajet.launcher --conf a.yaml --k=python",
    "python -m ajet.launcher --conf a.yaml -\"\"-autokill",
    "bash <<'EOF'\npython -m ajet.launcher --conf a.yaml --a\nEOF",
    "f() { python -m ajet.launcher --conf a.yaml --autokill; }\nf",
    "if true; then\n  python -m ajet.launcher --conf a.yaml --autokill\nfi",
    "bash -c \"bash -c 'python -m ajet.launcher --conf a.yaml --autokill'\"",
    "eval 'python -m ajet.launcher --conf a.yaml --autokill'",
    "case x in x) python -m ajet.launcher --conf a.yaml --autokill;; esac",  # bashlex could not read `case`
])
def test_hidden_spellings_are_rewritten(cmd: str) -> None:
    plan = _plan(cmd)
    assert not _errors(plan), plan.problems
    assert plan.command_changes and plan.cleanup_on_stop
    assert all(not c.hazards for c in analyze_command(plan.command).calls)
    assert analyze_command(plan.command).calls, "the launcher call itself stays"


@pytest.mark.parametrize(("cmd", "why"), [
    ("python -m ajet.launcher --conf a.yaml $EXTRA", "only known at run time"),
    ('f() { python -m ajet.launcher --conf a.yaml "$@"; }\nf --autokill', "only known at run time"),
    ("echo python -m ajet.launcher --autokill | bash", "piped into `bash`"),
    ("python -c 'import os; os.system(\"python -m ajet.launcher --autokill\")'", "cannot read or rewrite"),
    ("A=--autokill; python -m ajet.launcher --conf a.yaml $A", "only known at run time"),
    ("echo --autokill > args; python -m ajet.launcher --conf a.yaml", "carries --autokill"),
    ("cat > run.sh <<'EOF'\npython -m ajet.launcher --conf a.yaml --autokill\nEOF\nbash run.sh", "carries --autokill"),
    ("echo a.yaml | xargs python -m ajet.launcher --conf", "xargs"),
    ("if true; then\n  python -m ajet.launcher --conf a.yaml --autokill\n", "bash parser cannot read it"),
    ('bash -c "python -m ajet.launcher --conf $C --autokill"', "built at run time"),
    ("python -m ajet.launcher --conf a.yaml " + "x" * LAUNCH_COMMAND_MAX_CHARS, "at most"),
])
def test_what_cannot_be_read_is_refused_with_the_reason(cmd: str, why: str) -> None:
    errors = _errors(_plan(cmd))
    assert errors and any(why in e for e in errors), errors
    assert all(e.startswith("cannot be run safely") for e in errors)


def test_notes_and_harmless_mentions() -> None:
    plan = _plan("bash train.sh")
    assert plan.ok and any("no launcher call is visible" in p.message for p in plan.problems)
    ok = _plan("echo --autokill is not used; python -m ajet.launcher --conf a.yaml  # no --autokill here")
    assert ok.ok and not ok.command_changes
    two = _plan("python -m ajet.launcher --conf a.yaml; python -m ajet.launcher --conf b.yaml")
    assert any("different YAMLs" in e for e in _errors(two))


def test_check_reports_the_refusal_like_run(tmp_path: Path) -> None:
    """`check` uses the same preflight: a refused command makes the blueprint not runnable."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "a.yaml").write_text(YAML)
    bp = tmp_path / "bp.md"
    bp.write_text(f"[exp_codebase_dir] {code}\n[exp_venv_exe] {sys.executable}\n[exp_yaml_path] a.yaml\n"
                  "[exp_launch_command] `python -m ajet.launcher --conf a.yaml $EXTRA`\n"
                  f"[exp_result_dir] {tmp_path / 'r'}\n[exp_max_time] 1h\n")
    script = Path(sys.executable).parent / "ajet-runner"
    proc = subprocess.run([str(script), "check", str(bp), "--json"], capture_output=True, text=True, timeout=60,
                          check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert any(p["field"] == "exp_launch_command" and "only known at run time" in p["message"]
               for p in doc["problems"])


def test_prefix_and_flags_reach_every_call() -> None:
    cmd = "python -m ajet.launcher --conf a.yaml\nbash -c 'python -m ajet.launcher --conf a.yaml'"
    out = prefix_launcher(cmd, "proxychains4 -q")
    assert out.count("proxychains4 -q python") == 2 and prefix_launcher(out, "proxychains4 -q") == out
    assert has_flag("bash -c 'python -m ajet.launcher --auto'", "--autokill")


# ------------------------------------------------------------ generated spellings, run by bash

LAUNCHER_PARSER = argparse.ArgumentParser(exit_on_error=False, add_help=False)
for _opt in ("--backbone", "--conf", "--exp-dir", "--prefix", "--swarm-overwatch", "--kill"):
    LAUNCHER_PARSER.add_argument(_opt, default="")
LAUNCHER_PARSER.add_argument("--debug", "--db", "--bp", "--breakpoint", default="")
for _flag in ("--swarm-server", "--with-ray", "--with-ray-cluster", "--with-appworld", "--with-deepfinance",
              "--with-webshop", "--with-bfcl", "--with-logview", "--with-crafters", "--skip-check-avail-gpu",
              "--autokill"):
    LAUNCHER_PARSER.add_argument(_flag, action="store_true")

# A `python` that only records the launcher's arguments (unit separator between them, record
# separator after each call): bash, so a call costs a fork, not a Python start.
RECORDER = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = ajet.launcher ]; then
    shift 2
    { for a in "$@"; do printf '%s\\037' "$a"; done; printf '\\036'; } >> "$CALLS"
fi
"""


def _dq(text: str) -> str:
    return '"' + "".join("\\" + c if c in '\\"$`' else c for c in text) + '"'


QUOTES = [shlex.quote, _dq]
PLACES = [
    "{L}", "cd . && {L}", "true; {L}", "true\n{L}", "env A=1 {L}", "proxychains4 -q {L}", "(cd . && {L})",
    "bash -c {Q(L)}", "sh -c {Q(L)}", "bash -ec {Q(L)}", "bash -c {Q(true && L)}", "f() {{ {L}; }}\nf",
    "if true; then\n  {L}\nfi", "bash <<'EOF'\n{L}\nEOF", "x=$({L})", "{L} 2>&1 | cat", "nohup {L} &\nwait",
    "bash -c {Q(bash -c Q(L))}", "env {L}", "timeout 30 {L}", "eval {Q(L)}",
    # read since the tree-sitter parser (bashlex refused them, or missed the herestring)
    "case x in x) {L};; esac", "[[ -n x ]] && {L}", "timeout $((10 * 3)) {L}", "bash <<< {Q(L)}",
    "{{ {L}; }} 2>&1 | cat", "{L} > out.log",
]


def _spelling(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        name = "--" + "autokill"[: draw(st.integers(1, 8))]
        tail = draw(st.sampled_from(["", "", "=1", "="]))
        word = name + tail
    else:
        name = "--" + "kill"[: draw(st.integers(1, 4))]
        word = draw(st.sampled_from([f"{name} python", f"{name}=python", f"{name} 'ray|vllm'"]))
    style = draw(st.sampled_from(["plain", "empty-quotes", "quoted", "escaped"]))
    if style == "empty-quotes":
        word = '-""' + word[1:]
    elif style == "quoted":
        word = shlex.quote(word.split(" ")[0]) + word[len(word.split(" ")[0]):]
    elif style == "escaped":
        word = word[:3] + "\\" + word[3:] if len(word) > 3 and word[3].isalpha() else word
    return word


@st.composite
def hidden_autokill(draw: st.DrawFn) -> str:
    hazard = _spelling(draw)
    before = draw(st.booleans())
    call = f"python -m ajet.launcher {hazard} --conf a.yaml" if before else f"{LAUNCH} {hazard}"
    if draw(st.booleans()):
        call = f"{call} --with-ray"
    place = draw(st.sampled_from(PLACES))
    q = draw(st.sampled_from(QUOTES))
    inner = {"Q(L)": q(call), "Q(true && L)": q(f"true && {call}"), "Q(bash -c Q(L))": q(f"bash -c {q(call)}")}
    for key, value in inner.items():
        place = place.replace("{" + key + "}", value)
    return place.replace("{L}", call).replace("{{", "{").replace("}}", "}")


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stubs")
    for name in ("python", "python3"):
        (root / name).write_text(RECORDER)
        (root / name).chmod(0o755)
    proxy = root / "proxychains4"
    proxy.write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n')
    proxy.chmod(0o755)
    return root


def _launcher_calls(command: str, stub_bin: Path, work: Path) -> list[list[str]]:
    calls = work / "calls.rec"
    calls.unlink(missing_ok=True)
    env = {"PATH": f"{stub_bin}:{os.environ['PATH']}", "CALLS": str(calls), "HOME": str(work)}
    script = work / "command.sh"
    script.write_text(command + "\n")
    subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, timeout=30, check=False)
    if not calls.exists():
        return []
    records = calls.read_text().split("\x1e")[:-1]
    return [record.split("\x1f")[:-1] for record in records]


@settings(max_examples=int(os.environ.get("AJET_FUZZ_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cmd=hidden_autokill())
def test_generated_spellings_never_reach_the_launcher(cmd: str, stub_bin: Path, tmp_path: Path) -> None:
    raw_calls = _launcher_calls(cmd, stub_bin, tmp_path)
    assert raw_calls, f"the generator must produce a real launcher call: {cmd!r}"
    reached = False
    for args in raw_calls:
        try:
            parsed = LAUNCHER_PARSER.parse_args(args)
        except argparse.ArgumentError:
            continue
        reached = reached or bool(parsed.autokill or parsed.kill)
    plan = _plan(cmd)
    if _errors(plan):
        return  # refused with a reason: never run
    for args in _launcher_calls(plan.command, stub_bin, tmp_path):
        try:
            parsed = LAUNCHER_PARSER.parse_args(args)
        except argparse.ArgumentError:
            continue
        assert not parsed.autokill and not parsed.kill, (cmd, plan.command, args)
    assert _launcher_calls(plan.command, stub_bin, tmp_path), (cmd, plan.command)
    assert not reached or plan.command_changes


def test_hazard_of_follows_argparse_prefixes() -> None:
    assert [hazard_of(a) for a in ("--a", "--auto", "--autokill=1", "--k", "--kill=x", "--autokills", "-a",
                                   "--conf")] == ["--autokill", "--autokill", "--autokill", "--kill", "--kill",
                                                  None, None, None]


def test_rewrites_are_fast() -> None:
    cmd = "\n".join([f"cd . && {LAUNCH} --autokill"] * 100)
    started = time.perf_counter()
    out = remove_hazards(cmd)
    assert time.perf_counter() - started < 2.0 and "--autokill" not in out
