"""`python -m ajet_runner.workers.drive.cancel_queued EXP_ID`: finish a queued experiment as cancelled, never launched.

The API runs this in a child process when a queued experiment is stopped, so the API never loads
the driver (nor libtmux, psutil). It is the ordinary driver: it sees the cancel flag in `queued`,
claims the record with a compare-and-set, writes the report and `finish.flag`. If a worker claimed
the experiment first the claim fails, and that worker (which honours the flag in every state)
finishes it instead.

The settings come as JSON on stdin (the API's, which may differ from this process's environment).
Exit status: 0 finished here or by a worker; 3 the result dir could not be written (message on stderr).
"""

from __future__ import annotations

import json
import logging
import os
import sys

from ajet_runner.store.connection import need_target
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store, TransitionConflict
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.drive.journal import LostOwnership
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.node.lifeline import keep_environment_private

log = logging.getLogger(__name__)
EXIT_WRITE_FAILED = 3


def finish_cancelled(exp_id: str, settings: Settings, node_name: str) -> None:
    """Drive the experiment once from here (its cancel flag is set). OSError: its result dir is not writable."""
    store = Store.from_url(need_target(settings))  # REDIS_URL or the sentinels
    node = NodeInfo(name=node_name or "api", gpus=0, slots=1)
    try:
        ExperimentDriver(store, exp_id, settings, node, owner=f"api/{os.getppid()}/{os.getpid()}").run()
    except (TransitionConflict, LostOwnership, LookupError) as exc:
        log.info("%s: a worker took it first (%s); it finishes it as cancelled", exp_id, exc)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m ajet_runner.workers.drive.cancel_queued EXP_ID NODE  (settings as JSON on stdin)",
              file=sys.stderr)
        return 2
    keep_environment_private()  # the settings it reads hold the Redis password
    settings = Settings(**json.loads(sys.stdin.read() or "{}"))
    try:
        finish_cancelled(argv[0], settings, argv[1])
    except OSError as exc:
        print(f"could not finish {argv[0]} as cancelled here: {exc}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
