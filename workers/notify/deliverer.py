"""The outbox's deliverer: a thread of every worker that handles due notifications (store/outbox.py).

- `experiment_finished`: checks whether the experiment's stage is now complete (which queues the stage's
  task), then posts the experiment's webhook — to the stage's own URL, else AJET_RUNNER_WEBHOOK_URL; none
  configured: nothing to post.
- `stage_finished`: writes the stage report into the stage's dir (when it has one; statemachine/compare.py
  and workers/report/stage_report.py), then posts the stage's webhook.

A failed POST is retried with backoff (2 s, doubling, capped) up to AJET_RUNNER_WEBHOOK_MAX_ATTEMPTS times,
then given up; every attempt's result is an event of the experiment(s) concerned (`webhook_delivered`,
`webhook_failed`, `webhook_gave_up`). Nothing here touches an experiment's record: a delivery that fails
never changes an outcome. A task is held for a lease while it is handled: if this worker dies, another
(or this one restarted) takes it again, so a receiver may see a notification twice (same `delivery` id).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx

from ajet_runner.resultdir.roots import confined, parse_roots
from ajet_runner.resultdir.stage_inputs import facts_for
from ajet_runner.statemachine.compare import compare
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.connection import RedisTarget
from ajet_runner.store.outbox import EXPERIMENT_FINISHED, STAGE_FINISHED
from ajet_runner.store.settings import Settings
from ajet_runner.store.stages import evaluation_events, note_report, stage_ids, stage_meta
from ajet_runner.store.store import REDIS_DOWN, Store
from ajet_runner.workers.notify.payloads import experiment_payload, stage_payload
from ajet_runner.workers.notify.webhook import Delivery, post_json, shown_url
from ajet_runner.workers.report.stage_report import write_stage_report

log = logging.getLogger(__name__)
LEASE_SECONDS = 120.0  # a task being handled; longer than a POST's timeout and a report's drawing
FIRST_BACKOFF = 2.0
DRAIN_SECONDS = 5.0  # on shutdown: what is due now still gets its chance
IDLE_BACKOFF = 4  # an idle deliverer looks every 1, 2, 4, 4 ... x outbox_poll_seconds
REDIS_ERRORS = REDIS_DOWN


class Deliverer:
    def __init__(self, store: Store, settings: Settings, node: str = "",
                 transport: httpx.BaseTransport | None = None) -> None:
        self.store = store
        self.settings = settings
        self.node = node
        self.outbox = store.outbox()
        self.transport = transport  # tests: a mounted transport instead of the network
        self.roots = parse_roots(settings.allowed_roots)

    # -- the loop ------------------------------------------------------------------------------------------
    def run(self, stopping: threading.Event) -> None:
        """Look every `outbox_poll_seconds` while there is work; each look that finds nothing doubles the
        wait, up to IDLE_BACKOFF times it (an idle worker's Redis commands are few, bench_redis_traffic.py)."""
        wait = self.settings.outbox_poll_seconds
        while not stopping.is_set():
            if self.step():
                wait = self.settings.outbox_poll_seconds
                continue
            stopping.wait(wait)
            wait = min(wait * 2, self.settings.outbox_poll_seconds * IDLE_BACKOFF)
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline and self.step():
            pass

    def step(self) -> bool:
        """Handle one due task; False when none was due (or Redis is away)."""
        try:
            got = self.outbox.claim(LEASE_SECONDS)
        except REDIS_ERRORS as exc:
            log.warning("outbox: Redis unreachable (%s)", exc)
            return False
        if got is None:
            return False
        task_id, task = got
        try:
            self.handle(task_id, task)
        except REDIS_ERRORS as exc:  # the lease runs out and the task is taken again
            log.warning("outbox: Redis lost while handling %s (%s); it is retried", task_id, exc)
        except Exception as exc:  # a bug must not stop every later notification
            log.exception("outbox: task %s (%s) failed", task_id, task.get("kind"))
            self._later(task_id, task, f"internal error: {type(exc).__name__}: {exc}")
        return True

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
        rec = self.store.get(exp_id)
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
        result = post_json(url, experiment_payload(rec, str(task.get("delivery") or task_id)),
                           secret=self._secret(), timeout=self.settings.webhook_timeout_seconds,
                           transport=self.transport)
        self._settle(task_id, task, result, url, [exp_id])

    def _stage(self, task_id: str, task: dict[str, Any]) -> None:
        stage = str(task.get("stage") or "")
        meta = stage_meta(self.store, stage)
        records = self.store.all(stage_ids(self.store, stage))
        ids = [str(r.get("id")) for r in records]
        if meta.get("dir") and not task.get("report_done") and not self._report(
                task_id, task, stage, meta["dir"], records, ids):
            return  # due again later
        url = self._url(stage, meta)
        if not url:
            self.outbox.done(task_id)
            return
        payload = stage_payload(stage, meta, records, str(task.get("delivery") or task_id), task.get("report"))
        result = post_json(url, payload, secret=self._secret(), timeout=self.settings.webhook_timeout_seconds,
                           transport=self.transport)
        self._settle(task_id, task, result, url, ids, what="stage")

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
        if attempt >= self.settings.webhook_max_attempts:
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
            if self.store.exists(exp_id):  # never a stream for a record that is gone
                self.store.publish(exp_id, event)

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
    thread = threading.Thread(target=Deliverer(store, settings, node).run, args=(stopping,), name="outbox",
                              daemon=True)
    thread.start()
    return thread
