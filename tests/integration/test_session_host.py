"""The contract of issue 12: an experiment outlives its worker's whole PID namespace.

The tmux server runs under `ajet-runner session-host` (or a hand-made `tmux -S SOCKET
new-session -d`), outside the worker's process tree and PID namespace. The worker runs under
`unshare --pid --fork --kill-child --mount-proc`, so it sees none of the experiment's pids.
SIGKILL of `unshare` takes the whole namespace down mid-run; a new worker for the same node
and socket re-adopts, and the run completes with one launch and an unbroken log.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from ajet_runner.workers.executors.local.session_host import SessionHost
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.workers import worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    proc = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "true"],
                          capture_output=True, check=False)
    return proc.returncode == 0


needs_unshare = pytest.mark.skipif(not _unshare_works(), reason="unshare --pid --mount-proc is not permitted here")


@pytest.fixture()
def session_host(tmux_socket: str) -> Iterator[str]:
    """`ajet-runner session-host` on the test's private socket, as the systemd unit runs it."""
    proc = subprocess.Popen([*CLI, "session-host", "--socket", tmux_socket], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    host = SessionHost(tmux_socket)
    wait_for(host.identity, 15, "the session host's tmux server to answer")
    yield tmux_socket
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)


def start_namespaced_worker(env: dict[str, str], node: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
                             *CLI, "worker", "--node", node, "--gpus", "0"], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_namespace(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL `unshare`: --kill-child then SIGKILLs the namespace's init, and with it every process in it."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def steps_in(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"\[rollout\] step (\d+):", log)]


@needs_unshare
def test_a_run_outlives_its_workers_pid_namespace_and_is_readopted_once(tmp_path, redis_url, session_host):
    sc = make("demo", tmp_path)
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("step_seconds: 1.0", "step_seconds: 0.5"))
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, session_host)
    first = start_namespaced_worker(env, "n1")
    try:
        wait_for(lambda: store.nodes.all(), 30, "the first worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("latest_metrics"), 60, "a first evaluation")
    finally:
        kill_namespace(first)
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["state"] == "running"
    session = rec["tmux_session"]
    assert TmuxRunner(session_host).exists(session), "the run lives on in the session host's tmux"
    assert not (sc.results / "logs" / "attempt-1.rc").exists(), "the command must still be running"

    second = start_namespaced_worker(env, "n1")
    try:
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    finally:
        kill_namespace(second)
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "completed", rec.get("reason")
    events = store.events.read(exp_id)
    assert len([e for e in events if e.get("trigger") == "launched"]) == 1, "one launch, never a second copy"
    assert any(e["type"] == "adopted" for e in events)
    assert rec["attempt"] == "1" and not (sc.results / "logs" / "attempt-2.log").exists()
    assert sc.flag() == {**sc.flag(), "outcome": "completed", "id": exp_id}
    assert (sc.results / "logs" / "attempt-1.rc").read_text().strip() == "0"
    log = (sc.results / "logs" / "attempt-1.log").read_text()
    assert log.count("Final validation metrics") == 1
    steps = steps_in(log)
    assert steps and steps == list(range(steps[0], steps[0] + len(steps))), "every step once, in order"


def chart_layout(sock_dir: str) -> tuple[list[str], dict[str, str]]:
    """The session host's command line and the worker's tmux settings, as the Helm chart renders them,
    with the chart's socket hostPath mapped to `sock_dir`."""
    helm = pytest.importorskip("helm_python")
    from tests.unit.test_helm_chart import CHART_DIR, parse

    with helm.Chart.load(CHART_DIR) as chart:
        docs = parse(chart.render({}, name="rel", namespace="ml"))
    daemonsets = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d.get("kind") == "DaemonSet"}
    host = daemonsets["rel-ajet-runner-session-host"]["containers"][0]
    worker = daemonsets["rel-ajet-runner-worker"]["containers"][0]
    chart_dir = next(v["hostPath"]["path"] for v in daemonsets["rel-ajet-runner-worker"]["volumes"]
                     if v["name"] == "tmux")
    assert "hostPID" not in daemonsets["rel-ajet-runner-worker"]
    worker_env = {e["name"]: e["value"].replace(chart_dir, sock_dir) for e in worker["env"]
                  if e["name"] in ("AJET_RUNNER_TMUX_SOCKET", "AJET_RUNNER_SESSION_HOST")}
    return [a.replace(chart_dir, sock_dir) for a in host["args"]], worker_env


@needs_unshare
def test_the_charts_layout_keeps_a_run_through_a_worker_pod_restart(tmp_path, redis_url):
    """The same contract with the chart's own session-host command and worker settings."""
    sock_dir = tmp_path / "hostpath-tmux"
    host_args, tmux_env = chart_layout(str(sock_dir))
    assert tmux_env["AJET_RUNNER_SESSION_HOST"] == "remote"
    host = subprocess.Popen([*CLI, *host_args], start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        wait_for(SessionHost(tmux_env["AJET_RUNNER_TMUX_SOCKET"]).identity, 15, "the session host to answer")
        sc = make("demo", tmp_path)
        store = Store.from_url(redis_url)
        env = worker_env(redis_url, tmux_env["AJET_RUNNER_TMUX_SOCKET"],
                         AJET_RUNNER_SESSION_HOST=tmux_env["AJET_RUNNER_SESSION_HOST"])
        first = start_namespaced_worker(env, "n1")
        try:
            wait_for(lambda: store.nodes.all(), 30, "the first worker to register")
            exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
            wait_for(lambda: (store.records.raw(exp_id) or {}).get("latest_metrics"), 60, "a first evaluation")
        finally:
            kill_namespace(first)
        second = start_namespaced_worker(env, "n1")
        try:
            wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
        finally:
            kill_namespace(second)
        rec = store.records.raw(exp_id)
        assert rec is not None and rec["outcome"] == "completed"
        assert len([e for e in store.events.read(exp_id) if e.get("trigger") == "launched"]) == 1
        assert sc.flag()["outcome"] == "completed"
    finally:
        os.killpg(host.pid, signal.SIGTERM)
        host.wait(10)


@needs_unshare
def test_a_namespaced_worker_stops_a_run_hosted_by_a_hand_started_tmux(tmp_path, redis_url, tmux_socket):
    """`tmux -S SOCKET new-session -d` by hand is a session host too; a stop request reaches the
    job through it (the worker cannot signal a pid it cannot see)."""
    subprocess.run(["tmux", "-S", tmux_socket, "new-session", "-d", "-s", "keep"], check=True)
    sc = make("long_run", tmp_path)
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket)
    worker = start_namespaced_worker(env, "n1")
    try:
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 60, "the run to start")
        store.runs.request_cancel(exp_id)
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "the stopped run to finish")
    finally:
        kill_namespace(worker)
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "cancelled"
    rc = int((sc.results / "logs" / "attempt-1.rc").read_text())
    assert rc in (130, 2, 1), f"the job ended by our SIGINT, not by {rc}"
    assert sc.flag()["outcome"] == "cancelled"


def test_the_session_host_s_tmux_server_keeps_no_control_plane_key(tmux_socket: str) -> None:
    """A tmux server keeps the environment it started with (/proc/<pid>/environ, the global environment every
    new session gets) for its whole life, readable by every experiment it hosts (issue 37 item 1)."""
    password, token = "pw-session-host-4455aa", "tok-session-host-0099bb"
    env = {**os.environ, "REDIS_URL": f"redis://:{password}@10.0.0.5:6379/0", "AJET_RUNNER_TOKEN": token,
           "AJET_RUNNER_WEBHOOK_SECRET": "whsec-session-host-77", "COPY_OF_TOKEN": f"Bearer {token}",
           "KEEP_ME": "users-own"}
    proc = subprocess.Popen([*CLI, "session-host", "--socket", tmux_socket], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ident = wait_for(SessionHost(tmux_socket).identity, 15, "the session host's tmux server to answer")
        with open(f"/proc/{ident.pid}/environ", "rb") as fh:  # type: ignore[union-attr]
            server_env = fh.read().decode(errors="replace")
        shown = subprocess.run(["tmux", "-S", tmux_socket, "show-environment", "-g"], capture_output=True,
                               text=True, timeout=10, check=True).stdout
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    for text in (server_env, shown):
        assert "KEEP_ME" in text
        assert not any(s in text for s in (password, token, "whsec-session-host-77", "REDIS_URL", "AJET_RUNNER_"))
