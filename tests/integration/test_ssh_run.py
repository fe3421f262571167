"""`ajet-runner run` drives the host a blueprint names (issue 35): the seed's own ssh example (login in the
notes, goto, run with venv) on a private sshd whose login environment differs from ours, so a run on this
machine cannot pass: the test's `.venv/bin/activate` refuses without the host's `AJET_TEST_HOST`.

Real embedded Redis, real sshd and tmux on the host, the simulated AgentJet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.scenario import CLI, Scenario, env_for, make, run_cli, wait_for
from tests.integration.sshd import ALIAS, HOST_VAR, SshHost
from tests.integration.sshd import sshd as sshd

pytestmark = [pytest.mark.integration, pytest.mark.slow]

YAML_REL = "tests/bench/benchmark_math/benchmark_math.yaml"
ACTIVATE = f"""# a stand-in venv: only the ssh host's login environment has {HOST_VAR[0]}
if [ "${{{HOST_VAR[0]}:-}}" != {HOST_VAR[1]} ]; then
    echo "activate: not on the ssh host ({HOST_VAR[0]} is not {HOST_VAR[1]})" >&2
    return 97 2>/dev/null || exit 97
fi
export PATH={Path(sys.executable).parent}:$PATH
"""


def seed_blueprint(sc: Scenario, login: str, *, yaml_rel: str = YAML_REL, max_time: str = "5 minutes") -> Path:
    """A blueprint with the seed's ssh example: its notes log in, go to the code and run with the venv."""
    venv = sc.codebase / ".venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "activate").write_text(ACTIVATE)
    (venv / "python").symlink_to(sys.executable)
    command = f"source .venv/bin/activate && python -m ajet.launcher --conf {yaml_rel} --autokill"
    sc.blueprint.write_text(f"""# Blueprint: the seed's ssh example

## [exp_purpose]
Train on the GPU box reached by ssh, as the monitoring skill's example does.

## [exp_codebase_dir]
{sc.codebase}

## [exp_venv_exe]
{venv / "python"}

## [exp_yaml_path]
{yaml_rel}

## [exp_launch_command]
```bash
{command}
```

## [exp_result_dir]
{sc.results}

## [exp_max_time]
{max_time}

## Notes
login
{login}
goto
{sc.codebase}
run with venv and monitor
{command}
""")
    return sc.blueprint


def ssh_env(tmux_socket: str, host: SshHost, tmp_path: Path, **more: str) -> dict[str, str]:
    env = env_for(tmux_socket, AJET_RUNNER_SSH_CONFIG=str(host.config),
                  AJET_RUNNER_SSH_CONTROL_DIR=str(host.control_dir), AJET_RUNNER_SSH_TMUX_SOCKET=host.tmux, **more)
    env.pop(HOST_VAR[0], None)
    return env


def on_host(host: SshHost, command: str) -> str:
    return subprocess.run(["ssh", "-F", str(host.config), "-o", "BatchMode=yes", ALIAS, command],
                          capture_output=True, text=True, timeout=30, check=False).stdout


def test_the_seed_ssh_example_runs_on_the_host_and_says_so(tmp_path: Path, tmux_socket: str, sshd: SshHost) -> None:
    sc = make("demo", tmp_path)
    seed_blueprint(sc, sshd.login)
    check = subprocess.run([*CLI, "check", str(sc.blueprint), "--json"], env=ssh_env(tmux_socket, sshd, tmp_path),
                           capture_output=True, text=True, timeout=60, check=False)
    doc = json.loads(check.stdout)
    assert doc["runs_on"] == {"executor": "ssh", "host": sshd.target,
                              "from": f"the login line `{sshd.login}`"}, check.stdout
    here = subprocess.run(["bash", "-c", "source .venv/bin/activate"], cwd=sc.codebase, capture_output=True,
                          text=True, env=ssh_env(tmux_socket, sshd, tmp_path), check=False)
    assert here.returncode == 97, here.stderr  # the launch command cannot pass on this machine
    logins = sshd.logins()
    proc = run_cli(sc, ssh_env(tmux_socket, sshd, tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flag = sc.flag()
    assert flag["outcome"] == "completed"
    data = sc.results_json()
    assert [e["step"] for e in data["evaluations"]][0] == 0 and len(data["evaluations"]) >= 3
    assert len(data["attempts"]) == 1
    assert sshd.target in data["attempts"][0]["environment"]
    report = (sc.results / "experiment_report.md").read_text()
    assert f"ssh host {sshd.target}" in report
    assert sshd.logins() > logins  # it really logged in
    assert "activate: not on the ssh host" not in (sc.results / "logs" / "attempt-1.log").read_text()
    assert on_host(sshd, f"grep -lzx AJET_RUNNER_EXPERIMENT={flag['id']} /proc/[0-9]*/environ").strip() == ""


def test_a_time_limit_leaves_no_process_on_the_host(tmp_path: Path, tmux_socket: str, sshd: SshHost) -> None:
    sc = make("long_run", tmp_path)
    seed_blueprint(sc, f"ssh {ALIAS}", yaml_rel="tests/bench/long_run/long_run.yaml", max_time="8 seconds")
    proc = run_cli(sc, ssh_env(tmux_socket, sshd, tmp_path), timeout=300)
    flag = sc.flag()
    assert flag["outcome"] == "timed_out", proc.stdout + proc.stderr
    assert on_host(sshd, f"grep -lzx AJET_RUNNER_EXPERIMENT={flag['id']} /proc/[0-9]*/environ").strip() == ""
    assert on_host(sshd, f"tmux -L {sshd.tmux} ls 2>/dev/null").strip() == ""


def test_an_unknown_host_alias_is_refused_at_submission_naming_it_and_runs_nothing(tmp_path: Path, tmux_socket: str,
                                                                                  sshd: SshHost) -> None:
    sc = make("demo", tmp_path)
    seed_blueprint(sc, "ssh no-such-gpu-box")
    logins = sshd.logins()
    proc = run_cli(sc, ssh_env(tmux_socket, sshd, tmp_path), timeout=300)
    assert proc.returncode != 0
    assert "blueprint rejected" in proc.stderr and "no-such-gpu-box" in proc.stderr, proc.stdout + proc.stderr
    assert str(sshd.config) in proc.stderr  # the ssh config read, named
    assert "Job submitted" not in proc.stdout  # refused before anything was queued
    flag = sc.flag()
    assert flag["outcome"] == "failed"
    report = (sc.results / "experiment_report.md").read_text()
    assert "ssh host 'no-such-gpu-box' is not a Host in the ssh config read" in report
    assert not (sc.results / "logs").exists()  # nothing launched, here or there
    assert sshd.logins() == logins


@pytest.mark.parametrize(("break_it", "ssh_says"), [
    ("key", "Permission denied"),
    ("host key", "Host key verification failed"),
])
def test_a_refused_key_or_host_key_fails_quoting_ssh(tmp_path: Path, tmux_socket: str, sshd: SshHost,
                                                     break_it: str, ssh_says: str) -> None:
    sc = make("demo", tmp_path)
    seed_blueprint(sc, sshd.login)
    if break_it == "key":
        (sshd.dir / "authorized_keys").write_text("")
    else:  # another host's key recorded for this one
        sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 "
                                    "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    proc = run_cli(sc, ssh_env(tmux_socket, sshd, tmp_path), timeout=300)
    assert proc.returncode != 0
    assert sc.flag()["outcome"] == "failed"
    assert ssh_says in (sc.results / "experiment_report.md").read_text()
    assert not (sc.results / "logs" / "attempt-1.pid").exists()


def test_killing_the_master_mid_run_is_only_a_reconnect(tmp_path: Path, tmux_socket: str, sshd: SshHost) -> None:
    sc = make("demo", tmp_path)
    seed_blueprint(sc, sshd.login)
    cli = subprocess.Popen([*CLI, "run", str(sc.blueprint)], env=ssh_env(tmux_socket, sshd, tmp_path),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = sc.results / "logs" / "attempt-1.log"
        wait_for(lambda: log.exists() and "Training Progress" in log.read_text(errors="replace"), 120,
                 "training to start on the host")
        # The master renames itself "ssh: <ControlPath> [mux]"; ours live in this test's control dir.
        found = subprocess.run(["pgrep", "-f", f"^ssh: {sshd.control_dir}/"], capture_output=True, text=True,
                               check=False).stdout.split()
        assert found, "no master connection"
        for pid in found:
            os.kill(int(pid), signal.SIGKILL)
        out, _ = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, out
    assert "re-established" in out, out
    assert out.count("(launched)") == 1, out
    assert sc.flag()["outcome"] == "completed"
    data = sc.results_json()
    assert len(data["attempts"]) == 1 and data["attempts"][0]["exit_code"] == 0
    assert len(data["evaluations"]) >= 3


def test_run_with_the_ssh_executor_and_no_host_fails_saying_what_to_add(tmp_path: Path, tmux_socket: str) -> None:
    sc = make("demo", tmp_path)
    proc = subprocess.run([*CLI, "run", "--executor", "ssh", str(sc.blueprint)], env=env_for(tmux_socket),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert sc.flag()["outcome"] == "failed"
    assert "add a login line (login: ssh HOST)" in proc.stdout
    assert not (sc.results / "logs" / "attempt-1.pid").exists()  # nothing ran here instead
