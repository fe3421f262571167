"""The research workflow's commands, as its skills write them, run unchanged on ajet-runner.

docs/research-workflow.md's migration `sed` block is run verbatim on the skills' real command
lines (quoted below from the public AgentJet / Alpha-Auto-Research skill and README files); the
commands it gives are then run with bash against a real `serve` and a real worker (the simulated
AgentJet as the experiment): `alpha-run-blueprint`, `alpha-scan-jobs`, `alpha-stop-jobs`, each with
`--runner`, print the workflow tools' lines on stdout and one note on stderr.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.scenario import make, wait_for
from tests.integration.test_api import free_port, running_server
from tests.integration.test_cli_client import cli_env
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC = REPO / "docs" / "research-workflow.md"
BIN = Path(sys.executable).parent  # where `pip install` put ajet-runner's console scripts

# The skills' command lines (ajet/copilot research-lead skills and the workflow's READMEs), verbatim.
SKILL_LINES = [
    "- Run `python -m alpha_auto_research.blueprint_runner.blueprint_runner --runner=${runner} "
    "--blueprint=${path_to_blue_print} --acknowledge-max-parallel-capacity=${MAX_PARALLEL_BLUEPRINTS}` "
    "to submit the blueprint to the GPU cluster",
    "- Run `python -m alpha_auto_research.blueprint_runner.blueprint_runner --runner=${runner} "
    "--blueprint=${path_to_blue_print}` to submit the blueprint to the GPU cluster",
    "- Run `python -m alpha_auto_research.blueprint_runner.scan_jobs --runner=${runner}` to check the current "
    "blueprint status (Queuing / Running / Succeeded)",
    "- Run `python -m alpha_auto_research.blueprint_runner.stop_jobs --runner=${runner} --stop-job-id=<job_id>` "
    "to stop a running job",
    "- Multiple jobs: `python -m alpha_auto_research.blueprint_runner.stop_jobs --runner=${runner} "
    "--stop-job-id=<id1> --stop-job-id=<id2>`",
    "- Run `python -m rl_auto_research.blueprint_runner.blueprint_runner --blueprint=${path_to_blue_print}` to "
    "submit the blueprint to the GPU cluster",
    "- Run `python -m rl_auto_research.blueprint_runner.scan_jobs` to check the current blueprint status",
    "- Run `python -m rl_auto_research.blueprint_runner.stop_jobs --stop-job-id=<job_id>` to stop a running job",
    "| `alpha-run-blueprint --blueprint=<path>` | Launch a single experiment blueprint |",
    "| `alpha-scan-jobs` | List running and recent jobs |",
    "| `alpha-stop-jobs --stop-job-id=<id>` | Stop a running job (`--delete` to remove) |",
]
EXPECTED = [
    "- Run `alpha-run-blueprint --runner=${runner} --blueprint=${path_to_blue_print} "
    "--acknowledge-max-parallel-capacity=${MAX_PARALLEL_BLUEPRINTS}` to submit the blueprint to the GPU cluster",
    "- Run `alpha-run-blueprint --runner=${runner} --blueprint=${path_to_blue_print}` to submit the blueprint to "
    "the GPU cluster",
    "- Run `alpha-scan-jobs --runner=${runner}` to check the current blueprint status (Queuing / Running / "
    "Succeeded)",
    "- Run `alpha-stop-jobs --runner=${runner} --stop-job-id=<job_id>` to stop a running job",
    "- Multiple jobs: `alpha-stop-jobs --runner=${runner} --stop-job-id=<id1> --stop-job-id=<id2>`",
    "- Run `alpha-run-blueprint --blueprint=${path_to_blue_print}` to submit the blueprint to the GPU cluster",
    "- Run `alpha-scan-jobs` to check the current blueprint status",
    "- Run `alpha-stop-jobs --stop-job-id=<job_id>` to stop a running job",
    *SKILL_LINES[8:],  # already the scripts' names: unchanged
]


def migration_block() -> str:
    """The shell block of docs/research-workflow.md that follows its `migration-sed` marker."""
    text = DOC.read_text(encoding="utf-8")
    after = text.split("<!-- migration-sed", 1)[1]
    match = re.search(r"```sh\n(.*?)```", after, re.S)
    assert match, "docs/research-workflow.md lost its migration block"
    return match.group(1)


def migrate(lines: list[str], tmp_path: Path) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "SKILL.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = subprocess.run(["bash", "-c", migration_block()], cwd=tmp_path, capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return (tmp_path / "SKILL.ajet-runner.md").read_text(encoding="utf-8").splitlines()


def test_the_documented_sed_turns_every_skill_command_into_the_installed_scripts(tmp_path) -> None:
    assert migrate(SKILL_LINES, tmp_path) == EXPECTED
    for name in ("alpha-run-blueprint", "alpha-scan-jobs", "alpha-stop-jobs"):
        assert (BIN / name).exists(), f"{name} is not installed next to {sys.executable} (pyproject scripts)"


def command_of(line: str) -> str:
    return re.search(r"`([^`]*)`", line).group(1)  # type: ignore[union-attr]


def shell(env: dict[str, str], command: str, **values: str) -> subprocess.CompletedProcess[str]:
    """A migrated skill command with its placeholders filled, run by bash as an agent would."""
    for key, value in values.items():
        command = command.replace(key, value)
    assert "${" not in command and "<" not in command, command
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def jobs(env: dict[str, str], command: str) -> dict[str, str]:
    out = shell(env, command, **{"${runner}": "ssh"})
    assert out.returncode == 0, out.stderr
    rows = [ast.literal_eval(line) for line in out.stdout.splitlines()]
    assert all(list(r) == ["job_id", "display_name", "status", "create_time"] for r in rows), rows
    return {r["job_id"]: r["status"] for r in rows}


def test_the_migrated_skill_commands_run_against_a_real_server(redis_url, tmux_socket, tmp_path) -> None:
    migrated = [command_of(line) for line in migrate(SKILL_LINES, tmp_path / "skill")]
    submit_ack, submit, scan, stop_one, stop_two, submit_old, scan_old, stop_old = migrated[:8]
    long_run = make("long_run", tmp_path / "long")
    demo = make("demo", tmp_path / "demo")
    third = make("demo", tmp_path / "third")
    with running_server(redis_url, tmp_path / "serve.log") as server, \
            running_worker(worker_env(redis_url, tmux_socket), "nodeR", "--gpus", "0", "--slots", "2"):
        env = {**cli_env(server.url), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "TZ": "UTC"}
        with server.client() as api:
            wait_for(api.nodes, 30, "the worker to register")

        out = shell(env, submit_ack, **{"${runner}": "ssh", "${path_to_blue_print}": str(long_run.blueprint),
                                        "${MAX_PARALLEL_BLUEPRINTS}": "4"})
        assert out.returncode == 0, out.stderr
        assert re.fullmatch(r"Job submitted: [0-9a-f]{12}\n", out.stdout), out.stdout
        assert out.stderr.splitlines() == [
            "note: --runner=ssh is ignored: ajet-runner places the job on its own workers",
            "note: --acknowledge-max-parallel-capacity=4 is ignored: the workers' GPU slots bound parallel runs"]
        long_id = out.stdout.split(": ")[1].strip()

        out = shell(env, submit, **{"${runner}": "pai", "${path_to_blue_print}": str(demo.blueprint)})
        assert out.returncode == 0 and out.stdout.startswith("Job submitted: "), out.stderr
        demo_id = out.stdout.split(": ")[1].strip()
        out = shell(env, submit_old, **{"${path_to_blue_print}": str(third.blueprint)})
        assert out.returncode == 0 and out.stderr == "", out.stderr  # no --runner: no note
        third_id = out.stdout.split(": ")[1].strip()

        wait_for(lambda: jobs(env, scan).get(long_id) == "Running", 60, "the long run to be Running")
        noted = shell(env, scan, **{"${runner}": "ssh"})
        assert noted.stderr == "note: --runner=ssh is ignored: ajet-runner lists the jobs of its own API " \
                               "(AJET_RUNNER_URL)\n"
        out = shell(env, stop_one, **{"${runner}": "ssh", "<job_id>": long_id})
        assert (out.returncode, out.stdout) == (0, f"Stopping job {long_id} ...\n"), out.stderr
        assert out.stderr == "note: --runner=ssh is ignored: ajet-runner stops jobs through its own API " \
                             "(AJET_RUNNER_URL)\n"
        wait_for(lambda: (long_run.results / "finish.flag").exists(), 60, "the stopped run's finish.flag")
        assert long_run.flag()["outcome"] == "cancelled" and jobs(env, scan)[long_id] == "Stopped"

        wait_for(lambda: (demo.results / "finish.flag").exists(), 120, "the demo's finish.flag")
        assert jobs(env, scan)[demo_id] == "Succeeded"
        assert jobs(env, scan_old)[demo_id] == "Succeeded"  # the older, flag-less spelling lists the same

        wait_for(lambda: (third.results / "finish.flag").exists(), 120, "the third run's finish.flag")
        out = shell(env, stop_two + " --delete", **{"${runner}": "ssh", "<id1>": demo_id, "<id2>": "nope"})
        assert out.returncode == 0
        assert out.stdout.splitlines() == [
            f"Stopping job {demo_id} ...", f"Deleted job {demo_id}",
            "Stopping job nope ...", "Failed to stop nope: no experiment with id 'nope' (never submitted, or deleted)"]
        out = shell(env, stop_old, **{"<job_id>": third_id})
        assert (out.returncode, out.stdout, out.stderr) == (0, f"Stopping job {third_id} ...\n", "")
        assert demo_id not in jobs(env, scan) and (demo.results / "finish.flag").exists()

        dead = {**env, "AJET_RUNNER_URL": f"http://127.0.0.1:{free_port()}"}
        out = shell(dead, stop_one, **{"${runner}": "ssh", "<job_id>": long_id})
        assert out.returncode == 0 and out.stdout.splitlines()[1].startswith(f"Failed to stop {long_id}: cannot reach")
