"""Swarm blueprints: the `[exp_swarm_server]` part, detection, the port and `check --json`'s `swarm` field."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ajet_runner.statemachine.blueprint.parse import parse_blueprint, validate_blueprint
from ajet_runner.statemachine.blueprint.swarm_blueprint import DEFAULT_PORT, swarm_spec, val_result_abspath
from tests.conftest import run_cli

_BASE = """# Swarm run
[exp_purpose] swarm smoke test
[exp_codebase_dir] {code}
[exp_venv_exe] {python}
[exp_yaml_path] {yaml}
{server}
[exp_launch_command]
```bash
{launch}
```
[exp_result_dir] {code}/results
[exp_max_time] 1 hour
"""


def _bp(tmp_path: Path, *, server: str = "", yaml: str = "NA", launch: str = "python -m tutorial.agent_roll") -> str:
    return _BASE.format(code=tmp_path, python=sys.executable, yaml=yaml, server=server, launch=launch)


def _errors(text: str) -> list[str]:
    return [f"{p.field}: {p.message}" for p in validate_blueprint(parse_blueprint(text)) if p.level.value == "error"]


@pytest.mark.parametrize("server, port", [
    ("[exp_swarm_server] `ajet-swarm start --swarm-port=10099`", 10099),
    ("[exp_swarm_server]\n```bash\npython -m ajet.swarm_cli start --swarm-port 10123\n```", 10123),
    ("**exp_swarm_server**: python -m ajet.launcher --swarm-server --port 10200", 10200),
    ("## Swarm 服务器启动命令\n\n```\najet-swarm start\n```", DEFAULT_PORT),
])
def test_server_part_and_port(tmp_path: Path, server: str, port: int) -> None:
    bp = parse_blueprint(_bp(tmp_path, server=server))
    spec = swarm_spec(bp)
    assert spec is not None and spec.port == port and spec.server_command.startswith(("ajet-swarm", "python -m ajet"))
    assert bp.exp_yaml_path == ""
    assert _errors(_bp(tmp_path, server=server)) == []


def test_port_from_swarm_url_in_launch_command(tmp_path: Path) -> None:
    text = _bp(tmp_path, server="[exp_swarm_server] ajet-swarm start",
               launch="AJET_SWARM_URL=http://localhost:10555 python -m tutorial.agent_roll")
    spec = swarm_spec(parse_blueprint(text))
    assert spec is not None and spec.port == 10555 and spec.port_source == "launch_command"


def test_classic_blueprint_is_not_swarm_and_needs_yaml(tmp_path: Path) -> None:
    text = _bp(tmp_path).replace("[exp_yaml_path] NA\n", "")
    assert swarm_spec(parse_blueprint(text)) is None
    assert any(e.startswith("exp_yaml_path:") for e in _errors(text))


def test_yaml_na_without_a_server_is_refused_saying_what_to_write(tmp_path: Path) -> None:
    """`NA` means swarm mode (the skills' convention); with no line that starts a server the refusal quotes
    the client line and shows an `[exp_swarm_server]` part, instead of "exp_yaml_path is missing"."""
    text = _bp(tmp_path)
    assert swarm_spec(parse_blueprint(text)) is None
    (error,) = _errors(text)
    assert error.startswith("exp_launch_command:") and "'python -m tutorial.agent_roll'" in error
    assert "## [exp_swarm_server]" in error and "ajet-swarm start --swarm-port=10086" in error


def test_yaml_enable_swarm_mode_defaults_the_server_command(tmp_path: Path) -> None:
    (tmp_path / "swarm.yaml").write_text("ajet:\n  enable_swarm_mode: true\n")
    bp = parse_blueprint(_bp(tmp_path, yaml="swarm.yaml"))
    spec = swarm_spec(bp, (tmp_path / "swarm.yaml").read_text())
    assert spec is not None and spec.port == DEFAULT_PORT and spec.defaulted_command
    assert spec.server_command == f"ajet-swarm start --swarm-port={DEFAULT_PORT} --conf {tmp_path}/swarm.yaml"


@pytest.mark.parametrize("server, field, words", [
    ("[exp_swarm_server] ajet-swarm start --swarm-port=abc", "exp_swarm_server", "'abc' is not a port"),
    ("[exp_swarm_server] ajet-swarm start --swarm-port=70000", "exp_swarm_server", "'70000' is not a port"),
    ("[exp_swarm_server]\n\n", "exp_swarm_server", "server command is empty"),
])
def test_bad_swarm_parts_are_errors_naming_the_field(tmp_path: Path, server: str, field: str, words: str) -> None:
    errors = _errors(_bp(tmp_path, server=server))
    assert any(e.startswith(f"{field}:") and words in e for e in errors), errors


def test_val_result_path_relative_to_codebase(tmp_path: Path) -> None:
    text = _bp(tmp_path, server="[exp_swarm_server] ajet-swarm start") + "[exp_val_result_path] out/val.md\n"
    assert val_result_abspath(parse_blueprint(text)) == f"{tmp_path}/out/val.md"


def test_check_json_shows_swarm(tmp_path: Path) -> None:
    path = tmp_path / "bp.md"
    path.write_text(_bp(tmp_path, server="[exp_swarm_server] ajet-swarm start --swarm-port=10099"))
    proc = run_cli("check", str(path), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, doc["problems"]
    assert doc["swarm"] == {"server_command": "ajet-swarm start --swarm-port=10099", "port": 10099}
    classic = tmp_path / "classic.md"
    classic.write_text(_bp(tmp_path))
    proc = run_cli("check", str(classic), "--json")
    assert json.loads(proc.stdout)["swarm"] is None and proc.returncode == 1


def test_yaml_declared_swarm_plans_no_config_change(tmp_path: Path) -> None:
    """The server reads the YAML as written; the launch command is the client, not a launcher."""
    from ajet_runner.statemachine.fixes.preflight import preflight

    (tmp_path / "swarm.yaml").write_text(
        "ajet:\n  enable_swarm_mode: true\n  project_name: p\n"
        "hydra:\n  searchpath:\n    - file://ajet/default_config\ndefaults:\n  - ajet_default\n  - _self_\n")
    bp = parse_blueprint(_bp(tmp_path, yaml="swarm.yaml",
                             launch="AJET_SWARM_URL=http://localhost:10444 python -m tutorial.agent_roll"))
    plan = preflight(bp, env={}, environment="test")
    assert plan.swarm == {"server_command": f"ajet-swarm start --swarm-port=10444 --conf {tmp_path}/swarm.yaml",
                          "port": 10444}
    assert plan.changes == [] and plan.command_changes == [] and plan.command == bp.exp_launch_command
    assert not [p for p in plan.problems if p.level.value == "error"], plan.problems
    assert not any("does not mention the YAML" in p.message for p in plan.problems)
    assert not any(p.field == "ajet.trainer_common.logger" for p in plan.problems)
