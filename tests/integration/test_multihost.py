"""Redis and two worker hosts in separate network namespaces; one host is cut off mid-run.

The cut-off host's experiments keep running and are watched throughout; what they write
meanwhile is buffered and delivered after the link comes back; nothing is launched twice and
every experiment gets its finish.flag.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ajet_runner.service.embedded import find_redis_server
from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.workers import kill_group

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


@dataclass
class Net:
    """A bridge in the root namespace with one namespace (one "host") per member."""

    suffix: str
    subnet: str
    hosts: dict[str, str] = field(default_factory=dict)  # name -> namespace
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"ajrb{self.suffix}"

    def ip(self, index: int) -> str:
        return f"{self.subnet}.{index}"

    def veth(self, name: str) -> str:
        return f"v{name[0]}{self.suffix}0"

    def add_host(self, name: str, index: int) -> None:
        ns, v0, v1 = f"ajr{self.suffix}{name[0]}", self.veth(name), f"v{name[0]}{self.suffix}1"
        sh("ip", "netns", "add", ns)
        self.hosts[name] = ns
        sh("ip", "link", "add", v0, "type", "veth", "peer", "name", v1)
        sh("ip", "link", "set", v1, "netns", ns)
        sh("ip", "link", "set", v0, "master", self.bridge)
        sh("ip", "link", "set", v0, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip(index)}/24", "dev", v1)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", v1, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def run(self, host: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *args], env=env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def link(self, host: str, up: bool) -> None:
        sh("ip", "link", "set", self.veth(host), "up" if up else "down")


@pytest.fixture()
def net() -> Iterator[Net]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and iproute2 (`ip`)")
    n = Net(suffix=secrets.token_hex(2), subnet=f"10.231.{secrets.randbelow(250) + 1}")
    try:
        sh("ip", "link", "add", n.bridge, "type", "bridge")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"network namespaces are not permitted here: {exc.stderr.strip()}")
    try:
        sh("ip", "addr", "add", f"{n.ip(254)}/24", "dev", n.bridge)
        sh("ip", "link", "set", n.bridge, "up")
        yield n
    finally:
        for proc in n.procs:
            kill_group(proc)
        for ns in n.hosts.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", n.bridge], capture_output=True, check=False)


def test_a_host_cut_off_mid_run_keeps_its_runs_and_delivers_its_events(net: Net, tmp_path: Path) -> None:
    try:
        net.add_host("redis", 1)
        net.add_host("a", 2)
        net.add_host("b", 3)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"network namespaces are not permitted here: {exc.stderr.strip()}")
    redis_ip = net.ip(1)
    net.run("redis", [find_redis_server(), "--bind", redis_ip, "--port", "6379", "--save", "",
                      "--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp_path)], dict(os.environ))
    url = f"redis://{redis_ip}:6379/0"
    store = Store.from_url(url)
    wait_for(lambda: _pings(store), 20, "redis in its namespace")

    sockets = {h: str(tmp_path / f"tmux-{h}.sock") for h in ("a", "b")}
    try:
        _run_the_cut(net, store, url, sockets, tmp_path)
    finally:
        for sock in sockets.values():
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)


def _run_the_cut(net: Net, store: Store, url: str, sockets: dict[str, str], tmp_path: Path) -> None:
    for host in ("a", "b"):
        env = {**os.environ, "REDIS_URL": url, "AJET_RUNNER_TMUX_SOCKET": sockets[host],
               "AJET_RUNNER_LEASE_SECONDS": "3", "AJET_RUNNER_POLL_INTERVAL": "0.2"}
        net.run(host, [sys.executable, "-m", "ajet_runner", "worker", "--node", f"host-{host}", "--gpus", "0",
                       "--slots", "2"], env)
    wait_for(lambda: len(store.nodes.all()) == 2, 30, "both hosts' workers to register")

    scenarios = []
    for i in range(4):
        sc = make("demo", tmp_path / f"exp{i}")
        yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
        yaml_path.write_text(yaml_path.read_text().replace("total_training_steps: 10", "total_training_steps: 20"))
        scenarios.append(sc)
    ids = [submit(store, sc.blueprint.read_text())["id"] for sc in scenarios]

    def records() -> list[dict]:
        return [store.records.raw(i) or {} for i in ids]

    wait_for(lambda: all(r.get("state") == "running" for r in records()), 60, "all four to run")
    placed = {r["id"]: r["node"] for r in records()}
    assert set(placed.values()) == {"host-a", "host-b"}, placed  # spread across both hosts
    on_a = [i for i, node in placed.items() if node == "host-a"]
    val_files = [Path(store.records.raw(i)["blueprint_json"]["exp_codebase_dir"])  # type: ignore[index]
                 / "saved_val_result/benchmark_math_demo_val.md" for i in on_a]

    def evaluations() -> list[int]:
        return [len(f.read_text().splitlines()) if f.exists() else 0 for f in val_files]

    net.link("a", up=False)
    cut_at = time.time()
    at_cut = evaluations()
    # The partition is real once host a's leases have run out in Redis ...
    wait_for(lambda: all(float(store.records.raw(i)["lease_until"]) < store.server_time() for i in on_a),  # type: ignore[index]
             30, "host a's leases to expire")
    # ... and the cut-off runs keep training: two more evaluations each (so the driver saw the first).
    wait_for(lambda: all(n >= before + 2 for n, before in zip(evaluations(), at_cut, strict=True)), 60,
             "the cut-off runs to keep evaluating")
    net.link("a", up=True)
    back_at = time.time()

    wait_for(lambda: all(r.get("state") == "finished" for r in records()), 180, "every experiment to finish")
    for sc, rec in zip(scenarios, records(), strict=True):
        assert rec["outcome"] == "completed", rec.get("reason")
        assert (sc.results / "finish.flag").exists()
        events = store.events.read(rec["id"])
        assert len([e for e in events if e.get("trigger") == "launched"]) == 1, "launched twice"
        assert not (sc.results / "logs" / "attempt-2.log").exists()
    for exp_id in on_a:
        during = [e for e in store.events.read(exp_id) if cut_at < float(e.get("at", 0)) < back_at]
        assert during, "events written while cut off were not delivered"
        assert store.records.raw(exp_id)["node"] == "host-a"  # type: ignore[index]


def _pings(store: Store) -> bool:
    try:
        return bool(store.r.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False
