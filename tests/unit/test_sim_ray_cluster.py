"""The simulated `--with-ray-cluster`: hostname vs MASTER_ADDR picks the head, workers join and block,
a head whose workers have not joined fails with verl's GPU-count error."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.unit.test_sim import Sim, wait_for


def two_nodes(sim: Sim) -> None:
    def edit(cfg: dict) -> None:
        cfg["ajet"].setdefault("trainer_common", {}).update({"nnodes": 2, "n_gpus_per_node": 8})
    sim.edit(edit)


def test_head_without_its_workers_fails_with_the_gpu_count_signature(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    two_nodes(sim)
    out = sim.run("--with-ray-cluster", env=sim.env(MASTER_ADDR=os.uname().nodename, MASTER_PORT="29555"))
    assert out.returncode == 1
    assert "Ray runtime started." in out.stdout
    assert "Total available GPUs 8 is less than total desired GPUs 16." in out.stdout


def test_a_worker_joins_and_blocks_then_the_head_trains(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    two_nodes(sim)
    env = sim.env(MASTER_ADDR=os.uname().nodename, MASTER_PORT="29556")
    # Same codebase, another "host": this process is a worker because MASTER_ADDR is not its name.
    worker_env = {**env, "MASTER_ADDR": "some-other-host"}
    log = tmp_path / "worker.log"
    with open(log, "w") as fh:
        worker = subprocess.Popen(sim.argv("--with-ray-cluster"), cwd=sim.codebase, env=worker_env,
                                  stdout=fh, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "block forever" in log.read_text(), 30, "the worker to join")
        members = list((sim.codebase / ".sim_state/ray_cluster/some-other-host_29556").glob("*.json"))
        assert [m.stem for m in members] == [os.uname().nodename]
        time.sleep(1.5)
        assert worker.poll() is None, "a joined worker must block"
        # The head of *that* cluster (MASTER_ADDR = its name) counts the joined worker's 8 GPUs.
        head_cluster = sim.codebase / f".sim_state/ray_cluster/{os.uname().nodename}_29556"
        head_cluster.mkdir(parents=True)
        (head_cluster / "worker-b.json").write_text('{"host": "worker-b", "gpus": 8}')
        out = sim.run("--with-ray-cluster", env=env)
        assert out.returncode == 0, out.stdout[-2000:]
        assert "Training Progress: 100%" in out.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 128 + signal.SIGTERM
    assert not list((sim.codebase / ".sim_state/ray_cluster/some-other-host_29556").glob("*.json"))


def test_a_stale_registration_does_not_count(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    two_nodes(sim)
    cluster = sim.codebase / f".sim_state/ray_cluster/{os.uname().nodename}_29557"
    cluster.mkdir(parents=True)
    member = cluster / "gone.json"
    member.write_text('{"host": "gone", "gpus": 8}')
    os.utime(member, (time.time() - 60, time.time() - 60))
    out = sim.run("--with-ray-cluster", env=sim.env(MASTER_ADDR=os.uname().nodename, MASTER_PORT="29557"))
    assert out.returncode == 1 and "Total available GPUs 8 is less than total desired GPUs 16." in out.stdout


def test_cluster_flags_and_environment_are_checked(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    both = sim.run("--with-ray", "--with-ray-cluster")
    assert both.returncode == 1 and "cannot be used together" in both.stderr
    missing = sim.run("--with-ray-cluster")
    assert missing.returncode == 1 and "needs MASTER_ADDR and MASTER_PORT" in missing.stderr
