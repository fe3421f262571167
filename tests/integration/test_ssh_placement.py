"""Placement of experiments that name an ssh host (issue 35, item 5): `ajet-runner worker --executor ssh --host H`
serves them from the queue `host:H`; a host nobody serves waits queued with a `host` event saying so; the
node's executor is shown with the node. Real Redis, a real worker process, a private sshd, the seed's example."""

from __future__ import annotations

from pathlib import Path

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.sshd import ALIAS, SshHost
from tests.integration.sshd import sshd as sshd  # the fixture, used by name
from tests.integration.test_ssh_run import on_host, seed_blueprint
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_an_ssh_worker_serves_the_host_and_a_host_nobody_serves_waits_saying_so(
        tmp_path: Path, redis_url: str, tmux_socket: str, sshd: SshHost) -> None:
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_SSH_CONFIG=str(sshd.config),
                     AJET_RUNNER_SSH_CONTROL_DIR=str(sshd.control_dir), AJET_RUNNER_SSH_TMUX_SOCKET=sshd.tmux)
    env.pop("AJET_TEST_HOST", None)
    local_env = worker_env(redis_url, tmux_socket)
    with running_worker(local_env, "plain", "--gpus", "0"), \
            running_worker(env, "gate", "--gpus", "0", "--executor", "ssh", "--host", ALIAS):
        nodes = wait_for(lambda: len(store.nodes.all()) == 2 and store.nodes.all(), 60, "both workers to register")
        assert {n["name"]: n.get("executor") for n in nodes} == {"plain": "local", "gate": "ssh"}
        assert {n["name"]: n.get("hosts") for n in nodes}["gate"] == [ALIAS]

        unserved = make("demo", tmp_path / "u")
        seed_blueprint(unserved, "ssh nobody-serves-this-box")
        lonely = submit(store, unserved.blueprint.read_text())
        assert lonely["queue"] == "host:nobody-serves-this-box"
        events = store.events.read(lonely["id"])
        said = [e for e in events if e.get("type") == "host" and e.get("state") == "unserved"]
        assert said and "ajet-runner worker --executor ssh --host nobody-serves-this-box" in said[0]["message"]

        sc = make("demo", tmp_path / "s")
        seed_blueprint(sc, f"ssh {ALIAS}")
        exp_id = submit(store, sc.blueprint.read_text())["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 240, "the run to finish")
        rec = store.records.raw(exp_id) or {}
        assert rec["outcome"] == "completed", rec.get("reason")
        assert rec["node"] == "gate"  # the ssh worker drove it, the plain one never took it
        data = sc.results_json()
        assert len(data["attempts"]) == 1 and ALIAS in data["attempts"][0]["environment"]
        assert len(data["evaluations"]) >= 3
        assert (store.records.raw(lonely["id"]) or {}).get("state") == "queued"  # still waiting, not run anywhere
    assert on_host(sshd, f"grep -lzx AJET_RUNNER_EXPERIMENT={exp_id} /proc/[0-9]*/environ").strip() == ""


def test_a_restarted_ssh_worker_adopts_the_run_on_the_host_without_relaunching(
        tmp_path: Path, redis_url: str, tmux_socket: str, sshd: SshHost) -> None:
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_SSH_CONFIG=str(sshd.config),
                     AJET_RUNNER_SSH_CONTROL_DIR=str(sshd.control_dir), AJET_RUNNER_SSH_TMUX_SOCKET=sshd.tmux)
    env.pop("AJET_TEST_HOST", None)
    sc = make("demo", tmp_path / "s")
    seed_blueprint(sc, f"ssh {ALIAS}")
    args = ("--gpus", "0", "--executor", "ssh", "--host", ALIAS)
    with running_worker(env, "gate", *args):
        wait_for(store.nodes.all, 60, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text())["id"]
        log = sc.results / "logs" / "attempt-1.log"
        wait_for(lambda: log.exists() and "Training Progress" in log.read_text(errors="replace"), 120,
                 "training to start on the host")
    # The worker and its watcher are killed; the run goes on in tmux on the host.
    assert on_host(sshd, f"grep -lzx AJET_RUNNER_EXPERIMENT={exp_id} /proc/[0-9]*/environ").strip()
    with running_worker(env, "gate", *args):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 240, "the run to finish")
    rec = store.records.raw(exp_id) or {}
    assert rec["outcome"] == "completed", rec.get("reason")
    moves = [e.get("trigger") for e in store.events.read(exp_id) if e.get("type") == "transition"]
    assert moves.count("launched") == 1, moves  # adopted, never launched twice
    assert any(e.get("type") == "adopted" for e in store.events.read(exp_id))
    data = sc.results_json()
    assert len(data["attempts"]) == 1 and data["attempts"][0]["exit_code"] == 0
