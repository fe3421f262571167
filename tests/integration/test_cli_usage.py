"""The CLI's promises on usage and input, as a user meets them: exit 2 for a bad option value, an unknown node
or unreadable input (each naming the problem, on stderr), `drain --json` printing only JSON, `nodes` printing
times as times, `-` reading stdin, and piped output never wrapped."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import run_cli
from tests.integration.scenario import wait_for
from tests.integration.test_api import running_server
from tests.integration.test_cli_client import cli_env, run
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration]

LONG_LINE = "x" * 300


def test_bad_values_and_unreadable_input_exit_2_on_stderr(tmp_path) -> None:
    bogus = run_cli("scan", "--state", "bogus")
    assert bogus.returncode == 2 and "'bogus'" in bogus.stderr and "running" in bogus.stderr and not bogus.stdout
    assert run_cli("scan", "--outcome", "won").returncode == 2
    missing = run_cli("catalogue", "check", str(tmp_path / "absent.yaml"))
    assert missing.returncode == 2 and "absent.yaml" in missing.stderr
    unreadable = run_cli("check", str(tmp_path / "absent.md"))
    assert unreadable.returncode == 2 and "absent.md" in unreadable.stderr and not unreadable.stdout
    ran = run_cli("run", str(tmp_path / "absent.md"))
    assert ran.returncode == 2 and "cannot read blueprint" in ran.stderr and not ran.stdout
    token_file = tmp_path / "no-such-token"
    env = {**cli_env("http://127.0.0.1:9"), "AJET_RUNNER_TOKEN": "", "AJET_RUNNER_TOKEN_FILE": str(token_file)}
    for command in (("scan",), ("status", "x"), ("stop", "x")):
        out = run(env, *command)
        assert out.returncode == 2 and str(token_file) in out.stderr, (command, out.stderr)
    drop_in = run(env, "stop-jobs", "--stop-job-id", "x")  # the workflow's format: a line per id, exit 0
    assert drop_in.returncode == 0 and f"Failed to stop x: AJET_RUNNER_TOKEN_FILE={token_file}" in drop_in.stdout
    token_file.write_text("# no token here\n")
    empty = run(env, "scan")
    assert empty.returncode == 2 and "holds no token" in empty.stderr


def test_dash_reads_stdin_for_results_and_diagnose() -> None:
    lines = "".join(f"{{'global_steps': {s}, 'mean_reward': {r}}}\n" for s, r in ((0, 0.25), (10, 0.5)))
    res = run_cli("results", "-", "--json", input=lines)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [e["step"] for e in doc["evaluations"]] == [0, 10] and doc["files"] == ["-"]
    log = f"starting\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB {LONG_LINE}\n"
    diag = run_cli("diagnose", "-", "--json", input=log)
    assert diag.returncode == 0, diag.stderr
    assert json.loads(diag.stdout)["cause"] == "cuda_oom"
    text = run_cli("diagnose", "-", input=log)
    assert any(LONG_LINE in line for line in text.stdout.splitlines()), "a piped line was wrapped"


def test_drain_json_unknown_node_and_nodes_times(redis_url, tmux_socket, tmp_path) -> None:
    env = worker_env(redis_url, tmux_socket)
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as api, \
            running_worker(env, "nodeD", "--gpus", "0"):
        wait_for(lambda: any(n["name"] == "nodeD" for n in api.nodes()), 30, "the worker to register")
        typo = run(env, "drain", "--node", "nodeDD")
        assert typo.returncode == 2 and "'nodeDD'" in typo.stderr and "nodeD" in typo.stderr
        assert not any(n.get("draining") for n in api.nodes()), "a drain was recorded for a typo"

        drained = run(env, "drain", "--node", "nodeD", "--json", "--reason", "disk check", "--by", "ops")
        assert drained.returncode == 0, drained.stderr
        assert json.loads(drained.stdout) == {"node": "nodeD", "draining": True, "by": "ops", "reason": "disk check",
                                              "sticky": False}  # only JSON: json.loads of the whole output
        undone = run(env, "drain", "--node", "nodeD", "--undo", "--json")
        assert json.loads(undone.stdout) == {"node": "nodeD", "draining": False}

        nodes = run(cli_env(server.url), "nodes")
        assert nodes.returncode == 0, nodes.stderr
        header, row = nodes.stdout.splitlines()[0].split("\t"), nodes.stdout.splitlines()[1].split("\t")
        shown = dict(zip(header, row, strict=True))
        today = time.strftime("%Y-%m-%d")
        assert shown["started_at"].startswith(today) and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
                                                                       shown["last_seen"])
        assert re.fullmatch(r"\d+s", shown["heartbeat_age"]), shown
        assert "e+09" not in nodes.stdout
