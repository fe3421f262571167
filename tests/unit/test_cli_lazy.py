"""The lazy root group: importing the CLI, `--help` and name completion import no command's module;
every command is listed with the help it really has; each still builds and runs its own `--help`."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from ajet_runner.cli.app import app
from ajet_runner.cli.lazy import COMMANDS

# What made `ajet-runner --help` take 30x an empty Python: none may load before a command runs.
HEAVY = ("httpx", "pydantic", "pydantic_settings", "yaml", "redis", "rq", "libtmux", "psutil", "transitions",
         "ajet_runner.store.settings", "ajet_runner.statemachine.blueprint.parse",
         "ajet_runner.statemachine.failures.signatures", "ajet_runner.service.client.api_client",
         "ajet_runner.cli.commands.client_commands", "ajet_runner.cli.commands.check_command")


def loaded_after(code: str, **env: str) -> list[str]:
    """The HEAVY modules in sys.modules after `code` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_cli_and_its_help_load_no_command_module() -> None:
    code = ("import ajet_runner.cli.app as a, typer, contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    a.main()\n")
    assert loaded_after("import ajet_runner.cli.app") == []
    assert loaded_after(f"import sys\nsys.argv = ['ajet-runner', '--help']\n{code}") == []
    completion = {"_AJET_RUNNER_COMPLETE": "complete_bash", "COMP_WORDS": "ajet-runner sc", "COMP_CWORD": "1"}
    # typer itself coerces the root's parameters with pydantic while completing: not a module of ours
    assert loaded_after(f"import sys\nsys.argv = ['ajet-runner']\n{code}", **completion) in ([], ["pydantic"])


def test_help_lists_every_command_with_its_own_help(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="ajet-runner")
    listed = CliRunner().invoke(app, ["--help"]).output
    real = root.load_all(ctx)  # type: ignore[attr-defined]
    assert list(real) == list(COMMANDS) and all(real.values())
    for name, cmd in real.items():
        first = inspect.cleandoc(cmd.help or "").split("\n\n")[0]
        assert COMMANDS[name].help == first, f"cli/lazy.py's help of {name!r} differs from the command's"
        assert f" {name} " in listed and " ".join(first.split()[:4]) in " ".join(listed.split())


def test_a_command_builds_on_first_use_and_runs_its_help() -> None:
    result = CliRunner().invoke(app, ["scan", "--help"])
    assert result.exit_code == 0 and "--state" in result.output
    result = CliRunner().invoke(app, ["stage", "list", "--help"])
    assert result.exit_code == 0 and "Usage: ajet-runner stage list" in " ".join(result.output.split())


def test_a_typo_is_answered_with_the_commands_it_resembles() -> None:
    result = CliRunner().invoke(app, ["scna"])
    assert result.exit_code == 2 and "Did you mean 'scan'" in result.output
