"""Launch-command rewriting: real blueprint commands in, byte-identical edits out."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.shell.command import (
    add_flag,
    conf_path,
    has_flag,
    launcher_segment,
    prefix_launcher,
    remove_flag,
    replace_conf,
    split_chain,
)
from tests.load import examples

SIMPLE = "python -m ajet.launcher --conf tests/bench/benchmark_math/benchmark_math.yaml --autokill"
CHAIN = "cd /repo && export A=1 && source .venv/bin/activate && python -m ajet.launcher --conf=x.yaml --with-ray"
PIPED = 'CUDA_VISIBLE_DEVICES=0,1 python -m ajet.launcher --conf "my dir/x.yaml" --autokill 2>&1 | tee log.txt'


def test_split_chain_on_and_or_semicolon_respecting_quotes() -> None:
    assert split_chain(CHAIN) == [
        "cd /repo", "export A=1", "source .venv/bin/activate", "python -m ajet.launcher --conf=x.yaml --with-ray",
    ]
    assert split_chain('echo "a && b; c" || true; ls') == ['echo "a && b; c"', "true", "ls"]
    assert split_chain("echo 'x || y'") == ["echo 'x || y'"]
    assert split_chain("a;;b") == ["a", "b"]
    assert split_chain(PIPED) == [PIPED]  # a pipe is one command of the chain
    assert split_chain("(cd x && make) && run") == ["(cd x && make)", "run"]
    assert split_chain("a\nb") == ["a", "b"]
    assert split_chain("") == []
    assert split_chain("  ;  ") == []


def test_launcher_segment_finds_the_launcher_behind_wrappers() -> None:
    assert launcher_segment(SIMPLE) == 0
    assert launcher_segment(CHAIN) == 3
    assert launcher_segment("cd /r; env A=1 proxychains4 -q /x/.venv/bin/python3 -m ajet.launcher --conf a.yaml") == 1
    assert launcher_segment('echo "a && b" && ajet-launcher --conf a.yaml') == 1
    assert launcher_segment("ajet --conf a.yaml") == 0
    assert launcher_segment("python3 -majet.launcher --conf a.yaml") == 0
    assert launcher_segment("python ajet/launcher.py --conf a.yaml") == 0
    assert launcher_segment("nohup timeout 10h python -m ajet.launcher --conf a.yaml") == 0
    assert launcher_segment("uv run python -m ajet.launcher --conf a.yaml") == 0
    assert launcher_segment("python -m other.module --conf a.yaml") is None
    assert launcher_segment("echo ajet") is None
    assert launcher_segment("bash run.sh") is None


def test_conf_path_both_forms_and_quoted() -> None:
    assert conf_path(SIMPLE) == "tests/bench/benchmark_math/benchmark_math.yaml"
    assert conf_path(CHAIN) == "x.yaml"
    assert conf_path(PIPED) == "my dir/x.yaml"
    assert conf_path("python -m ajet.launcher --conf='a b.yaml'") == "a b.yaml"
    assert conf_path("python -m ajet.launcher --with-ray") is None
    assert conf_path("python -m ajet.launcher --conf") is None
    assert conf_path("") is None


def test_replace_conf_keeps_everything_else_byte_identical() -> None:
    assert replace_conf(SIMPLE, "/tmp/p.yaml") == (
        "python -m ajet.launcher --conf /tmp/p.yaml --autokill"
    )
    assert replace_conf(CHAIN, "/a b/p.yaml") == (
        "cd /repo && export A=1 && source .venv/bin/activate && "
        "python -m ajet.launcher --conf='/a b/p.yaml' --with-ray"
    )
    assert replace_conf(PIPED, "/n.yaml") == PIPED.replace('"my dir/x.yaml"', "/n.yaml")
    assert replace_conf("python -m ajet.launcher --with-ray", "/n.yaml") == (
        "python -m ajet.launcher --with-ray --conf /n.yaml"
    )
    assert conf_path(replace_conf(PIPED, "/we ird/'q'.yaml")) == "/we ird/'q'.yaml"


def test_has_and_remove_flag() -> None:
    assert has_flag(SIMPLE, "--autokill")
    assert not has_flag(CHAIN, "--autokill")
    assert has_flag(CHAIN, "--with-ray")
    assert not has_flag(SIMPLE, "--auto")  # no prefix matches
    assert remove_flag(SIMPLE, "--autokill") == SIMPLE.removesuffix(" --autokill")
    assert remove_flag(PIPED, "--autokill") == (
        'CUDA_VISIBLE_DEVICES=0,1 python -m ajet.launcher --conf "my dir/x.yaml" 2>&1 | tee log.txt'
    )
    middle = "python -m ajet.launcher --autokill --conf a.yaml"
    assert remove_flag(middle, "--autokill") == "python -m ajet.launcher --conf a.yaml"
    assert remove_flag(CHAIN, "--autokill") == CHAIN
    assert remove_flag("python -m ajet.launcher --kill 'python|ray' --conf a.yaml", "--kill", takes_value=True) == (
        "python -m ajet.launcher --conf a.yaml"
    )
    # an `echo --autokill` before the launcher is not the launcher's flag
    assert remove_flag("echo --autokill && " + SIMPLE, "--autokill") == "echo --autokill && " + remove_flag(
        SIMPLE, "--autokill"
    )


def test_add_flag_goes_before_redirections_and_is_idempotent() -> None:
    added = add_flag(PIPED, "--skip-check-avail-gpu")
    assert added == PIPED.replace("--autokill 2>&1", "--autokill --skip-check-avail-gpu 2>&1")
    assert add_flag(added, "--skip-check-avail-gpu") == added
    assert add_flag(CHAIN, "--with-ray") == CHAIN
    assert add_flag("python -m ajet.launcher --conf a.yaml > out.log", "--with-ray") == (
        "python -m ajet.launcher --conf a.yaml --with-ray > out.log"
    )
    assert add_flag("", "--x") == ""


def test_prefix_launcher_after_assignments_and_idempotent() -> None:
    assert prefix_launcher(PIPED, "proxychains4 -q") == PIPED.replace(
        "0,1 python", "0,1 proxychains4 -q python"
    )
    chained = prefix_launcher(CHAIN, "proxychains4 -q")
    assert chained.endswith("&& proxychains4 -q python -m ajet.launcher --conf=x.yaml --with-ray")
    assert chained.startswith("cd /repo && export A=1 && source")
    assert prefix_launcher(chained, "proxychains4 -q") == chained
    already = "env A=1 proxychains -q python -m ajet.launcher --conf a.yaml"
    assert prefix_launcher(already, "proxychains4 -q") == already  # same family counts
    assert prefix_launcher(SIMPLE, "  ") == SIMPLE


def test_shell_still_parses_the_rewritten_command() -> None:
    rewritten = prefix_launcher(add_flag(remove_flag(replace_conf(PIPED, "/x y/z.yaml"), "--autokill"),
                                         "--skip-check-avail-gpu"), "proxychains4 -q")
    words = shlex.split(rewritten)
    assert words[:6] == ["CUDA_VISIBLE_DEVICES=0,1", "proxychains4", "-q", "python", "-m", "ajet.launcher"]
    assert "/x y/z.yaml" in words and "--autokill" not in words and "--skip-check-avail-gpu" in words


@pytest.mark.parametrize("cmd", ["python -m ajet.launcher --conf 'unterminated", 'a "b', "a $(b && c", "a \\"])
def test_odd_input_does_not_raise(cmd: str) -> None:
    split_chain(cmd)
    launcher_segment(cmd)
    conf_path(cmd)
    replace_conf(cmd, "/x.yaml")
    add_flag(cmd, "--f")
    remove_flag(cmd, "--f")
    prefix_launcher(cmd, "proxychains4 -q")


_PIECES = [*"ab -=&|;'\"\\$()`#<>\n\t", "--conf", "ajet", "python -m ajet.launcher ", "--autokill"]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=25).map("".join) | st.text(max_size=40), st.text(max_size=15))
def test_command_functions_never_raise(cmd: str, other: str) -> None:
    segments = split_chain(cmd)
    index = launcher_segment(cmd)
    assert index is None or 0 <= index < len(segments)
    conf_path(cmd)
    has_flag(cmd, other)
    for out in (replace_conf(cmd, other), add_flag(cmd, other), remove_flag(cmd, other),
                prefix_launcher(cmd, other)):
        assert isinstance(out, str)
    assert remove_flag(cmd, "--never-there") == cmd
