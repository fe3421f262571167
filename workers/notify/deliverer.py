"""The outbox's deliverer: a thread of every worker that handles due notifications (store/cluster/outbox.py).

- `experiment_finished`: checks whether the experiment's stage is now complete (which queues the stage's
  task), then posts the experiment's webhook — to the stage's own URL, else AJET_RUNNER_WEBHOOK_URL; none
  configured: nothing to post.
- `stage_finished`: writes the stage report into the stage's dir (when it has one; statemachine/comparison/compare.py
  and workers/report/stage_report.py), then posts the stage's webhook.

A failed POST is retried with backoff (2 s, doubling, capped) up to AJET_RUNNER_WEBHOOK_MAX_ATTEMPTS times,
then given up into the dead letters (`ajet:outbox:dead`, shown by `GET /v1/notifications/dead` and the
console's Notifications page); every attempt's result is an event of the experiment(s) concerned
(`webhook_delivered`, `webhook_failed`, `webhook_gave_up`). Nothing here touches an experiment's record: a
delivery that fails never changes an outcome. A task is held for a lease while it is handled: if this worker
dies, another (or this one restarted) takes it again, so a receiver may see a notification twice (same
`delivery` id).

One receiver never holds up another: the loop hands each task to a thread of its own, at most
AJET_RUNNER_WEBHOOK_CONCURRENCY at once, and at most one POST per receiver (scheme, host and port) is in
flight in this worker; a task for a receiver that is busy is put back for a moment, uncounted. Each POST has
one deadline for connect, send and read (workers/notify/webhook.py), so a receiver that never answers holds
one thread for that long, and every other receiver's deliveries go on meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from ajet_runner.resultdir.roots import confined, parse_roots
from ajet_runner.resultdir.stage_inputs import facts_for
from ajet_runner.statemachine.comparison.compare import compare
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.failures.redact import Redactor
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.cluster.outbox import EXPERIMENT_FINISHED, STAGE_FINISHED
from ajet_runner.store.cluster.stages import evaluation_events, note_report, stage_ids, stage_meta
from ajet_runner.store.connection import RedisTarget
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import REDIS_DOWN, Store
from ajet_runner.workers.notify.payloads import experiment_payload, stage_payload
from ajet_runner.workers.notify.webhook import Delivery, post_json, shown_url
from ajet_runner.workers.report.stage_report import write_stage_report

log = logging.getLogger(__name__)
LEASE_SECONDS = 120.0  # a task being handled; longer than a POST's timeout and a report's drawing
FIRST_BACKOFF = 2.0
DRAIN_SECONDS = 5.0  # on shutdown: what is due now still gets its chance
IDLE_BACKOFF = 4  # an idle deliverer looks every 1, 2, 4, 4 ... x outbox_poll_seconds
BUSY_RETRY_SECONDS = 0.5  # a task whose receiver has a POST in flight here: due again this soon (not an attempt)
REDIS_ERRORS = REDIS_DOWN


class ReceiverBusy(Exception):
    """This worker has a POST to the same receiver in flight: the task waits its turn."""


def receiver_of(url: str) -> str:
    """What one receiver is: scheme, host and port (paths on one server share its connection slots)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port or ''}"


def worker_redactor(settings: Settings, redis_url: RedisTarget | str = "") -> Redactor:
    """A redactor that knows this worker's own secrets: every secret-named variable of its environment (the API
    token, the webhook secret, the adviser key, ...), the webhook secret as set, and the Redis password."""
    extra = [settings.webhook_secret.get_secret_value(), settings.redis_password.get_secret_value()]
    if isinstance(redis_url, RedisTarget):
        extra.append(redis_url.password)
        redis_url = redis_url.url
    with contextlib.suppress(ValueError):
        extra.append(urlsplit(redis_url or settings.redis_url).password or "")
    return Redactor(envs=[dict(os.environ)], extra=extra)


class Deliverer:
    def __init__(self, store: Store, settings: Settings, node: str = "", transport: Any = None,
                 redactor: Redactor | None = None) -> None:
        self.store = store
        self.settings = settings
        self.node = node
        self.outbox = store.outbox()
        self.transport = transport  # tests: an httpx async transport instead of the network
        self.roots = parse_roots(settings.allowed_roots)
        self.redact = (redactor or worker_redactor(settings)).text
        self._slots = threading.BoundedSemaphore(settings.webhook_concurrency)
        self._lock = threading.Lock()
        self._posting: set[str] = set()  # receivers with a POST in flight in this worker
        self._threads: set[threading.Thread] = set()

    # -- the loop ------------------------------------------------------------------------------------------
    def run(self, stopping: threading.Event) -> None:
        """Take due tasks while a delivery slot is free, each handled in a thread of its own. Looks every
        `outbox_poll_seconds` while there is work; each look that finds nothing doubles the wait, up to
        IDLE_BACKOFF times it (an idle worker's Redis commands are few, bench_redis_traffic.py)."""
        wait = self.settings.outbox_poll_seconds
        while not stopping.is_set():
            if not self._slots.acquire(timeout=self.settings.outbox_poll_seconds):
                continue  # every slot busy: what is due waits here, or another worker takes it
            got = self._claim()
            if got is None:
                self._slots.release()
                stopping.wait(wait)
                wait = min(wait * 2, self.settings.outbox_poll_seconds * IDLE_BACKOFF)
                continue
            wait = self.settings.outbox_poll_seconds
            thread = threading.Thread(target=self._in_slot, args=got, name=f"outbox-{got[0][:8]}", daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline and self.step():
            pass
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def _in_slot(self, task_id: str, task: dict[str, Any]) -> None:
        try:
            self._handle_safely(task_id, task)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())
            self._slots.release()

    def _claim(self) -> tuple[str, dict[str, Any]] | None:
        # held longer than one POST may take, so no other worker takes it while it is being posted
        lease = max(LEASE_SECONDS, self.settings.webhook_timeout_seconds + 60)
        try:
            return self.outbox.claim(lease)
        except REDIS_ERRORS as exc:
            log.warning("outbox: Redis unreachable (%s)", exc)
            return None

    def step(self) -> bool:
        """Handle one due task here and now; False when none was due (or Redis is away)."""
        got = self._claim()
        if got is None:
            return False
        self._handle_safely(*got)
        return True

    def _handle_safely(self, task_id: str, task: dict[str, Any]) -> None:
        try:
            self.handle(task_id, task)
        except ReceiverBusy:
            with contextlib.suppress(*REDIS_ERRORS):  # else the lease runs out and the task is taken again
                self.outbox.later(task_id, task, BUSY_RETRY_SECONDS)
        except REDIS_ERRORS as exc:  # the lease runs out and the task is taken again
            log.warning("outbox: Redis lost while handling %s (%s); it is retried", task_id, exc)
        except Exception as exc:  # a bug must not stop every later notification
            log.exception("outbox: task %s (%s) failed", task_id, task.get("kind"))
            self._later(task_id, task, f"internal error: {type(exc).__name__}: {exc}")

    def handle(self, task_id: str, task: dict[str, Any]) -> None:
        kind = task.get("kind")
        if kind == EXPERIMENT_FINISHED:
            self._experiment(task_id, task)
        elif kind == STAGE_FINISHED:
            self._stage(task_id, task)
        else:
            self.outbox.give_up(task_id, task, f"unknown task kind {kind!r}")

    # -- the two kinds -------------------------------------------------------------------------------------
    def _experiment(self, task_id: str, task: dict[str, Any]) -> None:
        exp_id = str(task.get("id") or "")
        rec = self.store.records.raw(exp_id)
        if rec is None:
            self.outbox.done(task_id)  # deleted meanwhile: nobody left to tell about
            return
        stage = str(rec.get("stage") or "")
        if stage and not task.get("stage_checked"):
            self.outbox.check_stage(stage)  # idempotent: once per membership
            task["stage_checked"] = True
        url = self._url(stage)
        if not url:
            self.outbox.done(task_id)
            return
        result = self._post(url, experiment_payload(rec, str(task.get("delivery") or task_id), self.redact))
        self._settle(task_id, task, result, url, [exp_id])

    def _stage(self, task_id: str, task: dict[str, Any]) -> None:
        stage = str(task.get("stage") or "")
        meta = stage_meta(self.store, stage)
        records = self.store.records.all(stage_ids(self.store, stage))
        ids = [str(r.get("id")) for r in records]
        if meta.get("dir") and not task.get("report_done") and not self._report(
                task_id, task, stage, meta["dir"], records, ids):
            return  # due again later
        url = self._url(stage, meta)
        if not url:
            self.outbox.done(task_id)
            return
        payload = stage_payload(stage, meta, records, str(task.get("delivery") or task_id), task.get("report"),
                                redact=self.redact)
        result = self._post(url, payload)
        self._settle(task_id, task, result, url, ids, what="stage")

    def _post(self, url: str, payload: dict[str, Any]) -> Delivery:
        """One POST, unless this worker has one to the same receiver in flight (ReceiverBusy)."""
        receiver = receiver_of(url)
        with self._lock:
            if receiver in self._posting:
                raise ReceiverBusy(receiver)
            self._posting.add(receiver)
        try:
            return post_json(url, payload, secret=self._secret(), timeout=self.settings.webhook_timeout_seconds,
                             transport=self.transport, allow_http=self.settings.webhook_allow_http)
        finally:
            with self._lock:
                self._posting.discard(receiver)

    def _report(self, task_id: str, task: dict[str, Any], stage: str, directory: str,
                records: list[dict[str, Any]], ids: list[str]) -> bool:
        """Write the stage report; False when it failed and the task is due again."""
        try:
            facts = facts_for(records, lambda exp_id: evaluation_events(self.store, exp_id))
            with confined(self.roots):
                written = write_stage_report(directory, compare(stage, facts))
        except OSError as exc:
            tries = int(task.get("report_attempts") or 0) + 1
            why = f"{type(exc).__name__}: {exc}"[:300]
            task["report_attempts"] = tries
            if tries < self.settings.webhook_max_attempts:
                self._publish(ids, {"type": EventType.stage_report_failed, "stage": stage, "dir": directory,
                                    "error": why, "attempt": tries, "retry_in": self._delay(tries)})
                self.outbox.later(task_id, task, self._delay(tries))
                return False
            note_report(self.store, stage, error=why)
            self._publish(ids, {"type": EventType.stage_report_failed, "stage": stage, "dir": directory, "error": why,
                                "attempt": tries, "message": "given up: the stage report was not written"})
            task["report_done"] = True
            return True
        task["report_done"], task["report"] = True, str(written["report"])
        note_report(self.store, stage, written=str(written["report"]))
        self._publish(ids, {"type": EventType.stage_report, "stage": stage, "path": str(written["report"]),
                            "message": f"stage report written: {written['report']}"})
        return True

    # -- outcomes of a POST ---------------------------------------------------------------------------------
    def _settle(self, task_id: str, task: dict[str, Any], result: Delivery, url: str, ids: list[str],
                what: str = "experiment") -> None:
        attempt = int(task.get("attempts") or 0) + 1
        common = {"kind": task.get("kind"), "delivery": task.get("delivery") or task_id, "url": shown_url(url),
                  "attempt": attempt, **({"stage": task.get("stage")} if what == "stage" else {})}
        if result.ok:
            self._publish(ids, {"type": EventType.webhook_delivered, **common, "status": result.status,
                                "message": f"{task.get('kind')} posted to {shown_url(url)} (HTTP {result.status})"})
            self.outbox.done(task_id)
            return
        task["attempts"], task["last_error"] = attempt, result.error
        task["url"] = shown_url(url)  # for the dead letters: where it was going (no credentials)
        if attempt >= self.settings.webhook_max_attempts or result.final:
            self._publish(ids, {"type": EventType.webhook_gave_up, **common, "error": result.error,
                                "message": f"{task.get('kind')} not delivered to {shown_url(url)} after {attempt} "
                                           f"attempt(s): {result.error}"})
            self.outbox.give_up(task_id, task, result.error)
            return
        delay = self._delay(attempt)
        self._publish(ids, {"type": EventType.webhook_failed, **common, "error": result.error, "retry_in": delay,
                            "message": f"{task.get('kind')} to {shown_url(url)} failed ({result.error}); "
                                       f"retried in {format_limit(delay)}"})
        self.outbox.later(task_id, task, delay)

    def _later(self, task_id: str, task: dict[str, Any], why: str) -> None:
        attempt = int(task.get("attempts") or 0) + 1
        task["attempts"], task["last_error"] = attempt, why
        try:
            if attempt >= self.settings.webhook_max_attempts:
                self.outbox.give_up(task_id, task, why)
            else:
                self.outbox.later(task_id, task, self._delay(attempt))
        except REDIS_ERRORS:
            pass  # the lease runs out and the task is taken again

    def _delay(self, attempt: int) -> float:
        return float(min(self.settings.webhook_backoff_cap_seconds, FIRST_BACKOFF * 2 ** max(0, attempt - 1)))

    def _publish(self, ids: list[str], event: dict[str, Any]) -> None:
        for exp_id in ids:
            if self.store.records.exists(exp_id):  # never a stream for a record that is gone
                self.store.events.publish(exp_id, event)

    def _url(self, stage: str, meta: dict[str, str] | None = None) -> str:
        if stage:
            own = (meta if meta is not None else stage_meta(self.store, stage)).get("webhook_url") or ""
            if own:
                return own
        return self.settings.webhook_url.strip()

    def _secret(self) -> str:
        return self.settings.webhook_secret.get_secret_value()


def start_deliverer(settings: Settings, redis_url: RedisTarget | str, node: str,
                    stopping: threading.Event) -> threading.Thread:
    """The deliverer in a daemon thread of this process, until `stopping` is set."""
    store = Store.from_url(redis_url, health_check_interval=10, socket_timeout=30)
    deliverer = Deliverer(store, settings, node, redactor=worker_redactor(settings, redis_url))
    thread = threading.Thread(target=deliverer.run, args=(stopping,), name="outbox", daemon=True)
    thread.start()
    return thread
