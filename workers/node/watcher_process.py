"""Starting the node's watcher process (workers/node/watcher.py), kept apart from the supervisor so that
`ajet-runner worker` can start it before it imports the supervisor: the two processes' imports overlap,
and a restarted worker's watcher is ready to re-adopt the node's runs about a second sooner."""

from __future__ import annotations

import os
import subprocess
import sys

from ajet_runner.store.clients import RedisTarget
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.node.lifeline import PARENT_ENV


def spawn_watcher(node: NodeInfo, redis: RedisTarget | str) -> subprocess.Popen[bytes]:
    # REDIS_URL or the sentinels (a password included) and every token go through the environment, never the
    # command line: /proc/<pid>/cmdline (ps) is readable by every user of the node, the environment is not.
    target = redis if isinstance(redis, RedisTarget) else RedisTarget(url=redis)
    env = {**os.environ, "AJET_RUNNER_NODE": node.name, "AJET_RUNNER_GPUS": str(node.gpus),
           "AJET_RUNNER_SLOTS": str(node.slots), **target.env(),
           PARENT_ENV: str(os.getpid())}  # the watcher dies with this process (PR_SET_PDEATHSIG)
    return subprocess.Popen([sys.executable, "-m", "ajet_runner.workers.node.watcher", node.name, str(node.slots)],
                            env=env)
