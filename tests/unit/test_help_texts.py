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


def _command(words: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command the words name and the words after it."""
    command, i = ROOT, 0
    while hasattr(command, "list_commands") and i < len(words):
        sub = command.get_command(typer.Context(command, info_name="ajet-runner"), words[i])
        if sub is None:
            break
        command, i = sub, i + 1
    return command, words[i:]


DOC_ROW = re.compile(r"^\| `ajet-runner ([^`]+)` \|", re.M)


@pytest.mark.parametrize("doc", ["README.md", "docs/cli.md"])
def test_the_docs_command_tables_name_options_and_arguments_the_commands_take(doc: str) -> None:
    """Each `ajet-runner CMD ...` row: its --options exist on CMD, and a bare NAME (not an option's value) is
    one of CMD's arguments (the README once showed `up [DIR]`; `up` takes `--dir DIR`)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / doc).read_text(encoding="utf-8")
    rows = [r for r in DOC_ROW.findall(text) if "/" not in r.split(" [")[0] and "," not in r]
    assert len(rows) >= 6, rows
    for row in rows:
        command, rest = _command(row.split())
        assert not hasattr(command, "list_commands"), f"{doc}: `{row}` names no command"
        opts = {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
        takes_arguments = any(p.param_type_name == "argument" for p in command.params)
        words = [w.strip("[]…|") for w in rest]
        for before, word in zip(["", *words], words, strict=False):
            if word.startswith("--"):
                assert word.split("=")[0] in opts, f"{doc}: `{row}`: {command.name} has no {word}"
            elif word.isupper() and not before.startswith("--"):
                assert takes_arguments, f"{doc}: `{row}`: {command.name} takes no argument {word}"


def test_demo_help_lists_every_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    from ajet_runner.service.demo import list_templates

    text = " ".join(help_of(("demo",), monkeypatch).replace("│", " ").split())
    samples = list_templates()
    assert len(samples) >= 10 and "oom_first_attempt" in samples
    for name in samples:
        assert re.search(rf"[ :,]{name}[,\s]", text), f"demo --help does not list {name}: {text}"
