"""Blueprints as the real skills write them, through the real `ajet-runner run` and `check` (embedded Redis,
real tmux, the simulated AgentJet): the research-lead bullet layout with a `- hint:` after the command
(issue 24: that hint once ran as a command, exit 127, and turned a finished run into `failed`), a swarm
blueprint with server and client in one command part, and a command refused alike by `check` and `run`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from ajet_runner.service.demo import materialize
from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.statemachine.shell.command_file import command_script
from tests.integration.scenario import CLI, Scenario, env_for, marked_processes, run_cli
from tests.integration.swarm_helpers import free_port, listening

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LEADER = """# Experiment Blueprint - gsm8k on the simulator, leader layout

## [exp_purpose]
- description: What this run is for
- purpose: Check that a leader-skill blueprint runs exactly its command field.
  The hint after the command must stay a note.

## [exp_codebase_dir]
- description: Absolute path of the code the run uses
- dir: {{CODEBASE}}
- hint: change into this directory before the launch command

## [exp_venv_exe]
- description: Absolute path of the python interpreter
- path: {{PYTHON}}

## [exp_yaml_path] (only for classic mode, or swarm mode driven by a YAML)
- description: Absolute path of the AgentJet configuration
- path: {{CODEBASE}}/tests/bench/benchmark_math/benchmark_math.yaml

Note: the YAML must set these keys:
- ajet.trainer_common.test_freq: 2

## [exp_launch_command]
- description: Command that starts training
- command:
    cd {{CODEBASE}} && \\
    {{PYTHON}} -m ajet.launcher \\
      --conf tests/bench/benchmark_math/benchmark_math.yaml --backbone verl
- hint: Not 100% reliable.
- note: adapt CUDA_VISIBLE_DEVICES to the node

## [exp_result_dir]
- description: Absolute path where results are written
- path: {{RESULT_DIR}}

## [exp_max_time]
- description: Longest the run may take, the ${MaxTime}
- time: 5 minutes

## Other Notes
- The simulated trainer finishes by itself in about 15 seconds.
"""

SWARM_TMUX = """# Experiment Blueprint - swarm on the simulator, server in its own tmux session

## [exp_purpose]
- description: Goal of the run
- purpose: A swarm run written the way the skills write it: server and client in one command part.

## [exp_codebase_dir]
- description: Absolute code path
- dir: {{CODEBASE}}

## [exp_venv_exe]
- description: Absolute venv python
- path: {{PYTHON}}

## [exp_yaml_path] (classic mode, or swarm mode with a YAML)
- description: Absolute YAML path
- path: NA

## [exp_launch_command]
- description: Starts the swarm server in its own tmux session, waits, then runs the client
- command:
    ```bash
    tmux new-session -d -s ajet_srv -c {{CODEBASE}} "PATH=$PWD/bin:$PATH ajet-swarm start --swarm-port={{SWARM_PORT}}"
    sleep 30
    cd {{CODEBASE}} && SWARM_STEPS=6 SWARM_STEP_SECONDS=0.5 {{PYTHON}} -m tutorial.example_swarm.agent_roll
    ```
- hint: the server session keeps running after the client ends

## [exp_result_dir]
- description: Absolute result path
- path: {{RESULT_DIR}}

## [exp_max_time]
- description: Time budget
- time: 5 minutes
"""

SWARM_BACKGROUND = """# Experiment Blueprint - swarm on the simulator, server in the background

## [exp_purpose]
- purpose: A swarm run with the server started in the background by the command part.

## [exp_codebase_dir]
- dir: {{CODEBASE}}

## [exp_venv_exe]
- path: {{PYTHON}}

## [exp_yaml_path]
- path: N/A

## [exp_launch_command]
- description: Server in the background, then the client in the foreground
- command:
    cd {{CODEBASE}}
    export PATH={{CODEBASE}}/bin:$PATH SWARM_STEP_SECONDS=0.5
    ajet-swarm start --swarm-port={{SWARM_PORT}} &
    sleep 45
    SWARM_STEPS=6 {{PYTHON}} -m tutorial.example_swarm.agent_roll
- note: the background server outlives the client

## [exp_result_dir]
- path: {{RESULT_DIR}}

## [exp_max_time]
- time: 5 minutes
"""


def _scenario(tmp_path: Path, name: str, template: str, port: int = 10086) -> Scenario:
    source = tmp_path / f"{name}.template.md"
    source.write_text(template, encoding="utf-8")
    workdir = tmp_path / name
    return Scenario(workdir, materialize(source, workdir, swarm_port=port))


def _check(sc: Scenario, env: dict[str, str]) -> tuple[int, dict]:
    proc = subprocess.run([*CLI, "check", str(sc.blueprint), "--json"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_leader_bullet_blueprint_with_a_hint_after_the_command_completes(tmp_path: Path, tmux_socket: str) -> None:
    sc = _scenario(tmp_path, "leader", LEADER)
    bp = parse_blueprint(sc.blueprint.read_text(encoding="utf-8"))
    command = (f"cd {sc.codebase} && \\\n{bp.exp_venv_exe} -m ajet.launcher \\\n"
               "  --conf tests/bench/benchmark_math/benchmark_math.yaml --backbone verl")
    assert bp.exp_launch_command == command  # exactly the command field, continuations and all
    assert "(under [exp_launch_command]) hint: Not 100% reliable." in bp.notes
    env = env_for(tmux_socket)
    code, doc = _check(sc, env)
    assert code == 0, doc["problems"]
    assert doc["command_file"] == command_script(command)  # what check shows is what runs
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flag = sc.flag()
    assert flag["outcome"] == "completed", flag
    data = sc.results_json()
    assert len(data["attempts"]) == 1 and data["evaluations"] and data["evaluations"][0]["step"] == 0
    assert (sc.results / "logs" / "attempt-1.command.sh").read_text() == command_script(command)
    log = (sc.results / "logs" / "attempt-1.log").read_text()
    assert "command not found" not in log and "Not 100%" not in log
    assert marked_processes(flag["id"]) == []


@pytest.mark.parametrize("form", ["tmux", "background"])
def test_skill_shaped_swarm_blueprint_runs_the_server_then_the_client(tmp_path: Path, tmux_socket: str,
                                                                      form: str) -> None:
    """The server part is taken out of the command and supervised as `[exp_swarm_server]`: started (not in the
    author's tmux session, not in the background of the client), awaited (no `sleep`), stopped at the end."""
    port = free_port()
    sc = _scenario(tmp_path, form, SWARM_TMUX if form == "tmux" else SWARM_BACKGROUND, port)
    bp = parse_blueprint(sc.blueprint.read_text(encoding="utf-8"))
    assert bp.exp_swarm_form == form and bp.exp_swarm_declared and "ajet-swarm start" in bp.exp_swarm_server
    assert "sleep" not in bp.exp_launch_command and "ajet-swarm" not in bp.exp_launch_command
    env = env_for(tmux_socket)
    code, doc = _check(sc, env)
    assert code == 0, doc["problems"]
    assert doc["swarm"] == {"server_command": bp.exp_swarm_server, "port": port}
    assert doc["command_file"] == command_script(bp.exp_launch_command)
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 1, data.get("attempts")
    assert [e["step"] for e in data["evaluations"]] == [0, 2, 4, 6]
    logs = sc.results / "logs"
    server_log = (logs / "server-1.log").read_text()
    assert f"Starting swarm server on port {port}" in server_log and "Swarm server stopped." in server_log
    assert (logs / "attempt-1.command.sh").read_text() == command_script(bp.exp_launch_command)
    assert "not reachable" not in (logs / "attempt-1.log").read_text()
    assert not psutil.pid_exists(int((logs / "server-1.pid").read_text().strip()))
    assert not listening(port)
    sessions = subprocess.run(["tmux", "-S", tmux_socket, "list-sessions", "-F", "#{session_name}"],
                              capture_output=True, text=True, check=False).stdout
    assert "ajet_srv" not in sessions  # the author's tmux wrapper was not run
    assert marked_processes(sc.flag()["id"]) == []


def test_a_command_with_a_bullet_inside_is_refused_alike_by_check_and_run(tmp_path: Path, tmux_socket: str) -> None:
    text = LEADER.replace("      --conf tests/bench/benchmark_math/benchmark_math.yaml --backbone verl\n",
                          "      --conf tests/bench/benchmark_math/benchmark_math.yaml --backbone verl\n"
                          "    - retry: drop --backbone when it fails\n")
    sc = _scenario(tmp_path, "refused", text)
    env = env_for(tmux_socket)
    code, doc = _check(sc, env)
    quoted = "'- retry: drop --backbone when it fails'"
    assert code == 1 and doc["command_file"] is None
    (problem,) = [p for p in doc["problems"] if p["level"] == "error"]
    assert problem["field"] == "exp_launch_command" and quoted in problem["message"]
    proc = run_cli(sc, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and quoted in out, out
    assert sc.flag()["outcome"] in ("rejected", "failed")
    logs = sc.results / "logs"
    assert not (logs.exists() and list(logs.glob("attempt-*")))  # nothing ran
