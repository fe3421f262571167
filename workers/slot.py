"""One RQ worker process of a node: serves the node's own queue first, then the shared one.

Run by the node supervisor as `python -m workers.slot REDIS_URL NODE INDEX`. The forking RQ
worker heartbeats while a long job runs; the job itself (the experiment driver) runs in RQ's
work-horse process.
"""

from __future__ import annotations

import sys
import uuid

import redis
from rq import Worker
from rq.serializers import JSONSerializer

from logsetup import configure
from workers.jobs import queue
from workers.node import queue_names


def main(argv: list[str]) -> int:
    url, node, index = argv[1], argv[2], argv[3]
    configure(f"slot{index}", node=node)  # level and format from the worker's environment
    conn = redis.Redis.from_url(url, socket_timeout=None, health_check_interval=30)
    queues = [queue(conn, name) for name in queue_names(node)]
    worker = Worker(queues, connection=conn, serializer=JSONSerializer,
                    name=f"{node}.slot{index}.{uuid.uuid4().hex[:6]}")
    worker.work(logging_level="WARNING", with_scheduler=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
