"""A run whose driver is provably gone is re-adopted at once; a live owner's or another node's lease is not.

Real processes (their pids and /proc start times), a real Redis, the node supervisor's own scan."""

from __future__ import annotations

import subprocess
import time

import pytest

from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.identity.owner_identity import boot_id, owner_dead, owner_id, parse_owner, process_start
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.node.supervisor import NodeSupervisor
from tests.load import scaled

pytestmark = pytest.mark.integration


def owner_of(proc: subprocess.Popen[bytes], node: str = "n1", start: int | None = None) -> str:
    """The owner id `proc` would have written as a driver (owner_id() of that process)."""
    mine = parse_owner(owner_id(node))
    assert mine is not None, "this machine's /proc gives no boot id, PID namespace or start time"
    return f"{node}/{boot_id()}/{mine.pidns}/{proc.pid}/{start or process_start(proc.pid)}/abc123"


@pytest.fixture
def live() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def dead() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "60"])
    owner = owner_of(proc)
    proc.kill()
    proc.wait()  # reaped: the pid is gone
    proc.owner = owner  # type: ignore[attr-defined]
    return proc


def test_an_owner_is_dead_only_when_this_node_and_boot_prove_it(live, dead) -> None:
    assert not owner_dead(owner_of(live), "n1")
    assert owner_dead(dead.owner, "n1")
    assert owner_dead(owner_of(live, start=process_start(live.pid) + 1), "n1")  # the pid now names another process
    assert not owner_dead(dead.owner, "n2")  # recorded on another node: nothing here can tell
    assert not owner_dead(dead.owner.replace(boot_id(), "0" * 8 + boot_id()[8:]), "n1")  # before a reboot
    node, boot, pidns, rest = dead.owner.split("/", 3)
    assert not owner_dead(f"{node}/{boot}/{int(pidns) + 1}/{rest}", "n1")  # another PID namespace
    assert not owner_dead(f"n1/{dead.pid}/abc123", "n1")  # the old owner format: the lease is waited out
    starts: dict[int, int | None] = {}  # one scan's memo of /proc reads: the same answers
    assert [owner_dead(o, "n1", starts) for o in (owner_of(live), dead.owner, owner_of(live))] == [False, True, False]
    assert set(starts) == {live.pid, dead.pid}
    zombie = subprocess.Popen(["sleep", "60"])
    owner = owner_of(zombie)
    zombie.kill()  # dead, not reaped until wait(): a zombie keeps its pid and start time

    def state() -> str:
        with open(f"/proc/{zombie.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    deadline = time.monotonic() + scaled(10)
    while state() != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state() == "Z" and owner_dead(owner, "n1")
    zombie.wait()


def test_the_supervisor_takes_a_dead_owners_run_at_once_and_leaves_the_others(redis_url, live, dead) -> None:
    store = Store.from_url(redis_url)
    until = store.server_time() + 600
    owners = {
        "dead": dead.owner,
        "reused": owner_of(live, start=process_start(live.pid) + 1),
        "live": owner_of(live),
        "foreign": dead.owner.replace("n1/", "n2/", 1),
        "old-format": f"n1/{dead.pid}/abc123",
    }
    for exp_id, owner in owners.items():
        store.records.create(exp_id, {"state": "running", "node": "n1", "target_node": "n1", "owner": owner,
                                      "lease_until": until}, {})
    sup = NodeSupervisor(Settings(redis_url=redis_url, lease_seconds=600), NodeInfo(name="n1", gpus=0, slots=1),
                         redis_url)
    assert sorted(sup.adopt_orphans()) == ["dead", "reused"]
    for exp_id, owner in owners.items():
        rec = store.records.raw(exp_id) or {}
        assert rec["owner"] == owner  # the new driver writes its own owner when it takes the run
        assert (float(rec["lease_until"]) == 0) == (exp_id in ("dead", "reused")), exp_id
    assert not store.runs.end_dead_lease("live", owners["dead"])  # compare-and-set on the exact owner value
