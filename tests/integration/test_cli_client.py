"""The CLI's client commands as a user runs them: console script processes against a real `serve`
and a real worker (submit, scan, status, logs, events, stop, watch, and the research drop-ins)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess

import pytest

from ajet_runner.statemachine.logs.text import clean_lines
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.test_api import TOKEN, free_port, running_server
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def cli_env(url: str, token: str = TOKEN) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_") and k != "REDIS_URL"}
    return {**env, "AJET_RUNNER_URL": url, "AJET_RUNNER_TOKEN": token, "COLUMNS": "200"}


def run(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def background(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def jobs(env: dict[str, str]) -> dict[str, str]:
    out = run(env, "scan-jobs")
    assert out.returncode == 0, out.stderr
    rows = [ast.literal_eval(line) for line in out.stdout.splitlines()]
    return {row["job_id"]: row["status"] for row in rows}


def test_research_workflow_through_a_real_server(redis_url, tmux_socket, tmp_path) -> None:
    demo = make("demo", tmp_path / "demo")
    queued = [make("demo", tmp_path / f"q{i}") for i in (1, 2)]
    broken = tmp_path / "broken.md"
    broken.write_text("## [exp_purpose]\nno paths at all\n")
    with running_server(redis_url, tmp_path / "serve.log") as server, \
            running_worker(worker_env(redis_url, tmux_socket), "nodeW", "--gpus", "0"):
        env = cli_env(server.url)
        with server.client() as api:
            wait_for(api.nodes, 30, "the worker to register")

        # A rejected blueprint is reported with its problems; the others are still submitted; exit 1.
        out = run(env, "submit", f"--blueprint={demo.blueprint}", str(broken))
        assert out.returncode == 1, out.stderr
        ids = re.findall(r"^Job submitted: (\S+)$", out.stdout, re.M)
        assert len(ids) == 1
        exp = ids[0]
        assert f"Rejected: {broken}" in out.stderr and "exp_codebase_dir" in out.stderr

        # Two more for a node that does not exist: they stay queued until stopped.
        out = run(env, "submit", *(str(q.blueprint) for q in queued), "--node", "nowhere", "--wait-for-node", "--json")
        assert out.returncode == 0, out.stderr
        q1, q2 = (json.loads(line)["id"] for line in out.stdout.splitlines())
        status = jobs(env)
        # The demo takes ~20 s; on a loaded machine the CLI calls before this one can take as long.
        assert status[q1] == status[q2] == "Queuing" and status[exp] in ("Queuing", "Running", "Succeeded")

        follow_logs = background(env, "logs", exp, "-f", "--tail", "1000")
        follow_events = background(env, "events", exp, "-f")

        out = run(env, "stop-jobs", f"--stop-job-id={q1}", f"--stop-job-id={q2}")
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [f"Stopping job {q1} ...", f"Stopping job {q2} ..."]
        status = jobs(env)
        assert status[q1] == status[q2] == "Stopped"
        for q in queued:
            assert json.loads((q.results / "finish.flag").read_text())["outcome"] == "cancelled"
        out = run(env, "stop-jobs", f"--stop-job-id={q1}", "--delete")
        assert out.returncode == 0 and out.stdout.splitlines() == [f"Stopping job {q1} ...", f"Deleted job {q1}"]
        assert q1 not in jobs(env) and (queued[0].results / "finish.flag").exists()

        watch = run(env, "watch", exp, timeout=120)
        assert watch.returncode == 0, watch.stdout + watch.stderr
        assert "completed" in watch.stdout and "evaluation at step 10" in watch.stdout

        logs_out, logs_err = follow_logs.communicate(timeout=30)
        events_out, _ = follow_events.communicate(timeout=30)
        assert follow_logs.returncode == 0, logs_err
        log_file = demo.results / "logs" / "attempt-1.log"
        assert logs_out.splitlines() == clean_lines(log_file.read_text().splitlines())  # all of it, nothing twice
        assert logs_out.count("Final validation metrics") == 1
        assert follow_events.returncode == 0 and "collecting → finished" in events_out.splitlines()[-1]

        assert jobs(env)[exp] == "Succeeded"
        table = run(env, "scan")
        row = next(line for line in table.stdout.splitlines() if exp in line)
        assert "completed" in row and "nodeW" in row and re.search(r"0\.\d{4}", row), row
        rec = json.loads(run(env, "status", exp, "--json").stdout)
        assert rec["outcome"] == "completed" and rec["node"] == "nodeW"
        text = run(env, "status", exp).stdout
        assert re.search(r"^outcome\s+completed$", text, re.M) and "collecting → finished" in text
        assert "Training finished" in run(env, "logs", exp, "--tail", "5").stdout
        assert "queued → launching" in run(env, "events", exp).stdout
        again = run(env, "stop", exp)
        assert again.returncode == 0 and f"Already finished: {exp}" in again.stdout
        assert json.loads((demo.results / "finish.flag").read_text())["outcome"] == "completed"


def test_cli_errors_are_one_clear_line(redis_url, tmp_path) -> None:
    dead = cli_env(f"http://127.0.0.1:{free_port()}")
    out = run(dead, "scan")
    assert out.returncode == 3 and "cannot reach the ajet-runner API" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    with running_server(redis_url, tmp_path / "serve.log") as server:
        wrong = run(cli_env(server.url, "not-the-token"), "scan")
        assert wrong.returncode == 2 and "refused the token" in wrong.stderr
        env = cli_env(server.url)
        missing = run(env, "status", "nope")
        assert missing.returncode == 1 and "no experiment with id 'nope'" in missing.stderr
        stop = run(env, "stop", "nope")
        assert stop.returncode == 1 and "nope" in stop.stderr
        assert run(env, "submit").returncode == 2
        unreadable = run(env, "submit", str(tmp_path / "absent.md"))
        assert unreadable.returncode == 2 and "cannot read blueprint" in unreadable.stderr
        by_flag = run({**env, "AJET_RUNNER_TOKEN": ""}, "scan-jobs", "--token", TOKEN)
        assert by_flag.returncode == 0 and by_flag.stdout == ""
