"""An RQ worker whose slots are threads: it pops a job only while a slot is free and runs it in a thread.

RQ's forking `Worker` needs a Python process per slot and forks a work-horse per job: ~77 MB PSS
and 0.29 % of a core per watched run (bench/bench_per_run.py). Our jobs mostly wait (a driver watches a run for
hours), so one process holds them all. The bookkeeping stays RQ's own (`prepare_execution`,
`perform_job`: started registry, job status, results, failures); RQ 3 keeps several executions
per worker. What changes:

- the dequeue loop takes a slot first and gives it back when the popped job's thread ends, so a
  node never takes more jobs than its slots;
- a node that is drained (`paused()`), or a stop request, is seen within DEQUEUE_SECONDS while idle; the
  drain is read when a job is popped (a drained node puts it back at the head of its queue, then reads
  the drain every DEQUEUE_SECONDS until it ends), so an idle worker's only poll is its BLPOP;
- RQ's job timeout is a no-op: its SIGALRM works only in the main thread, and our own rules
  (time limit, stall, cancel) end every run long before the job timeout would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rq.exceptions import DequeueTimeout, StopRequested
from rq.job import Job
from rq.queue import Queue
from rq.timeouts import BaseDeathPenalty
from rq.worker import SimpleWorker, WorkerStatus

from ajet_runner.statemachine.durations import format_duration
from ajet_runner.store.store import REDIS_DOWN
from ajet_runner.workers.node.job_guard import GuardedJob, refusal

log = logging.getLogger(__name__)

DEQUEUE_SECONDS = 2  # BLPOP timeout: how soon an idle worker sees a drain or a stop
HEARTBEAT_SECONDS = 10.0  # RQ's worker key lives worker_ttl + 60 s after each beat
MAX_RETRY_SECONDS = 5.0  # longest wait between tries while Redis is unreachable (a stop is seen after it)
RQ_TTL_MARGIN = 15  # RQ's dequeue timeout is worker_ttl - 15


class NoDeathPenalty(BaseDeathPenalty):
    """No RQ job timeout (see the module docstring)."""

    def setup_death_penalty(self) -> None:
        pass

    def cancel_death_penalty(self) -> None:
        pass


class SlotWorker(SimpleWorker):
    death_penalty_class = NoDeathPenalty
    job_class = GuardedJob  # only ajet-runner's own job functions are ever resolved (workers/node/job_guard.py)

    def __init__(self, queues: Sequence[Queue], *, slots: int, paused: Callable[[], bool] = lambda: False,
                 on_stop: Callable[[], None] = lambda: None, **kwargs: Any) -> None:
        super().__init__(queues, worker_ttl=DEQUEUE_SECONDS + RQ_TTL_MARGIN, **kwargs)
        self.slots = slots
        self.paused = paused
        self.on_stop = on_stop  # told at once, so running jobs can wind down while the loop ends
        self._free = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    # -- what runs now -----------------------------------------------------------------------
    def running(self) -> list[str]:
        with self._lock:
            return list(self._threads)

    def join(self, timeout: float) -> list[str]:
        """Wait up to `timeout` s for every job thread to end; the ids of those still running."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads.values())
            if not threads or time.monotonic() >= deadline:
                return self.running()
            threads[0].join(max(0.01, min(0.5, deadline - time.monotonic())))

    def _beat(self, beat_at: float) -> float:
        """The heartbeat when due (the next one's time returned) and RQ's maintenance when it asks for it."""
        if time.monotonic() >= beat_at:
            self.heartbeat()
            beat_at = time.monotonic() + HEARTBEAT_SECONDS
        if self.should_run_maintenance_tasks:
            self.run_maintenance_tasks()
        return beat_at

    def _mark_idle(self) -> None:
        """IDLE while waiting with no job running (BUSY is set by prepare_execution)."""
        if not self.running() and self.get_state() != WorkerStatus.IDLE:
            self.set_state(WorkerStatus.IDLE)

    def _handed_back(self, job: Job, queue: Queue) -> bool:
        """A popped job this worker must not take goes back to the front of its queue (its slot freed): on a
        stop that came while BLPOP waited (StopRequested: the job is the next worker's), or a drain (True).
        The drain is read once a job is popped, not before every BLPOP."""
        if self._stop_requested:
            queue.push_job_id(job.id, at_front=True)
            self._free.release()
            raise StopRequested
        if self._drained_now():
            queue.push_job_id(job.id, at_front=True)
            self._free.release()
            return True
        return False

    # -- RQ hooks ----------------------------------------------------------------------------
    def dequeue_job_and_maintain_ttl(self, timeout: int | None,
                                     max_idle_time: int | None = None) -> tuple[Job, Queue] | None:
        """Pop a job once a slot is free and the node takes work; StopRequested once a stop was asked."""
        wait_s, beat_at = 1.0, 0.0
        held = False  # the last look found the node drained (then the drain is read before each pop)
        while True:
            if self._stop_requested:
                raise StopRequested
            beat_at = self._beat(beat_at)
            if not self._free.acquire(timeout=DEQUEUE_SECONDS):
                continue  # every slot busy
            popped = None
            try:
                if held and self.paused():  # drained: look again later, take nothing meanwhile
                    time.sleep(DEQUEUE_SECONDS)
                    continue
                held = False
                self._mark_idle()
                popped = self.queue_class.dequeue_any(
                    self._ordered_queues, DEQUEUE_SECONDS, connection=self.connection, job_class=self.job_class,
                    serializer=self.serializer, death_penalty_class=self.death_penalty_class)
                wait_s = 1.0
            except DequeueTimeout:
                continue
            except REDIS_DOWN as exc:
                log.warning("redis unreachable while waiting for a job (retrying in %s): %s",
                            format_duration(wait_s), exc)
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, MAX_RETRY_SECONDS)
                continue
            finally:
                if popped is None:
                    self._free.release()
            if popped is not None:
                job, queue = popped
                if self._handed_back(job, queue):
                    held = True
                    continue
                self.reorder_queues(reference_queue=queue)
                log.info("%s: %s from %s", self.name, job.id, queue.name)
                return popped

    def _drained_now(self) -> bool:
        try:
            return self.paused()
        except REDIS_DOWN:
            return False  # the job's own start meets the same outage

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Mark it started here (before the next pop), then perform it in a thread of its own. A foreign job
        goes the same way and fails in RQ's bookkeeping without being resolved (GuardedJob)."""
        why = refusal(job)
        if why:
            log.warning("%s: refusing a queued job from %s: %s", self.name, queue.name, why)
        try:
            execution = self.prepare_execution(job)
        except REDIS_DOWN as exc:  # popped, never started: the node's supervisor queues it again
            log.warning("job %s popped but not started (redis unreachable: %s)", job.id, exc)
            self._free.release()
            return
        thread = threading.Thread(target=self._perform, args=(job, queue, execution), daemon=True,
                                  name=f"job-{job.id}")
        with self._lock:
            self._threads[job.id] = thread
        thread.start()

    def _perform(self, job: Job, queue: Queue, execution: Any) -> None:
        try:
            self.perform_job(job, queue, execution)
        except Exception:  # perform_job records a job's own failure; this is RQ bookkeeping failing
            log.exception("job %s: RQ bookkeeping failed", job.id)
        finally:
            with self._lock:
                self._threads.pop(job.id, None)
            self._free.release()

    def _shutdown(self) -> None:
        """A stop (SIGTERM/SIGINT in the main thread): busy or not, the dequeue loop ends; the owner
        (workers/node/watcher.py) has the running drivers hand their runs back."""
        self._stop_requested = True
        self.on_stop()
        if not self.running():
            raise StopRequested

    # A Redis outage must not end the worker loop (RQ quits on any error there): every run of this
    # node is driven by this process, and its drivers ride the outage out (workers/drive/journal.py).
    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        try:
            super().heartbeat(timeout, pipeline)
        except REDIS_DOWN as exc:
            log.debug("heartbeat not sent: %s", exc)

    def check_for_suspension(self, burst: bool) -> None:
        try:
            super().check_for_suspension(burst)
        except REDIS_DOWN as exc:
            log.debug("suspension not checked: %s", exc)

    def run_maintenance_tasks(self) -> None:
        try:
            super().run_maintenance_tasks()
        except REDIS_DOWN as exc:
            log.debug("maintenance skipped: %s", exc)

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            super()._install_signal_handlers()
