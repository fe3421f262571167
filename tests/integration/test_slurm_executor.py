"""`ajet-runner run --executor slurm` end to end against a real private one-node SLURM (munge, slurmctld,
slurmd, 4 fake GPUs; tests/integration/slurm_cluster.py), the embedded Redis and the simulated AgentJet.

Every test checks that nothing is left behind: no job of the experiment in the queue, no process carrying
its marker.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from ajet_runner.workers.executors.request import AttemptRequest
from ajet_runner.workers.executors.slurm.slurm_executor import SlurmExecutor
from tests.integration.scenario import CLI, Scenario, env_for, make, marked_processes, wait_for
from tests.integration.slurm_cluster import SlurmCluster, free_port, missing_binaries
from tests.integration.swarm_helpers import make_swarm
from tests.integration.workers import kill_group, running_worker, start_worker, worker_env

# One SLURM cluster (the module fixture) for all of them: one xdist worker runs the module (tests/schedule.py).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("slurm")]
MARKER = "AJET_RUNNER_EXPERIMENT"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"SLURM is not installed (missing {', '.join(missing)}): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("a private SLURM needs root here (munged runs as the munge user, slurmd as root)")
    with SlurmCluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def set_yaml(sc: Scenario, yaml_rel: str, **values: object) -> None:
    """Replace `key: value` lines of the scenario's YAML (keys already present)."""
    path = sc.codebase / yaml_rel
    text = path.read_text()
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^([ \t]*{key}:)[ \t]*[^#\n]*?(?=[ \t]*(?:#|$))", rf"\g<1> {value}", text)
        assert n, key
    path.write_text(text)


DEMO_YAML = "tests/bench/benchmark_math/benchmark_math.yaml"


def run_slurm(sc: Scenario, slurm: SlurmCluster, tmux_socket: str, *args: str, timeout: float = 240,
              **env: str) -> subprocess.CompletedProcess[str]:
    return run_group([*CLI, "run", "--executor", "slurm", *args, str(sc.blueprint)],
                     {**env_for(tmux_socket, **env), **slurm.env}, timeout)


def run_group(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`run` in its own process group: on a timeout its embedded Redis and worker go with it."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def start_slurm(sc: Scenario, slurm: SlurmCluster, tmux_socket: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "run", "--executor", "slurm", str(sc.blueprint)],
                            env={**env_for(tmux_socket, **env), **slurm.env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def end_group(proc: subprocess.Popen[str]) -> None:
    """A `run` that did not finish: it, its embedded Redis and its worker are killed (they share its group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def exp_jobs(slurm: SlurmCluster, exp_id: str) -> list[str]:
    return [j for j in slurm.jobs() if j.endswith(f"|ajet_{exp_id}")]


def job_ids(sc: Scenario) -> list[str]:
    """The jobs the attempts ran as (the runner's launch events name them in the report)."""
    return re.findall(r"running in slurm job (\d+)", (sc.results / "experiment_report.md").read_text())


def assert_nothing_left(slurm: SlurmCluster, exp_id: str) -> None:
    assert exp_jobs(slurm, exp_id) == []
    assert marked_processes(exp_id) == []


def test_a_run_completes_as_a_slurm_job_with_its_evaluations(tmp_path: Path, tmux_socket: str,
                                                             slurm: SlurmCluster) -> None:
    sc = make("demo", tmp_path)
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=2)
    proc = run_slurm(sc, slurm, tmux_socket)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 1
    assert [e["step"] for e in data["evaluations"]][:2] == [0, 2]
    (job,) = job_ids(sc)
    shown = slurm.show_job(job)
    assert "JobState=COMPLETED" in shown and f"Comment=ajet-runner:{data['id']}:attempt-1" in shown
    assert f"JobName=ajet_{data['id']}" in shown and "TresPerNode=gres:gpu:2" in shown
    assert data["attempts"][0]["queued_seconds"] >= 0
    # The wrapper ran unchanged inside the job: its rc file is the truth; SLURM's GPUs reached the trainer.
    assert (sc.results / "logs/attempt-1.rc").read_text() == "0\n"
    assert "with value: [2]" in (sc.results / "logs/attempt-1.log").read_text()
    assert_nothing_left(slurm, data["id"])


def test_pending_time_is_shown_and_not_charged_to_the_max_time(tmp_path: Path, tmux_socket: str, redis_url: str,
                                                              slurm: SlurmCluster) -> None:
    sc = make("demo", tmp_path)
    # A short training (a few seconds) under a 30 s limit: the pending wait is what would use the limit up.
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=2, step_seconds=0.3, val_seconds=0.1, startup_seconds=0.3)
    sc.blueprint.write_text(sc.blueprint.read_text().replace("5 minutes", "0.5 minutes"))
    max_seconds = 30
    # Every GPU is taken until the job has waited longer than the whole limit: charged, that wait alone
    # would use it up. Measured from when the job is seen queued, so a slow start makes it no shorter.
    blocker = slurm.sbatch_wrap("sleep 600", "--gres=gpu:4", "--job-name=blocker")
    try:
        proc = start_slurm(sc, slurm, tmux_socket, REDIS_URL=redis_url)  # its events stay readable afterwards
        try:
            found = wait_for(lambda: running_job(sc, slurm), 60, "the job to be queued")
            assert isinstance(found, list) and "PENDING" in slurm.show_job(found[0])
            time.sleep(max_seconds + 3)
        finally:
            slurm.cancel(blocker)
        try:
            out, _ = proc.communicate(timeout=240)
        finally:
            end_group(proc)
    finally:
        slurm.cancel(blocker)
    assert proc.returncode == 0, out
    data = sc.results_json()
    assert data["outcome"] == "completed"
    assert data["attempts"][0]["queued_seconds"] > max_seconds
    messages = [e.get("message", "") for e in Store(redis.Redis.from_url(redis_url)).events.read(data["id"])]
    assert any(m.startswith("pending in SLURM: Reason=Resources") for m in messages), messages
    assert any(re.match(r"SLURM job \d+ running( on \S+)? after \d+", m) for m in messages), messages
    assert_nothing_left(slurm, data["id"])


def test_the_time_limit_leaves_no_job_and_no_process(tmp_path: Path, tmux_socket: str, slurm: SlurmCluster) -> None:
    sc = make("long_run", tmp_path)
    set_yaml(sc, "tests/bench/long_run/long_run.yaml", n_gpus_per_node=1)
    sc.blueprint.write_text(sc.blueprint.read_text().replace("0.5 minutes", "20 seconds"))  # a few evaluations
    proc = run_slurm(sc, slurm, tmux_socket)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "timed_out" and len(data["evaluations"]) >= 1
    (job,) = job_ids(sc)
    assert re.search(r"JobState=(COMPLETED|CANCELLED|FAILED)", slurm.show_job(job))
    assert (sc.results / "logs/attempt-1.rc").read_text().split("\n")[0] == "130"  # our INT, not SLURM's KILL
    assert_nothing_left(slurm, data["id"])


def test_a_stop_leaves_no_job_and_no_process_and_is_not_a_failure(tmp_path: Path, tmux_socket: str,
                                                                  slurm: SlurmCluster) -> None:
    sc = make("long_run", tmp_path)
    set_yaml(sc, "tests/bench/long_run/long_run.yaml", n_gpus_per_node=1)
    sc.blueprint.write_text(sc.blueprint.read_text().replace("0.5 minutes", "10 minutes"))
    proc = start_slurm(sc, slurm, tmux_socket)
    try:
        log = sc.results / "logs/attempt-1.log"
        wait_for(lambda: log.exists() and "Training Progress" in log.read_text(errors="replace"), 120,
                 "the first training step")
        proc.send_signal(signal.SIGINT)  # `run`'s Ctrl-C: a stop request
        out, _ = proc.communicate(timeout=120)
    finally:
        end_group(proc)
    data = sc.results_json()
    assert data["outcome"] == "cancelled", out
    assert sc.flag()["outcome"] == "cancelled"
    assert_nothing_left(slurm, data["id"])


def test_a_requeue_mid_run_is_preempted_and_the_next_attempt_resumes(tmp_path: Path, tmux_socket: str,
                                                                    slurm: SlurmCluster) -> None:
    sc = make("demo", tmp_path)
    # The YAML names its experiment (benchmark_math_demo): the next attempt finds that name's checkpoint.
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=2, total_training_steps=14, save_freq=2, test_freq=4)
    proc = start_slurm(sc, slurm, tmux_socket)
    try:
        log = sc.results / "logs/attempt-1.log"
        wait_for(lambda: log.exists() and "local_global_step_folder" in log.read_text(errors="replace"), 120,
                 "the first checkpoint")
        found = wait_for(lambda: running_job(sc, slurm), 30, "the job id")
        assert isinstance(found, list) and len(found) == 1
        job = str(found[0])
        requeued = slurm.scontrol("requeue", job)
        assert requeued.returncode == 0, requeued.stderr
        out, _ = proc.communicate(timeout=200)
    finally:
        end_group(proc)
    assert proc.returncode == 0, out
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    assert [r["signature"] for r in data["repairs"]] == ["preempted"]
    assert data["repairs"][0]["result"] == "relaunched"
    second = (sc.results / "logs/attempt-2.log").read_text(errors="replace")
    assert "Load from checkpoint folder" in second and "Training from scratch" not in second
    assert "SLURM preempted job" in (sc.results / "logs/attempt-1.log").read_text(errors="replace")
    time.sleep(0.5)
    assert "JobState=CANCELLED" in slurm.show_job(job)  # the requeued job never ran again
    assert_nothing_left(slurm, data["id"])


def running_job(sc: Scenario, slurm: SlurmCluster) -> list[str]:
    """Attempt 1's job, found as a person would: the experiment id in the batch script, then squeue."""
    script = sc.results / "logs/attempt-1.sbatch.sh"
    if not script.exists():
        return []
    m = re.search(r"experiment (\S+), attempt", script.read_text())
    return [j.split("|", 1)[0] for j in exp_jobs(slurm, m.group(1))] if m else []


@pytest.mark.parametrize(("args", "yaml_gpus", "said"), [
    (("--partition", "nosuchpartition"), 2, "Invalid partition name specified"),
    ((), 8, "Requested node configuration is not available"),
])
def test_sbatch_refusing_the_job_fails_the_run_quoting_slurm(tmp_path: Path, tmux_socket: str, slurm: SlurmCluster,
                                                             args: tuple[str, ...], yaml_gpus: int, said: str) -> None:
    sc = make("demo", tmp_path)
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=yaml_gpus)
    proc = run_slurm(sc, slurm, tmux_socket, *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and said in data["reason"], data["reason"]
    assert sc.flag()["outcome"] == "failed"
    assert said in (sc.results / "experiment_report.md").read_text()
    assert not (sc.results / "logs/attempt-1.pid").exists()  # nothing ran, here or there
    assert_nothing_left(slurm, data["id"])


def test_a_scheduler_that_is_down_fails_the_run_naming_it(tmp_path: Path, tmux_socket: str,
                                                          slurm: SlurmCluster) -> None:
    down = tmp_path / "down.conf"
    # SLURM's clients retry a controller they cannot reach for about MessageTimeout (10 s by default) per
    # command; 2 s gives the same refusal sooner.
    down.write_text(re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=1", slurm.conf.read_text()) + "MessageTimeout=2\n")
    sc = make("demo", tmp_path)
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=2)
    proc = run_group([*CLI, "run", "--executor", "slurm", str(sc.blueprint)],
                     {**env_for(tmux_socket), "SLURM_CONF": str(down)}, 240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and "Unable to contact slurm controller" in data["reason"], data["reason"]
    assert sc.flag()["outcome"] == "failed"
    assert marked_processes(data["id"]) == []


def test_a_new_worker_finds_the_job_by_name_and_comment_and_stops_it(tmp_path: Path, slurm: SlurmCluster,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What a restarted worker does when the record never got the handle (it died between sbatch and the
    record): the job is found by `--job-name=ajet_<id>` and `--comment=ajet-runner:<id>:attempt-N`."""
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    logs = tmp_path / "logs"
    logs.mkdir()
    paths = {name: logs / f"attempt-2.{name}" for name in ("log", "rc", "pid")}
    request = AttemptRequest(exp_id="adopt1", attempt=2, gpus=1, max_seconds=600, grace_seconds=10)
    first = SlurmExecutor()
    first.request("ajet_adopt", request)
    # The runner's side may hold a CUDA_VISIBLE_DEVICES (a node's slots, a repair): SLURM's choice wins in the job.
    started = first.start("ajet_adopt", "echo started gpus=$CUDA_VISIBLE_DEVICES; sleep 300", cwd=str(tmp_path),
                          env={MARKER: "adopt1", "CUDA_VISIBLE_DEVICES": "7"},
                          log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"], pid_timeout=60,
                          base_env=dict(os.environ))
    wait_for(lambda: paths["pid"].exists(), 60, "the job to run")
    other = AttemptRequest(exp_id="adopt1", attempt=1, gpus=1, max_seconds=600, grace_seconds=10)
    stranger = SlurmExecutor()
    stranger.request("ajet_adopt", other)  # another attempt's comment: not this job
    assert stranger.adopt("ajet_adopt", {**paths, "pid": logs / "attempt-1.pid"}) is None
    second = SlurmExecutor()
    second.request("ajet_adopt", request)
    found = second.adopt("ajet_adopt", paths)
    assert found is not None and found.job_id == started.job_id and found.pid is not None
    assert second.is_running(found) and second.exists("ajet_adopt")
    assert second.stop(found, grace=10) == 130
    assert exp_jobs(slurm, "adopt1") == [] and marked_processes("adopt1") == []
    assert "started gpus=0\n" in paths["log"].read_text()


def test_a_stop_while_pending_cancels_the_job_and_nothing_ever_runs(tmp_path: Path, tmux_socket: str,
                                                                    slurm: SlurmCluster) -> None:
    sc = make("demo", tmp_path)
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=2)
    blocker = slurm.sbatch_wrap("sleep 120", "--gres=gpu:4", "--job-name=blocker")
    try:
        proc = start_slurm(sc, slurm, tmux_socket)
        try:
            script = sc.results / "logs/attempt-1.sbatch.sh"
            wait_for(lambda: running_job(sc, slurm), 60, "the job to be queued")
            assert "PENDING" in slurm.show_job(running_job(sc, slurm)[0])
            time.sleep(2)  # a few ticks while pending
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=120)
        finally:
            end_group(proc)
    finally:
        slurm.cancel(blocker)
    data = sc.results_json()
    assert data["outcome"] == "cancelled", out
    assert script.exists() and not (sc.results / "logs/attempt-1.pid").exists()
    assert "stopped while pending in SLURM" in (sc.results / "logs/attempt-1.log").read_text()
    assert_nothing_left(slurm, data["id"])


def test_what_escaped_the_job_is_stopped_by_the_batch_script(tmp_path: Path, slurm: SlurmCluster,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Under proctrack/linuxproc a daemon that left the job's process tree survives the job (a tmux server,
    a Ray head); the batch script stops what carries the experiment's marker once the wrapper is done."""
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    logs = tmp_path / "logs"
    logs.mkdir()
    paths = {name: logs / f"attempt-1.{name}" for name in ("log", "rc", "pid")}
    ex = SlurmExecutor()
    ex.request("ajet_escape", AttemptRequest(exp_id="escape1", attempt=1, gpus=0, max_seconds=None,
                                             grace_seconds=0))
    daemon = f"setsid sleep 301 < /dev/null > /dev/null 2>&1 & echo $! > {tmp_path / 'daemon.pid'}; echo launched"
    handle = ex.start("ajet_escape", daemon, cwd=str(tmp_path), env={MARKER: "escape1"}, log_path=paths["log"],
                      rc_path=paths["rc"], pid_path=paths["pid"], pid_timeout=60, base_env=dict(os.environ))
    assert ex.wait_for_exit(handle, 60) == 0
    wait_for(lambda: exp_jobs(slurm, "escape1") == [], 60, "the job to end")
    assert marked_processes("escape1") == []
    daemon_pid = int((tmp_path / "daemon.pid").read_text())
    assert not Path(f"/proc/{daemon_pid}").exists() or "sleep 301" not in Path(f"/proc/{daemon_pid}/cmdline") \
        .read_bytes().replace(b"\0", b" ").decode()
    assert f"stopped process(es) of this experiment left on {slurm.node} after the command ended: {daemon_pid}" \
        in paths["log"].read_text()


def test_a_worker_killed_mid_run_is_replaced_and_the_new_one_adopts_the_job(tmp_path: Path, redis_url: str,
                                                                           tmux_socket: str,
                                                                           slurm: SlurmCluster) -> None:
    """`worker --executor slurm` on a login node: SIGKILL it mid-run; the next worker goes on watching the same
    job (the handle in the record names it) and the run completes with one launch and one job."""
    sc = make("demo", tmp_path)
    set_yaml(sc, DEMO_YAML, n_gpus_per_node=2, total_training_steps=16)
    store = Store.from_url(redis_url)
    env = {**worker_env(redis_url, tmux_socket, AJET_RUNNER_LEASE_SECONDS="60"), **slurm.env}
    first = start_worker(env, "login1", "--gpus", "0", "--executor", "slurm")
    try:
        wait_for(lambda: store.nodes.all(), 30, "the first worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="login1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("latest_metrics"), 90, "a first evaluation")
    finally:
        kill_group(first)
    assert [j.split("|")[1] for j in exp_jobs(slurm, exp_id)] == ["RUNNING"]  # the job lives on without a worker
    with running_worker(env, "login1", "--gpus", "0", "--executor", "slurm"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 150, "the run to finish")
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "completed", rec
    launches = [e for e in store.events.read(exp_id) if e.get("trigger") == "launched"]
    assert len(launches) == 1 and len(job_ids(sc)) == 1
    assert_nothing_left(slurm, exp_id)


def test_swarm_mode_is_refused_by_the_slurm_executor_naming_what_to_use(tmp_path: Path, tmux_socket: str,
                                                                        slurm: SlurmCluster) -> None:
    sc = make_swarm("swarm", tmp_path, free_port())
    proc = run_slurm(sc, slurm, tmux_socket)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and "swarm mode" in data["reason"] and "--executor local" in data["reason"]
    assert sc.flag()["outcome"] == "failed"
    assert_nothing_left(slurm, data["id"])
