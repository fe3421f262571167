"""Logs of the real `serve`, `worker` and `run` processes: a timestamp on every line (uvicorn's
access lines too), `--log-format json` one object per line with experiment/node/state, and no
`transitions` chatter at info."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.integration.scenario import CLI, env_for, make, run_cli, short_sim, wait_for
from tests.integration.test_api import TOKEN, auth, running_server

pytestmark = [pytest.mark.integration]

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 ")


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def test_serve_text_log_has_a_timestamp_on_every_line_including_access(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with running_server(redis_url, log, AJET_RUNNER_LOG_FORMAT="text") as server:
        assert httpx.get(f"{server.url}/v1/nodes", headers=auth(), timeout=5).status_code == 200
        wait_for(lambda: "GET /v1/nodes" in log.read_text(), 10, "the access line")
    lines = _lines(log)
    access = [line for line in lines if "GET /v1/nodes" in line]
    assert access and " uvicorn.access " in access[0]
    assert [line for line in lines if not STAMP.match(line)] == []
    assert TOKEN not in log.read_text()


def test_serve_json_log_is_one_object_per_line(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with running_server(redis_url, log, AJET_RUNNER_LOG_FORMAT="json", AJET_RUNNER_LOG_LEVEL="info") as server:
        assert httpx.get(f"{server.url}/v1/nodes", headers=auth(), timeout=5).status_code == 200
        wait_for(lambda: "GET /v1/nodes" in log.read_text(), 10, "the access line")
    docs = [json.loads(line) for line in _lines(log)]  # fails on any line that is not one JSON object
    assert all({"ts", "level", "logger", "msg", "component"} <= set(d) for d in docs)
    (access,) = [d for d in docs if d["logger"] == "uvicorn.access" and "GET /v1/nodes" in d["msg"]]
    assert (access["method"], access["path"], access["status"]) == ("GET", "/v1/nodes", 200)
    assert any(d["logger"] == "uvicorn.error" and "startup complete" in d["msg"] for d in docs)


@pytest.mark.parametrize(("args", "named"), [(["serve", "--log-level", "loud", "--insecure"], "log level 'loud'"),
                                            (["worker", "--log-format", "xml"], "log format 'xml'")])
def test_unknown_log_settings_are_refused_naming_them(redis_url: str, args: list[str], named: str) -> None:
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True,
                          timeout=60, check=False, env={**env_for(""), "REDIS_URL": redis_url})
    assert proc.returncode == 2 and named in proc.stderr


def test_worker_json_lines_carry_experiment_node_state_and_no_transitions_chatter(tmp_path: Path,
                                                                                  tmux_socket: str) -> None:
    sc = make("demo", tmp_path)
    short_sim(sc)  # the run's log lines are tested, not its pace
    proc = run_cli(sc, env_for(tmux_socket, AJET_RUNNER_LOG_FORMAT="json", AJET_RUNNER_LOG_LEVEL="info",
                               AJET_RUNNER_NODE="log-node"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp_id = re.search(r"Job submitted: (\S+)", proc.stdout).group(1)  # type: ignore[union-attr]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    docs = [json.loads(line) for line in lines]  # the worker's and its watcher's lines: every one JSON
    assert docs, "the worker logged nothing"
    assert all(STAMP.match(d["ts"] + " ") for d in docs)
    assert not [d for d in docs if d["logger"].startswith("transitions")]
    moves = [d for d in docs if d["logger"] == "ajet_runner.workers.drive.driver" and " -> " in d["msg"]]
    assert moves and all(d["experiment"] == exp_id and d["node"] == "log-node" for d in moves)
    assert moves[-1]["state"] == "finished"
    assert {d["component"] for d in docs} >= {"worker"} and any(d["component"] == "watcher" for d in docs)
