"""The node's watcher: one long-lived process that drives all of this node's experiments, a thread each.

What the drivers do most — a quiet run's watch tick, the Redis writes — is done for all of them by one
watch loop (workers/drive/watch_loop.py) and one journal pump (workers/drive/journal_pump.py).

RQ still hands experiments to the node (`ajet_runner.workers.drive.jobs.drive` jobs on the node's own queue, then
the shared one); the node's `slots` are threads of this process (workers/node/slot_worker.py), so
watching one more run costs a thread and its buffers, not a Python process and a fork.

Run by the node supervisor as `python -m ajet_runner.workers.node.watcher NODE SLOTS` with REDIS_URL (or the
sentinels' settings) in its environment (never on the command line, which every user of the node can read); it
dies with the supervisor (PR_SET_PDEATHSIG), and the supervisor restarts it when it dies alone. While the node
is drained it takes no new job and keeps watching its runs. On SIGTERM (a worker stopping,
restarting or being upgraded) it takes no new job and every driver hands its run back at its next
look (lease ended at once, so the next worker re-adopts it without waiting for the lease to run
out); the runs themselves live on in tmux.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import uuid

from rq.serializers import JSONSerializer

from ajet_runner.logsetup import configure
from ajet_runner.statemachine.failures.signatures import use_extension
from ajet_runner.store.connection import RedisSettingsError, connect, need_target, store_at
from ajet_runner.store.per_experiment.queue import DRIVE_JOB, queue, queue_names
from ajet_runner.store.settings import get_settings
from ajet_runner.store.store import RedisError, Store
from ajet_runner.workers.executors.ssh_hosts import served_hosts
from ajet_runner.workers.node.hosting import HOST
from ajet_runner.workers.node.lifeline import die_with_parent, expected_parent_from_env, keep_environment_private
from ajet_runner.workers.node.slot_worker import SlotWorker

log = logging.getLogger(__name__)
HAND_BACK_SECONDS = 7.0  # the supervisor waits 10 s before SIGKILL


def _draining(store: Store, node: str) -> bool:
    try:
        return store.nodes.draining(node)
    except RedisError:
        return False  # the dequeue fails the same way and retries


def _handing_back(signum: int, frame: object) -> None:
    log.info("signal %d while the drivers hand their runs back: already stopping", signum)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m ajet_runner.workers.node.watcher NODE SLOTS  (REDIS_URL in the environment)",
              file=sys.stderr)
        return 2
    node, slots = argv[1], int(argv[2])
    die_with_parent(expected_parent_from_env())  # a SIGKILLed supervisor leaves no watcher behind
    keep_environment_private()  # REDIS_URL is in this environment: not readable by the experiments' user
    configure("watcher", node=node)  # level and format from the worker's environment
    settings = get_settings()  # read (and cached) before the variable below leaves the environment
    try:
        url = need_target(settings)  # REDIS_URL, or the sentinels and the master's name
    except RedisSettingsError as exc:
        print(f"error: {exc} (in the watcher's environment)", file=sys.stderr)
        return 2
    # The adviser's key stays in this process: experiments (tmux and the user's code) never inherit it.
    os.environ.pop("AJET_RUNNER_LLM_API_KEY", None)
    if settings.catalogue_extra:
        use_extension(settings.catalogue_extra)  # checked by `ajet-runner worker` before it started us
    HOST.active = True
    importlib.import_module(DRIVE_JOB.rpartition(".")[0])  # the driver's code, before the first job needs it
    # No plotting preload here: a restarted worker's first jobs (re-adopting its runs) shared the GIL with
    # matplotlib's import and first drawing. Each driver starts it (once per process) when its watch starts,
    # after the adoption; the plot is drawn after finish.flag anyway.
    conn = connect(url, health_check_interval=30)
    store = store_at(url, socket_timeout=10, socket_connect_timeout=5)
    hosts = served_hosts(settings) if settings.executor == "ssh" else []
    worker = SlotWorker([queue(conn, name) for name in queue_names(node, hosts)], slots=slots,
                        paused=lambda: _draining(store, node), on_stop=HOST.stopping.set,
                        connection=conn, serializer=JSONSerializer,
                        name=f"{node}.watcher.{uuid.uuid4().hex[:6]}")
    try:
        worker.work(logging_level="WARNING", with_scheduler=False)
    finally:
        HOST.stopping.set()
        for sig in (signal.SIGTERM, signal.SIGINT):  # the supervisor's own SIGTERM must not cut the hand-back
            signal.signal(sig, _handing_back)
        left = worker.join(HAND_BACK_SECONDS)
        if left:
            log.warning("stopping with %d driver(s) still busy (their leases run out): %s", len(left), left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
