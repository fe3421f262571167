"""One RQ worker process of a node: serves the node's own queue first, then the shared one.

Run by the node supervisor as `python -m workers.slot REDIS_URL NODE INDEX`. The forking RQ
worker heartbeats while a long job runs; the job itself (the experiment driver) runs in RQ's
work-horse process.
"""

from __future__ import annotations

import os
import sys
import uuid

import redis
from rq import Worker
from rq.serializers import JSONSerializer

from logsetup import configure
from statemachine.signatures import use_extension
from store.queue import queue, queue_names
from store.settings import get_settings
from workers.lifeline import PARENT_ENV, die_with_parent, expected_parent_from_env


def main(argv: list[str]) -> int:
    url, node, index = argv[1], argv[2], argv[3]
    die_with_parent(expected_parent_from_env())  # a SIGKILLed supervisor leaves no slot behind
    os.environ[PARENT_ENV] = str(os.getpid())  # the work-horses it forks die with it in turn (jobs.drive)
    configure(f"slot{index}", node=node)  # level and format from the worker's environment
    settings = get_settings()  # read (and cached) before the variable below leaves the environment
    # The adviser's key stays in this process: experiments (tmux and the user's code) never inherit it.
    os.environ.pop("AJET_RUNNER_LLM_API_KEY", None)
    extra = settings.catalogue_extra
    if extra:
        use_extension(extra)  # checked by `ajet-runner worker` before it started the slots
    conn = redis.Redis.from_url(url, socket_timeout=None, health_check_interval=30)
    queues = [queue(conn, name) for name in queue_names(node)]
    worker = Worker(queues, connection=conn, serializer=JSONSerializer,
                    name=f"{node}.slot{index}.{uuid.uuid4().hex[:6]}")
    worker.work(logging_level="WARNING", with_scheduler=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
