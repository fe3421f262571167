"""Only ajet-runner's own job functions run: a queued job that names anything else is refused, never imported.

Whoever can write to Redis can queue a job, and RQ resolves a job's function by importing the dotted name
the job carries (`os.system`, `subprocess.call`, ...) and calling it with the job's arguments, as the user
the worker runs as. So the name is checked as text against the allow-list *before* RQ resolves it: a job
naming anything else fails with `ForeignJob` (RQ records it in the failed registry, we log it) and nothing
of it is imported or called. The same goes for what else a job can make a worker import or contact: its
success, failure and stopped callbacks and RQ's own per-job webhooks (ajet-runner uses none of them).
Jobs queued under the names used before the package rename still run, as the function they name now.
AJET_RUNNER_EXTRA_JOB_FUNCTIONS names more functions, exactly (tests, site extensions): it is read from the
worker's own environment, which can run anything already (PYTHONPATH, the repair hook), so it opens nothing
to whoever can only write to Redis.
"""

from __future__ import annotations

import logging
from typing import Any

from rq.job import Job
from rq.utils import import_attribute

from ajet_runner.store.per_experiment.queue import DRIVE_JOB, LEGACY_JOB_NAMES, RANK_JOB
from ajet_runner.store.settings import get_settings

log = logging.getLogger(__name__)

ALLOWED_JOBS = frozenset({DRIVE_JOB, RANK_JOB})


def allowed_jobs() -> frozenset[str]:
    """ajet-runner's own job functions and the operator's extra ones."""
    extra = get_settings().extra_job_functions
    return ALLOWED_JOBS | {name.strip() for name in extra.split(",") if name.strip()}


class ForeignJob(RuntimeError):
    """A queued job that names a function ajet-runner does not run."""


def refusal(job: Job) -> str:
    """Why `job` must not run ("" when it is one of ours). Reads names only: nothing is imported."""
    try:
        name, instance = job.func_name or "", job.instance
    except Exception as exc:  # noqa: BLE001 - e.g. rq's DeserializationError: not JSON (a pickle)
        return f"job {job.id} cannot be read as a JSON job ({type(exc).__name__})"
    name = LEGACY_JOB_NAMES.get(name, name)
    allowed = allowed_jobs()
    if name not in allowed:
        ours = ", ".join(sorted(allowed))
        return f"job {job.id} names {name!r}, not one of ajet-runner's job functions ({ours})"
    if instance is not None:
        return f"job {job.id} names a method of an object, not ajet-runner's {name}"
    extras = [what for what, attr in (("success callback", "_success_callback_name"),
                                      ("failure callback", "_failure_callback_name"),
                                      ("stopped callback", "_stopped_callback_name"),
                                      ("RQ webhooks", "webhooks"))  # rq 3's per-job webhooks
              if getattr(job, attr, None)]
    if extras:
        return f"job {job.id} carries {', '.join(extras)}, which ajet-runner's jobs never have"
    return ""


class GuardedJob(Job):
    """RQ's job, resolving its function only after `refusal` found nothing (the worker's `job_class`)."""

    @property
    def func(self) -> Any:
        why = refusal(self)
        if why:
            log.warning("refused (not run, nothing imported): %s", why)
            raise ForeignJob(why)
        name = self.func_name or ""
        return import_attribute(LEGACY_JOB_NAMES.get(name, name))

    # What a refused job carries is never resolved either (a refused job still goes through RQ's failure path).
    @property
    def success_callback(self) -> Any:
        return None

    @property
    def failure_callback(self) -> Any:
        return None

    @property
    def stopped_callback(self) -> Any:
        return None

    def send_webhooks(self, status: Any, *, exc_string: str | None = None) -> None:
        return None
