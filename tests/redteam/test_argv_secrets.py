"""Red team, fast: no runner process carries a secret on its command line.

`/proc/<pid>/cmdline` (what `ps` shows) is readable by every user of a node. The worker passed
REDIS_URL, password included, on the watcher's command line. Here every runner process is started for
real with a password in the Redis URL, an API token and an adviser key in the environment: the
supervisor (`worker`), its watcher, the API (`serve`), the API's cancel child (stopping a queued run),
the session host's tmux server, and the experiment's wrapper and launcher; a sampler reads every
process's command line meanwhile.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from ajet_runner.workers.executors.local.session_host import SessionHost
from tests.integration.scenario import CLI, clean_env, make, wait_for
from tests.integration.workers import kill_group
from tests.redteam.procs import CmdlineSampler, redis_with_password, serving
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]

TOKEN = "t-argv-secret-0123456789"
LLM_KEY = "llm-key-argv-do-not-show-42"


def test_no_runner_process_has_a_secret_in_its_command_line(tmp_path: Path, tmux_socket: str) -> None:
    with redis_with_password(tmp_path) as (url, password):
        env = clean_env(REDIS_URL=url, AJET_RUNNER_TOKEN=TOKEN, AJET_RUNNER_LLM_API_KEY=LLM_KEY,
                        AJET_RUNNER_TMUX_SOCKET=tmux_socket, AJET_RUNNER_POLL_INTERVAL="0.2",
                        AJET_RUNNER_LEASE_SECONDS="3")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with CmdlineSampler() as sampler:
            host = subprocess.Popen([*CLI, "session-host", "--socket", tmux_socket], env=env, start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            worker = None
            try:
                wait_for(SessionHost(tmux_socket).identity, 15, "the session host's tmux server")
                worker = subprocess.Popen([*CLI, "worker", "--node", "n1", "--gpus", "0", "--slots", "2"], env=env,
                                          start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with serving(env, tmp_path / "serve.log") as api:
                    wait_for(lambda: httpx.get(f"{api}/v1/nodes", headers=auth, timeout=5).json(), 30, "the worker")
                    run = make("demo", tmp_path / "run").blueprint.read_text()
                    exp = httpx.post(f"{api}/v1/experiments", json={"blueprint": run, "node": "n1"}, headers=auth,
                                     timeout=30).json()
                    waiting = make("demo", tmp_path / "queued").blueprint.read_text()
                    queued = httpx.post(f"{api}/v1/experiments", json={
                        "blueprint": waiting, "node": "nowhere", "wait_for_node": True}, headers=auth, timeout=30)
                    assert queued.status_code == 201, queued.text
                    stop = httpx.post(f"{api}/v1/experiments/{queued.json()['id']}/stop", headers=auth, timeout=150)
                    assert stop.status_code == 200 and stop.json()["outcome"] == "cancelled", stop.text

                    def finished() -> bool:
                        rec = httpx.get(f"{api}/v1/experiments/{exp['id']}", headers=auth, timeout=5).json()
                        return rec["state"] == "finished"

                    wait_for(finished, 120, "the run to finish")
            finally:
                if worker is not None:
                    kill_group(worker)
                kill_group(host)
    kinds = {
        "supervisor (ajet-runner worker)": " worker --node n1",
        "watcher": "ajet_runner.workers.node.watcher",
        "API (ajet-runner serve)": " serve --port",
        "cancel child": "ajet_runner.workers.drive.cancel_queued",
        "session host (tmux -D)": f"-D -S {tmux_socket}",
        "experiment wrapper": "attempt-1.sh",
        "experiment launcher": "ajet.launcher",
    }
    seen = {kind: sampler.matching(needle) for kind, needle in kinds.items()}
    missing = [kind for kind, lines in seen.items() if not lines]
    leaked = [line for line in sampler.lines() if any(s in line for s in (password, TOKEN, LLM_KEY))]
    record("secrets off argv", "password in REDIS_URL, API token, adviser key; /proc/<pid>/cmdline of every "
           f"process ({', '.join(k for k in kinds if k not in missing)})", len(sampler.lines()),
           f"{len(leaked)} command lines with a secret", passed=not leaked and not missing)
    assert missing == [], (missing, sampler.lines())
    assert leaked == []
