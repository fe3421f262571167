"""Every command's `--help` as a person reads it: no Python type labels, no sentinel defaults, an example."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import pytest
import typer

from ajet_runner.cli.app import app
from ajet_runner.cli.commands.help_text import tidy

ROOT = tidy(typer.main.get_command(app))


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not hasattr(command, "list_commands"):
        return [path]
    ctx = typer.Context(command, info_name=path[-1] if path else "ajet-runner")
    subs = {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}  # the lazy ones built
    return [leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, (*path, name))]


COMMANDS = _leaves(ROOT)


def help_of(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "150")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        ROOT.main([*path, "--help"], prog_name="ajet-runner", standalone_mode=False)
    return out.getvalue()


def test_every_command_is_covered() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"submit", "scan", "watch", "drain", "worker", "up", "catalogue check", "results", "diagnose"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p))
def test_help_reads_like_a_person_wrote_it(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    text = help_of(path, monkeypatch)
    assert "Usage: ajet-runner " + " ".join(path) in text
    types = re.findall(r"<(?:str|int|float|bool|path|list\[[^\]]*\])>", text)
    assert not types, f"Python types in the help: {types}"
    sentinels = re.findall(r"\[default: (?:-1|0|)\]", text)
    assert not sentinels, f"a sentinel default: {sentinels}"
    examples = re.findall(r"Example: (?:\S+=\S+ )*ajet-runner \S+", text)
    assert examples, "no example"


def test_sentinel_defaults_are_said_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    text = " ".join(help_of(("worker",), monkeypatch).split())
    assert "all GPUs nvidia-smi lists" in text and "one per GPU" in text
    assert "--gpus GPUS" in text and "--log-level LEVEL" in text and "--help Show" in text
