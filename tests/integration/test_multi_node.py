"""Multi-node experiments end to end: two worker "hosts" on this machine (each its own UTS namespace, so
its own hostname, and its own tmux socket), 8 GPUs each, behind a real `serve`.

A 2-node x 8-GPU blueprint runs as one gang: the non-head rank starts first, the head once it runs,
both with the same MASTER_ADDR (the head's hostname) and MASTER_PORT; one report and one finish.flag;
every GPU released on both nodes and no process left. A single 8-GPU experiment submitted meanwhile
never shares a GPU with it. A non-head command killed mid-run is a diagnosed failure and the whole
gang is relaunched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.client.api_client import AjetRunnerClient
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, Scenario, make, marked_processes, wait_for
from tests.integration.test_api import running_server
from tests.integration.workers import kill_group, worker_env
from tests.load import scaled

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOSTS = {"nodeA": "ajet-host-a", "nodeB": "ajet-host-b"}  # node name -> its hostname
SPARE = {"nodeC": "ajet-host-c"}  # a third host, for the test where a member node disappears


def _can_unshare() -> bool:
    if not shutil.which("unshare") or not shutil.which("hostname"):
        return False
    return subprocess.run(["unshare", "--uts", "hostname", "x"], capture_output=True, check=False).returncode == 0


class Hosts:
    """Worker "hosts": each worker in a UTS namespace with its own hostname and tmux socket."""

    def __init__(self, redis_url: str, tmp_path: Path) -> None:
        self.redis_url = redis_url
        self.tmp_path = tmp_path
        self.sockets = {node: str(tmp_path / f"tmux-{node}.sock") for node in {**HOSTS, **SPARE}}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, node: str, **extra: str) -> None:
        env = worker_env(self.redis_url, self.sockets[node], **{
            "AJET_SIM_GPUS": "8", "AJET_RUNNER_CAPACITY_WAIT_SECONDS": "1",
            "AJET_RUNNER_GANG_MEMBER_GRACE_SECONDS": "20", **extra})
        worker = " ".join([*CLI, "worker", "--node", node, "--gpus", "8"])
        with open(self.tmp_path / f"worker-{node}.log", "ab") as log:
            self.procs[node] = subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", f"hostname {({**HOSTS, **SPARE})[node]} && exec {worker}"], env=env,
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)

    def kill(self, node: str) -> None:
        """SIGKILL the node's worker and its watcher; tmux and the commands in it live on."""
        kill_group(self.procs.pop(node))

    def close(self) -> None:
        for node in list(self.procs):
            self.kill(node)
        for sock in self.sockets.values():
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)


@pytest.fixture()
def hosts(redis_url: str, tmp_path: Path) -> Iterator[Hosts]:
    if not _can_unshare():
        pytest.skip("needs `unshare --uts` (root) to give each worker host its own hostname")
    h = Hosts(redis_url, tmp_path)
    try:
        for node in HOSTS:
            h.start(node)
        yield h
    finally:
        h.close()


@pytest.fixture()
def client(redis_url: str, tmp_path: Path) -> Iterator[AjetRunnerClient]:
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as c:
        yield c


def demo(tmp_path: Path, name: str, *, nnodes: int, steps: int = 10, step_seconds: float = 0.5) -> Scenario:
    sc = make("demo", tmp_path / name)
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    text = yaml_path.read_text()
    text = text.replace("nnodes: 1", f"nnodes: {nnodes}").replace("total_training_steps: 10",
                                                                 f"total_training_steps: {steps}")
    text = text.replace("step_seconds: 1.0", f"step_seconds: {step_seconds}")
    yaml_path.write_text(text)
    return sc


def state(client: AjetRunnerClient, exp_id: str) -> str:
    return str(client.get(exp_id)["state"])


def assignments(script: Path) -> dict[str, str]:
    """The variables a wrapper script exports (`export NAME=value`, shell-quoted or not)."""
    out = {}
    for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES", "CUDA_VISIBLE_DEVICES"):
        m = re.search(rf"\b{name}=('?)([^'\s]*)\1", script.read_text())
        if m:
            out[name] = m.group(2)
    return out


def no_process_left(exp_id: str) -> bool:
    return not marked_processes(exp_id) and not marked_processes(f"{exp_id}.rank1")


def test_a_two_node_run_completes_as_one_gang_and_never_shares_gpus(hosts, client, redis_url, tmp_path) -> None:
    store = Store.from_url(redis_url)
    wait_for(lambda: {n["name"] for n in client.nodes() if n["alive"]} == set(HOSTS), 30, "both hosts")
    gang_sc = demo(tmp_path, "gang", nnodes=2)
    single_sc = demo(tmp_path, "single", nnodes=1)
    gang = client.submit_file(gang_sc.blueprint)["id"]
    single = client.submit_file(single_sc.blueprint)["id"]

    # Until both are done: no GPU is ever held by two experiments, and while the gang runs on both nodes
    # the single one waits (or it ran before). Each node's GPU hash maps index -> one owner by construction;
    # what must never happen is the single run starting while the gang holds both nodes.
    overlap, waited = [], set()
    deadline = time.monotonic() + scaled(180)
    while not all(state(client, i) == "finished" for i in (gang, single)):
        assert time.monotonic() < deadline, "the two experiments did not finish"
        owners = {n: set(store.slots.gpu_owners(n).values()) for n in HOSTS}
        if all(gang in o for o in owners.values()) and any(single in o for o in owners.values()):
            overlap.append(owners)
        states = {i: state(client, i) for i in (gang, single)}
        if "running" in states.values() and "queued" in states.values():
            waited.add(next(i for i, s in states.items() if s == "queued"))
        time.sleep(0.2)
    assert not overlap, overlap
    assert waited, "the two never competed: one should have waited for the other's GPUs"

    rec = client.get(gang)
    assert rec["outcome"] == "completed", rec["reason"]
    assert client.get(single)["outcome"] == "completed"
    head = rec["node"]
    member = next(n for n in HOSTS if n != head)
    logs = gang_sc.results / "logs"
    # Exactly one launch per rank, non-head first, each in its own session and log.
    assert sorted(p.name for p in logs.glob("attempt-*.log")) == ["attempt-1-rank0.log", "attempt-1-rank1.log"]
    events = store.events.read(gang)
    assert len([e for e in events if e.get("trigger") == "launched"]) == 1
    env0, env1 = assignments(logs / "attempt-1-rank0.sh"), assignments(logs / "attempt-1-rank1.sh")
    assert env0["MASTER_ADDR"] == env1["MASTER_ADDR"] == HOSTS[head]  # the head's hostname
    assert env0["MASTER_PORT"] == env1["MASTER_PORT"] and int(env0["MASTER_PORT"]) > 0
    assert (env0["NODE_RANK"], env1["NODE_RANK"], env0["NNODES"], env1["NNODES"]) == ("0", "1", "2", "2")
    assert env0["CUDA_VISIBLE_DEVICES"] == env1["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    rank1_log = (logs / "attempt-1-rank1.log").read_text()
    assert "block forever" in rank1_log and "Training Progress" not in rank1_log
    assert "Training Progress: 100%" in (logs / "attempt-1-rank0.log").read_text()
    rank0_started = (logs / "attempt-1-rank0.sh").stat().st_mtime
    rank1_started = (logs / "attempt-1-rank1.sh").stat().st_mtime
    assert rank1_started <= rank0_started  # the non-head rank was started first

    # One report and one finish.flag, from the head, listing every node, rank, session and log.
    flag = gang_sc.flag()
    assert flag["id"] == gang and flag["outcome"] == "completed"
    data = gang_sc.results_json()
    nodes = {m["rank"]: m for m in data["nodes"]}
    assert nodes[0]["node"] == head and nodes[1]["node"] == member
    assert nodes[0]["session"].endswith("_r0") and nodes[1]["session"].endswith("_r1")
    assert nodes[1]["log"].endswith("logs/attempt-1-rank1.log") and nodes[1]["state"] == "stopped"
    report = (gang_sc.results / "experiment_report.md").read_text()
    assert "## Nodes" in report and member in report and "attempt-1-rank1.log" in report
    assert [c for c in data["preflight_changes"] if "--with-ray-cluster" in str(c.get("new"))]
    log = client.log(gang, tail=3)  # the API shows the head's log
    assert log.source == "file" and log.path.endswith("logs/attempt-1-rank0.log")
    shown = subprocess.run([*CLI, "results", str(gang_sc.results), "--json"], capture_output=True, text=True,
                           check=False)
    assert shown.returncode == 0 and json.loads(shown.stdout)["evaluations"], shown.stderr

    # GPUs released on both nodes; no process of either rank left; the non-head's session is closed (the
    # head's pane lingers a while for inspection, as a single-node run's does).
    wait_for(lambda: all(store.slots.gpu_owners(n) == {} for n in HOSTS), 15, "every GPU to be released")
    wait_for(lambda: no_process_left(gang), 15, "no process of the gang left")
    listed = subprocess.run(["tmux", "-S", hosts.sockets[member], "ls"], capture_output=True, text=True,
                            check=False).stdout
    assert nodes[1]["session"] not in listed, listed


def test_a_non_head_killed_mid_run_is_diagnosed_and_the_gang_relaunched(hosts, client, redis_url, tmp_path) -> None:
    store = Store.from_url(redis_url)
    wait_for(lambda: {n["name"] for n in client.nodes() if n["alive"]} == set(HOSTS), 30, "both hosts")
    sc = demo(tmp_path, "gang", nnodes=2, steps=16)
    gang = client.submit_file(sc.blueprint, node="nodeB")["id"]  # a named node: the head
    logs = sc.results / "logs"
    wait_for(lambda: state(client, gang) == "running", 60, "the gang to run")
    wait_for(lambda: "Training Progress" in (logs / "attempt-1-rank0.log").read_text(), 60, "a training step")
    pid = int((logs / "attempt-1-rank1.pid").read_text())
    os.kill(pid, signal.SIGKILL)  # the non-head node's command dies mid-run

    wait_for(lambda: state(client, gang) == "finished", 120, "the relaunched gang to finish")
    rec = client.get(gang)
    assert rec["outcome"] == "completed", rec["reason"]
    events = store.events.read(gang)
    lost = [e for e in events if e.get("trigger") == "anomaly"]
    assert len(lost) == 1 and lost[0].get("signature") == "gang_member_lost" and "rank 1" in lost[0]["reason"]
    assert [e.get("trigger") for e in events if e.get("type") == "transition"].count("launched") == 2
    assert sorted(p.name for p in logs.glob("attempt-*.log")) == [
        "attempt-1-rank0.log", "attempt-1-rank1.log", "attempt-2-rank0.log", "attempt-2-rank1.log"]
    data = sc.results_json()
    assert [r["signature"] for r in data["repairs"]] == ["gang_member_lost"]
    assert data["repairs"][0]["result"] == "relaunched"
    assert rec["node"] == "nodeB" and assignments(logs / "attempt-2-rank1.sh")["MASTER_ADDR"] == HOSTS["nodeB"]
    assert sc.flag()["outcome"] == "completed"
    wait_for(lambda: all(store.slots.gpu_owners(n) == {} for n in HOSTS), 15, "every GPU to be released")
    wait_for(lambda: no_process_left(gang), 15, "no process of the gang left")


def test_restarted_workers_re_adopt_their_ranks_and_cancel_stops_every_node(hosts, client, redis_url,
                                                                                  tmp_path) -> None:
    from ajet_runner.store.cluster.gangs import GangStore

    store = Store.from_url(redis_url)
    gangs = GangStore(store.r)
    wait_for(lambda: {n["name"] for n in client.nodes() if n["alive"]} == set(HOSTS), 30, "both hosts")
    sc = demo(tmp_path, "gang", nnodes=2, steps=200)
    gang = client.submit_file(sc.blueprint, node="nodeA")["id"]
    logs = sc.results / "logs"
    wait_for(lambda: state(client, gang) == "running", 60, "the gang to run")
    wait_for(lambda: "Training Progress" in (logs / "attempt-1-rank0.log").read_text(), 60, "a training step")
    before = gangs.get(gang)
    assert before is not None and before.rank_state(1)["state"] == "running"
    rank1_pid = int((logs / "attempt-1-rank1.pid").read_text())

    hosts.kill("nodeB")  # the member's worker dies; its rank's command runs on in tmux
    hosts.start("nodeB")
    wait_for(lambda: (g := gangs.get(gang)) is not None and g.rank_owner(1) not in ("", before.rank_owner(1))
             and g.rank_lease(1) > store.server_time(), 60, "a new rank job to re-adopt rank 1")
    assert os.path.exists(f"/proc/{rank1_pid}")  # the same command: re-adopted, not relaunched
    assert state(client, gang) == "running" and not (logs / "attempt-2-rank1.log").exists()
    assert not [e for e in store.events.read(gang) if e.get("trigger") == "anomaly"]

    head_owner = str(store.records.raw(gang)["owner"])  # type: ignore[index]
    hosts.kill("nodeA")  # now the head's worker: its driver is re-adopted like any run's
    hosts.start("nodeA")
    wait_for(lambda: str((store.records.raw(gang) or {}).get("owner")) not in ("", head_owner), 60,
             "a new head driver to re-adopt the run")
    wait_for(lambda: [e for e in store.events.read(gang) if e.get("type") == "adopted"], 10, "the adoption event")
    assert state(client, gang) == "running" and os.path.exists(f"/proc/{rank1_pid}")
    assert not [e for e in store.events.read(gang) if e.get("trigger") == "anomaly"]

    client.stop(gang)
    wait_for(lambda: state(client, gang) == "finished", 60, "the cancelled gang to be collected")
    assert client.get(gang)["outcome"] == "cancelled" and sc.flag()["outcome"] == "cancelled"
    assert gangs.get(gang).rank_state(1)["state"] == "stopped"  # type: ignore[union-attr]
    wait_for(lambda: all(store.slots.gpu_owners(n) == {} for n in HOSTS), 15, "every GPU to be released")
    wait_for(lambda: no_process_left(gang), 15, "no process of the gang left")
    assert sorted(p.name for p in logs.glob("attempt-*.log")) == ["attempt-1-rank0.log", "attempt-1-rank1.log"]


def test_a_stopped_member_worker_hands_its_rank_back_and_the_next_one_adopts_it_at_once(
        hosts, client, redis_url, tmp_path) -> None:
    """SIGTERM (a restart, an upgrade) on a member node: its rank job ends its lease at once, so the next
    worker's rank job takes the rank without waiting out a 60 s lease; the command itself runs on."""
    from ajet_runner.store.cluster.gangs import GangStore

    store = Store.from_url(redis_url)
    gangs = GangStore(store.r)
    hosts.kill("nodeB")
    hosts.start("nodeB", AJET_RUNNER_LEASE_SECONDS="60")  # far longer than the test waits
    wait_for(lambda: {n["name"] for n in client.nodes() if n["alive"]} == set(HOSTS), 30, "both hosts")
    sc = demo(tmp_path, "gang", nnodes=2, steps=200)
    gang = client.submit_file(sc.blueprint, node="nodeA")["id"]
    logs = sc.results / "logs"
    wait_for(lambda: (g := gangs.get(gang)) is not None and g.rank_state(1).get("state") == "running", 60,
             "rank 1 to run")
    rank1_pid = int((logs / "attempt-1-rank1.pid").read_text())
    first_owner = gangs.get(gang).rank_owner(1)  # type: ignore[union-attr]
    # The head runs too: it must not call the handed-back rank gone while the next worker starts.
    wait_for(lambda: state(client, gang) == "running", 60, "the head to run")

    kill_group(hosts.procs.pop("nodeB"), signal.SIGTERM)
    after = gangs.get(gang)
    # The lease ended at the hand-back (not 0: the head's member grace counts from then, whenever it started).
    assert after is not None and after.rank_owner(1) == first_owner
    assert store.server_time() - 30 < after.rank_lease(1) <= store.server_time()
    assert os.path.exists(f"/proc/{rank1_pid}")
    t0 = time.monotonic()
    hosts.start("nodeB", AJET_RUNNER_LEASE_SECONDS="60")
    wait_for(lambda: (g := gangs.get(gang)) is not None and g.rank_owner(1) not in ("", first_owner)
             and g.rank_lease(1) > store.server_time(), 40, "a new rank job to take rank 1")
    assert time.monotonic() - t0 < 40  # the 60 s lease was not waited for
    assert os.path.exists(f"/proc/{rank1_pid}") and not (logs / "attempt-2-rank1.log").exists()
    wait_for(lambda: state(client, gang) == "running", 60, "the gang to run (the head starts once every rank runs)")

    client.stop(gang)
    wait_for(lambda: state(client, gang) == "finished", 60, "the cancelled gang to be collected")
    wait_for(lambda: no_process_left(gang), 15, "no process of the gang left")


def test_the_heads_gpu_count_failure_relaunches_the_whole_gang(hosts, client, redis_url, tmp_path) -> None:
    store = Store.from_url(redis_url)
    wait_for(lambda: {n["name"] for n in client.nodes() if n["alive"]} == set(HOSTS), 30, "both hosts")
    sc = demo(tmp_path, "gang", nnodes=2, steps=4)
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    yaml_path.write_text(yaml_path.read_text().replace(
        "  seed: 7\n", "  seed: 7\n  fail:\n    - signature: gpu_count_mismatch\n      when: first_attempt\n"))
    gang = client.submit_file(sc.blueprint)["id"]
    wait_for(lambda: state(client, gang) == "finished", 120, "the gang to finish")
    rec = client.get(gang)
    assert rec["outcome"] == "completed", rec["reason"]
    logs = sc.results / "logs"
    assert "Total available GPUs" in (logs / "attempt-1-rank0.log").read_text()
    assert sorted(p.name for p in logs.glob("attempt-*.log")) == [
        "attempt-1-rank0.log", "attempt-1-rank1.log", "attempt-2-rank0.log", "attempt-2-rank1.log"]
    data = sc.results_json()
    assert [(r["signature"], r["result"]) for r in data["repairs"]] == [("gpu_count_mismatch", "relaunched")]
    for n in (1, 2):  # each attempt's ranks share one MASTER_PORT
        ports = {assignments(logs / f"attempt-{n}-rank{r}.sh")["MASTER_PORT"] for r in (0, 1)}
        assert len(ports) == 1, ports
    wait_for(lambda: all(store.slots.gpu_owners(n) == {} for n in HOSTS), 15, "every GPU to be released")
    wait_for(lambda: no_process_left(gang), 15, "no process of the gang left")


def test_a_member_node_that_disappears_is_replaced_on_the_relaunch(hosts, client, redis_url, tmp_path) -> None:
    from ajet_runner.store.cluster.gangs import GangStore

    store = Store.from_url(redis_url)
    # The head's worker gives the lost member 6 s (not the fixture's 20 s) before the gang moves on.
    hosts.kill("nodeA")
    hosts.start("nodeA", AJET_RUNNER_GANG_MEMBER_GRACE_SECONDS="6")
    hosts.start("nodeC")
    live = set(HOSTS) | set(SPARE)
    wait_for(lambda: {n["name"] for n in client.nodes() if n["alive"]} == live, 30, "three hosts")
    sc = demo(tmp_path, "gang", nnodes=2, steps=50)  # 25 s: well past the member lease (3 s) and grace (6 s)
    gang = client.submit_file(sc.blueprint, nodes=["nodeA", "nodeB", "nodeC"])["id"]
    logs = sc.results / "logs"
    wait_for(lambda: state(client, gang) == "running", 60, "the gang to run")
    assert GangStore(store.r).get(gang).nodes == ["nodeA", "nodeB"]  # type: ignore[union-attr]
    wait_for(lambda: "Training Progress" in (logs / "attempt-1-rank0.log").read_text(), 60, "a training step")
    hosts.kill("nodeB")  # the member node is gone for good: no heartbeat, no rank job (its command is out of reach)

    wait_for(lambda: state(client, gang) == "finished", 180, "the gang to finish on the other nodes")
    rec = client.get(gang)
    assert rec["outcome"] == "completed", rec["reason"]
    events = store.events.read(gang)
    lost = [e for e in events if e.get("trigger") == "anomaly"]
    assert len(lost) == 1 and lost[0]["signature"] == "gang_member_lost" and "lease ran out" in lost[0]["reason"]
    assert [e for e in events if e.get("type") == "gang" and "nodeB gone" in e.get("message", "")]
    nodes = {m["rank"]: m["node"] for m in sc.results_json()["nodes"]}
    assert nodes == {0: "nodeA", 1: "nodeC"}
    assert assignments(logs / "attempt-2-rank1.sh")["MASTER_ADDR"] == HOSTS["nodeA"]
    # Every node's GPUs free: nodeB's were freed when its rank moved, the others' when the run ended.
    wait_for(lambda: all(store.slots.gpu_owners(n) == {} for n in live), 15, "GPUs released")

    # nodeB comes back: its supervisor sweeps what is left there of the rank that moved away.
    gangs = GangStore(store.r)
    assert gangs.ranks_here("nodeB") == [(gang, 1)]
    hosts.start("nodeB")
    wait_for(lambda: gangs.ranks_here("nodeB") == [], 60, "nodeB to sweep the rank it no longer has")
    listed = subprocess.run(["tmux", "-S", hosts.sockets["nodeB"], "ls"], capture_output=True, text=True,
                            check=False).stdout
    assert "_r1" not in listed, listed
    assert gangs.ranks_here("nodeA") == [] and gangs.ranks_here("nodeC") == []  # forgotten when stopped
    wait_for(lambda: no_process_left(gang), 15, "no process of the gang left")
