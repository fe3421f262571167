"""Blueprints in the layouts AgentJet's own skills write, run by our runner on the REAL 0.0.1 launcher.

(1) the research-lead skill's bullet layout (`- description:` / `- path:` / `- command:` with an
    indented block / `- hint:`, a heading suffix, `Note:` prose): the run completes and the command
    file holds exactly the command field;
(2) the swarm skills' layout (`[exp_yaml_path]` NA, server and client as `- server:` / `- client:`
    bullets): the server is started, the client run, results collected, the server stopped.

Both were refused or misjudged by the parser before it read markdown tokens (the command file then
held `- command:` and `- hint:`); the swarm case uses the harness's swarm stand-ins
(ajet_conformance.swarm_*), since 0.0.1 ships no swarm server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conformance import harness
from tests.conformance.test_runner_console import (
    FULL_TIER,
    VALIDATION_ROW,
    Figure,
    figures,
    run_blueprint,
    runner_env,
    steps_of,
)
from tests.integration.test_api import free_port

pytestmark = [pytest.mark.conformance, pytest.mark.slow, FULL_TIER]


COMMAND_FIELD = """python -m ajet.launcher \\
    --conf {conf} \\
    --backbone verl"""


def bullet_blueprint(tmp_path: Path, codebase: Path, conf: Path, results: Path) -> Path:
    """The leader skill's template layout, in our own words."""
    command = "\n".join("    " + line for line in COMMAND_FIELD.format(conf=conf).splitlines())
    text = f"""# Blueprint 1

## [exp_purpose]
- description: What this experiment should find out.
- purpose: Conformance: a leader-skill bullet blueprint runs the real launcher to its end.

## [exp_codebase_dir]
- description: The AgentJet checkout the command runs in.
- dir: {codebase}

## [exp_venv_exe]
- description: The python of the environment that has AgentJet.
- path: {harness.venv_python()}

## [exp_yaml_path] (Only needed when using classic mode, not in swarm mode)
- description: The experiment's YAML.
- path: {conf}

Note: This yaml file must contain the `ajet` root key and keep its `hydra` and `defaults` lists.

## [exp_launch_command]
- description: How training starts.
- command:
{command}
- hint: Not 100% reliable; look at the tmux session when in doubt.
- note: It prints a validation row at every step.

## [exp_result_dir]
- description: Where everything about this run goes.
- dir: {results}

## [exp_max_time]
- description: How long it may take at most.
- time: 10 minutes
"""
    path = tmp_path / "bullets.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_leader_skill_bullet_blueprint_completes_and_runs_exactly_its_command_field(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    conf = codebase / "minimal.yaml"
    results = tmp_path / "results-bullets"
    path = bullet_blueprint(tmp_path, codebase, conf, results)
    run = run_blueprint(path, results, runner_env(make_env(), tmux_socket))
    flag = json.loads((results / "finish.flag").read_text()) if (results / "finish.flag").exists() else {}
    doc = json.loads((results / "results.json").read_text()) if (results / "results.json").exists() else {}
    lines = harness.console_lines((results / "logs" / "attempt-1.log").read_text(errors="replace")) \
        if (results / "logs" / "attempt-1.log").exists() else []
    figures(pytestconfig).rows.append(Figure("leader-skill bullet blueprint", flag.get("outcome", "refused"),
                                             len(doc.get("evaluations", [])), len(steps_of(VALIDATION_ROW, lines)),
                                             doc.get("train_steps", 0), run.seconds))
    assert flag.get("outcome") == "completed", run.proc.stdout[-2000:] + run.proc.stderr[-2000:]
    ran = (results / "logs" / "attempt-1.command.sh").read_text().splitlines()
    ran = [line for line in ran if not line.startswith("# ajet-runner:")]
    # The runner runs its patched YAML copy: the only change it may make to the command field.
    copy = f".ajet-runner/{flag['id']}/{conf.name}"
    assert ran == COMMAND_FIELD.format(conf=copy).splitlines()
    assert [e["step"] for e in doc["evaluations"]] == list(range(7))


def swarm_blueprint(tmp_path: Path, codebase: Path, results: Path, port: int) -> Path:
    text = f"""## [exp_purpose]
Conformance: a swarm experiment as the swarm skills write it (server and client in the launch command).

## [exp_codebase_dir]
{codebase}

## [exp_venv_exe]
{harness.venv_python()}

## [exp_yaml_path]
NA

## [exp_launch_command]
- server: `ajet-swarm start --swarm-port={port}`
- client: `AJET_SWARM_URL=http://localhost:{port} python -m tutorial.example_appworld_swarm.agent_roll`

## [exp_result_dir]
{results}

## [exp_max_time]
10 minutes
"""
    path = tmp_path / "swarm.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_skill_shaped_swarm_blueprint_starts_the_server_runs_the_client_and_stops_the_server(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    results = tmp_path / "results-swarm"
    path = swarm_blueprint(tmp_path, codebase, results, free_port())
    run = run_blueprint(path, results, runner_env(make_env(), tmux_socket))
    flag = json.loads((results / "finish.flag").read_text()) if (results / "finish.flag").exists() else {}
    doc = json.loads((results / "results.json").read_text()) if (results / "results.json").exists() else {}
    figures(pytestconfig).rows.append(Figure("skill-shaped swarm blueprint", flag.get("outcome", "refused"),
                                             len(doc.get("evaluations", [])), None, doc.get("train_steps", 0),
                                             run.seconds))
    assert flag.get("outcome") == "completed", run.proc.stdout[-2000:] + run.proc.stderr[-2000:]
    assert doc["swarm"]["spec"] and not doc["swarm"].get("reused")
    assert doc["evaluations"], "no evaluation collected from the client"
    history = " ".join(str(h) for h in doc["swarm"].get("history", []))
    assert re.search(r"start", history) and re.search(r"stop", history), history
