"""Redis Sentinel with real servers (a master, a replica and 3 sentinels on free loopback ports, stopped by pid):
the clients follow a failover, the API answers 503 only while no master is known, bad settings stop a
command at start naming the setting, and a batch of short runs survives the master's SIGKILL with every
run finished once, one finish.flag each, nothing launched twice."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.store.clients import _scripts
from ajet_runner.store.connection import (
    NoMasterKnown,
    RedisSettingsError,
    RedisTarget,
    check_reachable,
    connect,
    master_address,
    store_at,
    target_from,
)
from ajet_runner.store.keys import published_key
from ajet_runner.store.per_experiment.event_reader import EventReader
from ajet_runner.store.redis_server import free_port
from ajet_runner.store.settings import Settings
from tests.conftest import CLI, run_cli
from tests.integration.failover import run_failover
from tests.integration.scenario import wait_for
from tests.integration.up_process import running_up
from tests.load import scaled
from tests.sentinel_cluster import MASTER_NAME, SentinelCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def cluster() -> Iterator[SentinelCluster]:
    with SentinelCluster(password="s3cret-pw") as c:
        yield c


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_REDIS") and k != "REDIS_URL"}
    return {**env, **extra}


# -- settings and start-up checks ---------------------------------------------------------------------
def test_mixed_incomplete_and_malformed_settings_name_the_setting() -> None:
    cases = {
        "REDIS_URL and AJET_RUNNER_REDIS_SENTINELS": Settings(redis_url="redis://h:1/0", redis_sentinels="h:2",
                                                              redis_master="m"),
        "AJET_RUNNER_REDIS_MASTER is not": Settings(redis_sentinels="h:26379"),
        "AJET_RUNNER_REDIS_SENTINELS is not": Settings(redis_master="m"),
        "'h' is not host:port": Settings(redis_sentinels="h", redis_master="m"),
        "names a sentinel twice": Settings(redis_sentinels="h:1,h:1", redis_master="m"),
        "AJET_RUNNER_REDIS_PASSWORD is set but no Redis": Settings(redis_password="x"),
    }
    for needle, settings in cases.items():
        with pytest.raises(RedisSettingsError, match=needle):
            target_from(settings)
    target = target_from(Settings(redis_sentinels=" a:1, [::1]:2 ", redis_master="m", redis_password="pw"))
    assert target is not None and target.sentinels == (("a", 1), ("::1", 2)) and target.master == "m"
    assert "pw" not in repr(target) and "pw" not in target.describe()
    assert target_from(Settings()) is None
    # The password setting also serves a URL that holds none (never both).
    plain = target_from(Settings(redis_url="redis://h:1/0", redis_password="p w/x"))
    assert plain is not None and plain.url == "redis://:p%20w%2Fx@h:1/0" and "p w" not in plain.describe()
    with pytest.raises(RedisSettingsError, match="holds credentials too"):
        target_from(Settings(redis_url="redis://:a@h:1/0", redis_password="b"))


def test_unreachable_member_and_wrong_master_are_refused_at_start(cluster: SentinelCluster, tmp_path: Path) -> None:
    check_reachable(cluster.target)  # the set-up as it is: fine
    dead = free_port()
    with_dead = RedisTarget(sentinels=(*cluster.target.sentinels, ("127.0.0.1", dead)), master=MASTER_NAME,
                            password=cluster.password)
    with pytest.raises(RedisSettingsError, match=rf"AJET_RUNNER_REDIS_SENTINELS: sentinel 127.0.0.1:{dead} is "
                                                 "unreachable"):
        check_reachable(with_dead)
    wrong = RedisTarget(sentinels=cluster.target.sentinels, master="nope", password=cluster.password)
    with pytest.raises(RedisSettingsError, match=rf"AJET_RUNNER_REDIS_MASTER='nope'.*it monitors: {MASTER_NAME}"):
        check_reachable(wrong)

    # The commands refuse at start (exit 2, the setting named), never falling back to another Redis.
    members = ",".join(f"{h}:{p}" for h, p in cluster.target.sentinels)
    base = {"AJET_RUNNER_REDIS_SENTINELS": members, "AJET_RUNNER_REDIS_PASSWORD": cluster.password,
            "AJET_RUNNER_TOKEN": "t"}
    serve = run_cli("serve", "--port", str(free_port()), env=_env(**base, AJET_RUNNER_REDIS_MASTER="nope"))
    assert serve.returncode == 2 and "AJET_RUNNER_REDIS_MASTER='nope'" in serve.stderr, serve.stderr
    worker = run_cli("worker", "--node", "n", "--gpus", "0",
                     env=_env(**{**base, "AJET_RUNNER_REDIS_SENTINELS": f"{members},127.0.0.1:{dead}"},
                              AJET_RUNNER_REDIS_MASTER=MASTER_NAME))
    assert worker.returncode == 2 and f"sentinel 127.0.0.1:{dead} is unreachable" in worker.stderr, worker.stderr
    (tmp_path / "bp.md").write_text("# a blueprint\n")
    mixed = run_cli("run", str(tmp_path / "bp.md"), env=_env(**base, AJET_RUNNER_REDIS_MASTER=MASTER_NAME,
                                                       REDIS_URL="redis://127.0.0.1:1/0"))
    assert mixed.returncode == 2 and "REDIS_URL and AJET_RUNNER_REDIS_SENTINELS" in mixed.stderr, mixed.stderr
    assert "embedded Redis" not in mixed.stdout


# -- clients through a failover ----------------------------------------------------------------------
def test_clients_follow_the_new_master_without_an_error(cluster: SentinelCluster) -> None:
    """A command sent while the master is dead waits (bounded backoff) and lands on the new master; the same
    client object then keeps working, also once the old master is back as a replica (READONLY is a reconnect)."""
    store = store_at(cluster.target, socket_timeout=2, socket_connect_timeout=1)
    store.r.set("k", "before")
    first = master_address(store.r)
    old_port = cluster.master_port()
    assert first is not None and first[1] == old_port
    old = cluster.kill_master()
    t0 = time.monotonic()
    assert store.r.incr("n") == 1  # blocked through the switch, then served by the new master
    waited = time.monotonic() - t0
    cluster.wait_switch(old_port or 0)
    assert master_address(store.r) not in (None, first)
    assert store.r.get("k") == b"before"  # replicated before the kill
    # The promoted replica had no script cache; the client loaded the store's scripts when it connected,
    # so a pipelined EVALSHA (which redis-py does not reload) works at once.
    shas = [sha for sha, _ in _scripts()]
    assert len(shas) > 20 and all(store.r.script_exists(*shas))
    # Under Sentinel a plain event is published at most once too (a writer of its own): a retry of a command
    # the old master ran cannot add it twice.
    assert store.events.publish("e1", {"type": "info", "message": "x"}) and store.r.hlen(published_key("e1")) == 1
    cluster.restart(old)
    cluster.wait_replica(old)
    for _ in range(20):
        store.r.incr("n")
    assert int(store.r.get("n") or 0) == 21 and waited > 0.5
    store.close()


def test_clients_follow_a_master_that_hangs_instead_of_dying(cluster: SentinelCluster) -> None:
    """A frozen master (SIGSTOP: its connections stay open, as behind a partition without resets) is replaced
    by the sentinels; a command that timed out on it is retried on the new master (a reconnect asks the
    sentinels again), and so is the API's SSE reader (its read timeout is bounded). redis-py alone retried
    on the frozen address until its retries ran out (55 s measured), and the reader had no timeout at all."""
    store = store_at(cluster.target, socket_timeout=2, socket_connect_timeout=1)
    store.r.set("k", "before")
    old_port = cluster.master_port() or 0
    frozen = cluster.member_on(old_port)
    assert frozen.process is not None

    async def follow() -> tuple[object, float]:
        reader = EventReader(cluster.target, read_timeout=4)
        try:
            await reader.exists("k")  # connected to the master before it froze
            os.kill(frozen.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            t0 = time.monotonic()
            got = await asyncio.wait_for(reader.xread({"s": "$"}, count=1, block=2000), 45)
            return got, time.monotonic() - t0
        finally:
            await reader.aclose()

    try:
        got, reader_seconds = asyncio.run(follow())
        assert got in (None, [], {}) and reader_seconds < 30, reader_seconds
        t0 = time.monotonic()
        assert store.r.get("k") == b"before"  # the sync client's idle connection was to the frozen master
        assert time.monotonic() - t0 < 20
        assert master_address(store.r) not in (None, ("127.0.0.1", old_port))
    finally:
        os.kill(frozen.process.pid, signal.SIGCONT)
    store.close()


def test_retries_are_bounded_and_the_api_answers_503_only_while_no_master_is_known(
        cluster: SentinelCluster, tmp_path: Path) -> None:
    target = RedisTarget(sentinels=cluster.target.sentinels, master=MASTER_NAME, password=cluster.password,
                         retry_seconds=1.0)
    client = connect(target, socket_timeout=1, socket_connect_timeout=0.5)
    client.ping()
    settings = Settings(redis_sentinels=",".join(f"{h}:{p}" for h, p in target.sentinels), redis_master=MASTER_NAME,
                        redis_password=cluster.password, redis_retry_seconds=1.0, token="tok",
                        allowed_roots=str(tmp_path))
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as api:
        hdr = {"Authorization": "Bearer tok"}
        assert api.get("/v1/experiments", headers=hdr).status_code == 200
        # Every server of the set gone: no sentinel can name a master (they still answer).
        for server in cluster.servers:
            server.kill()
        cluster.wait_master_down()
        t0 = time.monotonic()
        with pytest.raises(NoMasterKnown):
            client.get("x")
        assert time.monotonic() - t0 < 15  # bounded: about retry_seconds, plus the sentinels' own timeouts
        resp = api.get("/v1/experiments", headers=hdr)
        assert resp.status_code == 503 and resp.headers["content-type"] == "application/json"
        assert resp.headers["retry-after"] == "2"
        assert resp.json() == {"detail": "no Redis master is known (a Sentinel failover is under way, or the "
                                         "sentinels are away): try again shortly", "problems": []}
        for server in cluster.servers:  # back: the sentinels name a master again, the API serves again
            server.start(cluster.workdir)
        deadline = time.monotonic() + scaled(60)
        while api.get("/v1/experiments", headers=hdr).status_code != 200:
            assert time.monotonic() < deadline, "the API did not answer again"
            time.sleep(0.2)
    client.close()


# -- the done-when scenario -----------------------------------------------------------------------------
def test_a_batch_of_runs_survives_a_master_sigkill(tmux_socket: str, tmp_path: Path) -> None:
    figures = run_failover(tmp_path, tmux_socket, n=8, slots=3, restart_old=True, timeout=300)
    print("\n".join(figures.lines()))
    assert figures.passed, "\n".join([*figures.lines(), *figures.problems])
    assert figures.workers_kept  # the same worker processes served through it
    assert figures.webhook_doubles == 0, figures.problems  # the outbox notified each run once through the switch
    assert figures.api_back_seconds <= 10.0, figures.lines()
    assert figures.api_other_errors == 0, figures.problems


def test_a_batch_of_runs_survives_writes_lost_in_the_failover(tmux_socket: str, tmp_path: Path) -> None:
    """The master acknowledges 1.5 s of writes no replica gets (replicas stopped and cut off), then dies: the
    promoted replica lacks them (claims, transitions, finishes, job pops). Still every run finishes once."""
    figures = run_failover(tmp_path, tmux_socket, n=12, slots=3, restart_old=True, timeout=300,
                           lose_writes_seconds=1.5)
    print("\n".join(figures.lines()))
    assert figures.passed, "\n".join([*figures.lines(), *figures.problems])
    assert figures.workers_kept and figures.switch_seen == 2
    assert figures.api_back_seconds <= 10.0 and figures.api_other_errors == 0, figures.problems


def test_the_cli_run_uses_the_sentinels(cluster: SentinelCluster, tmux_socket: str, tmp_path: Path) -> None:
    """`ajet-runner run` with the sentinel settings: its worker and its store use them (no embedded Redis)."""
    from tests.integration.failover import short_runs

    sc = short_runs(tmp_path, 1)[0]
    env = _env(**cluster.env(), AJET_RUNNER_TMUX_SOCKET=tmux_socket, AJET_RUNNER_POLL_INTERVAL="0.2")
    done = subprocess.run([*__import__("tests.conftest", fromlist=["CLI"]).CLI, "run", str(sc.blueprint)], env=env,
                          capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "embedded Redis" not in done.stdout and sc.flag()["outcome"] == "completed"
    store = store_at(cluster.target)
    assert store.records.raw(sc.flag()["id"])["state"] == "finished"
    store.close()


def test_up_uses_the_sentinels_and_refuses_a_wrong_master(cluster: SentinelCluster, tmp_path: Path) -> None:
    """`ajet-runner up` with the sentinel settings: no embedded Redis, the demo's record lands on the master the
    sentinels name and its local worker (given the same settings) runs it; a wrong master name stops `up` at
    start naming the setting, with nothing started (no fallback to an embedded Redis)."""
    env = _env(**cluster.env(), AJET_RUNNER_POLL_INTERVAL="0.2")
    env = {k: v for k, v in env.items() if not k.startswith("AJET_RUNNER_") or k.startswith("AJET_RUNNER_REDIS")
           or k == "AJET_RUNNER_POLL_INTERVAL"}
    wrong = subprocess.run([*CLI, "up", "--dir", str(tmp_path / "wrong"), "--port", str(free_port())],
                           env={**env, "AJET_RUNNER_REDIS_MASTER": "nope"}, cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, check=False)
    assert wrong.returncode == 2 and "AJET_RUNNER_REDIS_MASTER='nope'" in wrong.stderr, wrong.stderr
    assert "console:" not in wrong.stdout

    store = store_at(cluster.target)
    try:
        with running_up(tmp_path / "up", env) as up:
            # The demo is submitted once the worker has joined (its line comes then, after the addresses).
            line = up.wait_line("demo:", 120, "the demo to be submitted once the worker joined")
            demo_id = re.search(r"demo:     experiment (\w+)", line).group(1)  # type: ignore[union-attr]
            assert store.records.raw(demo_id) is not None  # the record is on the master the sentinels name
            wait_for(lambda: httpx.get(f"{up.base}/v1/experiments/{demo_id}",
                                       headers={"Authorization": f"Bearer {up.token()}"}).json()["state"]
                     in ("running", "finished"), 90, "the demo to run")
            assert (store.records.raw(demo_id) or {}).get("state") in ("running", "finished")
    finally:
        subprocess.run(["tmux", "-S", str(tmp_path / "up" / "tmux.sock"), "kill-server"], capture_output=True,
                       check=False)
    proc = up.proc
    assert proc.returncode == 0, "".join(up.errors)
    assert (store.records.raw(demo_id) or {}).get("state") == "finished"  # stopped with its report, or completed
    store.close()
