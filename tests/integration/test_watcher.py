"""The node's watcher: one process whose threads run RQ jobs, never more at once than its slots; a
failing job frees its slot; a drained node takes no new job; SIGTERM hands runs back at once so the
next worker re-adopts them without waiting for the lease to run out. Real Redis, RQ, processes, tmux."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from ajet_runner.service.submit import submit
from ajet_runner.store.per_experiment.queue import node_queue, queue
from ajet_runner.store.store import Store
from tests.integration.scenario import make, stays_false, wait_for
from tests.integration.workers import kill_group, running_worker, start_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HOLD = "tests.integration.watcher_jobs.hold"
FAIL = "tests.integration.watcher_jobs.fail"


def _watcher(redis_url: str, node: str, slots: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": redis_url, "AJET_RUNNER_NODE": node,
           "AJET_RUNNER_EXTRA_JOB_FUNCTIONS": f"{HOLD},{FAIL}"}  # the watcher runs only the job functions it knows
    return subprocess.Popen([sys.executable, "-m", "ajet_runner.workers.node.watcher", node, str(slots)],  # URL: env
                            env=env,
                            cwd=Path(__file__).resolve().parents[2])


def _started(work: Path) -> dict[str, str]:
    return {p.name.removeprefix("started-"): p.read_text() for p in work.glob("started-*")}


def test_one_process_runs_as_many_jobs_as_it_has_slots_and_a_failed_job_frees_its_slot(tmp_path, redis_url):
    conn = redis.Redis.from_url(redis_url)
    q = queue(conn, node_queue("w1"))
    failing = q.enqueue(FAIL, "f1", job_timeout=-1)
    held = [q.enqueue(HOLD, str(tmp_path), name, job_timeout=-1) for name in ("a", "b", "c")]
    proc = _watcher(redis_url, "w1", 2)
    try:
        wait_for(lambda: failing.get_status(refresh=True) == JobStatus.FAILED, 30, "the failing job to fail")
        assert "failed on purpose" in (failing.latest_result().exc_string or "")
        wait_for(lambda: len(_started(tmp_path)) == 2, 30, "two jobs to start")
        # both slots are held: the third must wait for one
        stays_false(lambda: len(_started(tmp_path)) > 2, 3, "a third job started with both slots held")
        (tmp_path / "release").touch()
        wait_for(lambda: all(j.get_status(refresh=True) == JobStatus.FINISHED for j in held), 30, "all three")
        who = _started(tmp_path)
        assert sorted(who) == ["a", "b", "c"]
        assert {v.split()[0] for v in who.values()} == {str(proc.pid)}  # one process: no fork per job
        assert len({v.split()[1] for v in who.values()}) >= 2  # run side by side, in threads
        assert [Job.fetch(j.id, connection=conn, serializer=JSONSerializer).return_value() for j in held] == \
            ["a", "b", "c"]
    finally:
        proc.terminate()
        proc.wait(20)
    assert proc.returncode == 0


def test_a_drained_node_takes_no_new_job_until_the_drain_ends(tmp_path, redis_url):
    store = Store.from_url(redis_url)
    store.nodes.set_drain("w2", True, by="test", reason="maintenance")
    proc = _watcher(redis_url, "w2", 2)
    try:
        job = queue(store.r, node_queue("w2")).enqueue(HOLD, str(tmp_path), "x", job_timeout=-1)
        (tmp_path / "release").touch()
        stays_false(lambda: _started(tmp_path), 5, "a job started on a drained node")
        store.nodes.set_drain("w2", False)
        wait_for(lambda: job.get_status(refresh=True) == JobStatus.FINISHED, 30, "the job after the drain")
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_job_that_arrives_while_the_watcher_stops_stays_queued_for_the_next_one(tmp_path, redis_url):
    """A SIGTERM lands while a busy watcher waits for its next job (BLPOP, up to 2 s: only an idle one
    stops at once) and a job comes in that window: the stopping watcher puts it back at the head of
    its queue instead of starting it."""
    conn = redis.Redis.from_url(redis_url)
    q = queue(conn, node_queue("w4"))
    busy = q.enqueue(HOLD, str(tmp_path), "busy", job_timeout=-1)
    proc = _watcher(redis_url, "w4", 2)
    try:
        wait_for(lambda: "busy" in _started(tmp_path), 30, "the first job to start")
        proc.send_signal(signal.SIGTERM)
        job = q.enqueue(HOLD, str(tmp_path), "late", job_timeout=-1)
        # past the BLPOP the stop landed in (2 s), well inside the 7 s hand-back
        stays_false(lambda: "late" in _started(tmp_path), 3, "the late job started after the SIGTERM")
        (tmp_path / "release").touch()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert sorted(_started(tmp_path)) == ["busy"] and busy.get_status(refresh=True) == JobStatus.FINISHED
    assert q.job_ids == [job.id] and job.get_status(refresh=True) == JobStatus.QUEUED


def test_a_stopped_worker_hands_its_run_back_and_the_next_one_adopts_it_at_once(tmp_path, redis_url, tmux_socket):
    sc = make("demo", tmp_path)
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_LEASE_SECONDS="60")  # far longer than the test waits
    first = start_worker(env, "n1", "--gpus", "0")
    try:
        wait_for(store.nodes.all, 30, "the worker to register")
        exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 60, "the run to start")
        kill_group(first, signal.SIGTERM)  # a restart or an upgrade
        assert first.returncode is not None
    finally:
        kill_group(first)
    rec = store.records.raw(exp_id) or {}
    assert rec["state"] == "running" and float(rec["lease_until"]) == 0.0 and not rec.get("driver_pid"), rec
    t0 = time.monotonic()
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: any(e["type"] == "adopted" for e in store.events.read(exp_id)), 30, "the adoption")
        adopted_after = time.monotonic() - t0
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    assert adopted_after < 30  # the 60 s lease was not waited for
    rec = store.records.raw(exp_id) or {}
    assert rec["outcome"] == "completed", rec
    assert len([e for e in store.events.read(exp_id) if e.get("trigger") == "launched"]) == 1
    assert sc.flag()["outcome"] == "completed"


def test_a_redis_outage_does_not_end_the_worker_loop() -> None:
    """RQ's loop quits on any error; the watcher holds every run of its node, so the calls its loop
    makes between jobs ride a Redis outage out (a real client against a port nobody listens on)."""
    import socket

    from ajet_runner.workers.node.slot_worker import SlotWorker

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    dead = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    worker = SlotWorker([queue(dead, "nowhere")], slots=1, connection=dead, serializer=JSONSerializer,
                        prepare_for_work=False, name="outage-test")
    worker.heartbeat()
    worker.check_for_suspension(False)
    worker.run_maintenance_tasks()
    with pytest.raises(redis.ConnectionError):  # the test's client really is cut off
        dead.ping()


def test_a_job_queued_under_its_name_from_before_the_package_rename_still_runs(tmp_path, redis_url, tmux_socket):
    """A queue outlives an upgrade: a drive job queued as `workers.jobs.drive` (the name before everything moved
    into `ajet_runner`) is run by the new worker as the driver it names now."""
    sc = make("demo", tmp_path)
    store = Store.from_url(redis_url)
    exp_id = submit(store, sc.blueprint.read_text(), node="n1", wait_for_node=True)["id"]
    conn = redis.Redis.from_url(redis_url)
    (job_id,) = queue(conn, node_queue("n1")).job_ids
    old = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
    func, instance, args, kwargs = JSONSerializer.loads(old.data)
    assert func == "ajet_runner.workers.drive.jobs.drive"
    old.data = JSONSerializer.dumps(("workers.jobs.drive", instance, args, kwargs))
    old.save()
    assert Job.fetch(job_id, connection=conn, serializer=JSONSerializer).func_name == "workers.jobs.drive"
    status = Job.fetch(job_id, connection=conn, serializer=JSONSerializer).get_status
    with running_worker(worker_env(redis_url, tmux_socket), "n1", "--gpus", "0"):
        # the old job itself runs to its end (not a job the supervisor re-enqueues after the old one failed)
        wait_for(lambda: status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED), 120, "the old job to end")
        assert status(refresh=True) == JobStatus.FINISHED
    assert (store.records.raw(exp_id) or {})["outcome"] == "completed"
    assert sc.flag()["outcome"] == "completed"
