"""Red team: a job queued straight into Redis that names anything but ajet-runner's own job functions never runs.

Whoever can write to the queue used to get code execution as the worker's user: RQ imports the dotted name a
job carries and calls it. Here a real `ajet-runner worker` (supervisor and watcher) serves its node queue and
hostile jobs are pushed into it directly with RQ: `os.system`, `subprocess.check_call`, `builtins.exec`, a
module whose import alone writes a file, ajet-runner's own drive job carrying a failure / success callback or
an RQ webhook, and a pickled job. Each must end FAILED (refused) with nothing imported, called or contacted,
the refusal in the worker's log, and the worker still serving.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.callbacks import Callback
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.webhook import Webhook

from ajet_runner.store.naming import node_queue
from ajet_runner.store.per_experiment.queue import DRIVE_JOB
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, wait_for
from tests.integration.webhook_receiver import WebhookReceiver
from tests.integration.workers import kill_group, worker_env
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]

EVIL_MODULE = '''
import os, pathlib
pathlib.Path(os.environ["EVIL_MARKERS"], "imported").touch()
def run(*args, **kwargs):
    pathlib.Path(os.environ["EVIL_MARKERS"], "called").touch()
'''


def test_a_foreign_job_function_is_refused_and_never_imported(tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    markers, lib = tmp_path / "markers", tmp_path / "lib"
    markers.mkdir()
    lib.mkdir()
    (lib / "evil_payload.py").write_text(EVIL_MODULE)
    env = worker_env(redis_url, tmux_socket, EVIL_MARKERS=str(markers),
                     PYTHONPATH=os.pathsep.join(p for p in (str(lib), os.environ.get("PYTHONPATH", "")) if p))
    log = tmp_path / "worker.log"
    store = Store.from_url(redis_url)
    conn = redis.Redis.from_url(redis_url)
    with log.open("wb") as sink, WebhookReceiver() as hook:
        worker = subprocess.Popen([*CLI, "worker", "--node", "n1", "--gpus", "0"], env=env, start_new_session=True,
                                  stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: any(n["name"] == "n1" for n in store.nodes.all()), 60, "the worker to register")
            q = Queue(node_queue("n1"), connection=conn, serializer=JSONSerializer)
            hostile = {
                "os.system": q.enqueue("os.system", f"touch {markers}/system"),
                "subprocess.check_call": q.enqueue("subprocess.check_call", ["touch", f"{markers}/check_call"]),
                "builtins.exec": q.enqueue("builtins.exec", f"open('{markers}/exec', 'w').close()"),
                "a module that acts on import": q.enqueue("evil_payload.run"),
                "drive job + failure callback": q.enqueue(DRIVE_JOB, "no-such-exp",
                                                          on_failure=Callback("evil_payload.run")),
                "drive job + success callback": q.enqueue(DRIVE_JOB, "no-such-exp",
                                                          on_success=Callback("evil_payload.run")),
                "drive job + RQ webhook": q.enqueue(DRIVE_JOB, "no-such-exp",
                                                    webhooks=[Webhook(url=hook.url, job_status="finished"),
                                                              Webhook(url=hook.url, job_status="failed")]),
            }
            pickled = Queue(node_queue("n1"), connection=conn).enqueue("os.system", f"touch {markers}/pickled")

            def status(job_id: str) -> str | None:
                got = conn.hget(f"rq:job:{job_id}", "status")
                return got.decode() if isinstance(got, bytes) else None

            ids = [j.id for j in hostile.values()] + [pickled.id]
            wait_for(lambda: all(status(i) == JobStatus.FAILED for i in ids), 60, "every hostile job to be refused")
            assert worker.poll() is None, "the worker died on a hostile job"
            # still serving: one more refused job after all of them
            last = q.enqueue("os.system", f"touch {markers}/last")
            wait_for(lambda: status(last.id) == JobStatus.FAILED, 30, "the worker to keep serving")
        finally:
            kill_group(worker)
        received = list(hook.received)
    left = sorted(p.name for p in markers.iterdir())
    said = log.read_text(errors="replace")
    results = {name: Job.fetch(job.id, connection=conn, serializer=JSONSerializer).latest_result()
               for name, job in hostile.items()}
    reasons = {name: getattr(result, "exc_string", "") or "" for name, result in results.items()}
    refused_logged = [name for name, job in hostile.items()
                      if any(f"job {job.id} " in line and "refus" in line for line in said.splitlines())]
    ok = not left and not received and len(refused_logged) == len(hostile)
    record("foreign job functions", "jobs queued straight into the node queue: os.system, subprocess, exec, a module "
           "acting on import, the drive job with callbacks or RQ webhooks, a pickled job", len(hostile) + 2,
           f"{len(hostile) + 2} refused (FAILED); {len(left)} ran or imported; {len(received)} webhooks sent; "
           f"{len(refused_logged)}/{len(hostile)} refusals in the worker's log", passed=ok)
    assert not left, f"hostile jobs ran or were imported: {left}"
    assert not received, "an RQ webhook named by a hostile job was sent"
    assert len(refused_logged) == len(hostile), said[-3000:]
    assert all("ForeignJob" in reason for reason in reasons.values()), reasons
