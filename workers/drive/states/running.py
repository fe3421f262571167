"""Running: watch the attempt, let the rules propose, the machine decides.

What the loop does besides deciding — the lease, evaluations, progress reports, the log tail, the
watch metrics — are observers (`observers()`), called at fixed points of each tick and once when the
attempt ends.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ajet_runner.statemachine.lifecycle import EventType, Trigger
from ajet_runner.statemachine.logs.first_step import first_step_timeout_from_text
from ajet_runner.statemachine.logs.results import latest_metrics
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.policies import report_due_at
from ajet_runner.statemachine.rules import Observation, Proposal, RuleSchedule, SwarmServerRule
from ajet_runner.store.records import PendingRepair
from ajet_runner.workers.drive import gang_steps as gang
from ajet_runner.workers.drive.journal import HandedBack
from ajet_runner.workers.drive.queue_wait import QueueWait
from ajet_runner.workers.drive.watch_loop import LOOP
from ajet_runner.workers.executors.exit_cause import exit_record_problem
from ajet_runner.workers.executors.exit_wait import ExitWaiter
from ajet_runner.workers.executors.protocol import executor_lost, executor_notices
from ajet_runner.workers.repair.resume import keep_start_facts
from ajet_runner.workers.report.plot_preload import preload_plotting
from ajet_runner.workers.swarm.found_results import swarm_results_source
from ajet_runner.workers.swarm.server_watch import ServerWatch
from ajet_runner.workers.watching.scan_checkpoint import remove as remove_checkpoint
from ajet_runner.workers.watching.watch import CONSOLE_KEY, TRAIN_KEY, UNSCANNED_KEY, AttemptWatch, attempt_evaluations

if TYPE_CHECKING:
    from ajet_runner.workers.drive.seam import Drive


log = logging.getLogger(__name__)
LOG_TAIL_LINES = 200  # kept in Redis so the API can show a log without the node's filesystem
RESULTS_EVERY = 2.0  # seconds between looks at the results file while the command runs
LOG_TAIL_EVERY = 5.0  # seconds between log-tail updates, at most


@dataclass
class Tick:
    """One pass of the watch loop, as observers see it."""

    t0: float  # monotonic, at the start of the tick
    now: float  # wall clock, at the start of the tick
    started: float  # when the experiment started (wall clock)
    watch: AttemptWatch
    read_before: int  # the log bytes read before this tick
    alive: bool = True  # the command's process was alive at the start of the tick


class WatchObserver:
    """Hooks of the watch loop (dramatiq-middleware style); each does one cross-cutting job."""

    def before_tick(self, d: Drive, tick: Tick) -> None:
        """At the start of every tick, before anything is read."""

    def on_evaluations(self, d: Drive, tick: Tick, new: list[Any]) -> None:
        """New evaluations were read from the results file (or the log)."""

    def after_tick(self, d: Drive, tick: Tick) -> None:
        """After the tick's observation is made, before the rules decide."""

    def on_attempt_end(self, d: Drive, tick: Tick) -> None:
        """The rules ended the attempt (the process is stopped and its log read to the end)."""


class Lease(WatchObserver):
    """Keep the owner's lease alive (raises LostOwnership once it is gone), or give the run back
    (HandedBack) once the hosting process is stopping."""

    def before_tick(self, d: Drive, tick: Tick) -> None:
        if d.handback is not None and d.handback.is_set():
            tick.watch.maybe_save(tick.t0, force=True)  # the adopter goes on from exactly here
            raise HandedBack(f"{d.id}: the worker process is stopping")
        d.renew()


class Evaluations(WatchObserver):
    """Latest metrics on the record, one event per evaluation."""

    def on_evaluations(self, d: Drive, tick: Tick, new: list[Any]) -> None:
        _publish_evaluations(d, new)
        if tick.alive:  # the report's plot, drawn ahead in a thread (once the run ended, collecting draws it)
            d.plot_ahead.update(tick.watch.summary.evaluations)


class Progress(WatchObserver):
    """Progress events on a person's backoff cadence (docs/background.md#manual-workflow)."""

    def __init__(self) -> None:
        self.due: tuple[int, float] = (-1, 0.0)  # (reports sent, when the next is due): computed once per report

    def after_tick(self, d: Drive, tick: Tick) -> None:
        if self.due[0] != d.ctx.reports_sent:
            self.due = (d.ctx.reports_sent, report_due_at(d.ctx.reports_sent, d.backoff))
        if tick.now - tick.started >= self.due[1]:
            _maybe_report(d, tick.now - tick.started)


class LogTail(WatchObserver):
    """The log lines scanned since the last send, appended to the capped tail list in Redis (at most
    every LOG_TAIL_EVERY seconds, only when the log grew): never the whole tail again."""

    def __init__(self) -> None:
        self.next_at = 0.0
        self.sent = -1  # lines of this watch already in the list (-1: none: the first send replaces the list)

    def after_tick(self, d: Drive, tick: Tick) -> None:
        if tick.watch.bytes_read != tick.read_before and tick.t0 >= self.next_at:
            self.send(d, tick.watch)
            # On a grid shared by the process's runs: their journals send in one burst, not each on its own.
            self.next_at = (tick.t0 // LOG_TAIL_EVERY + 1) * LOG_TAIL_EVERY

    def on_attempt_end(self, d: Drive, tick: Tick) -> None:
        self.send(d, tick.watch)  # the last lines, read after the process ended

    def send(self, d: Drive, watch: AttemptWatch) -> None:
        total = watch.scanner.line_count
        new = total - self.sent if self.sent >= 0 else LOG_TAIL_LINES
        if new > 0:
            d.journal.append_tail(watch.scanner.tail(min(new, LOG_TAIL_LINES)), watch.bytes_read,
                                  replace=self.sent < 0 or new > LOG_TAIL_LINES)
        self.sent = total


class WatchMetrics(WatchObserver):
    """The worker's watch-loop metrics (workers/node/worker_metrics.py), through the driver's `on_watch` callback."""

    def after_tick(self, d: Drive, tick: Tick) -> None:
        if d.on_watch:
            w = tick.watch
            d.on_watch(d.id, time.monotonic() - tick.t0, w.bytes_read - tick.read_before, tick.now - w.last_output_at)


def observers() -> list[WatchObserver]:
    """A fresh set per attempt (LogTail keeps its own clock); called in this order at each hook."""
    return [Lease(), Evaluations(), Progress(), LogTail(), WatchMetrics()]


def handle(d: Drive) -> bool:
    assert d.handle is not None
    earlier = [a for a in d.ctx.attempts if a.number != d.lc.attempt]
    watch = d.watch = AttemptWatch(d.handle, Path(d.ctx.val_path) if d.ctx.val_path else None,
                                   val_start=d.ctx.val_start, earlier_log=attempt_evaluations(earlier),
                                   val_source=swarm_results_source(d.bp, d.ctx.swarm))
    watch.last_output_at = d.handle.started_at
    if watch.resume():  # an adopted run: go on where the last watcher saved, not from byte 0
        log.info("%s: log scan resumed at byte %d", d.id, watch.offset)
        d.journal.publish({"type": EventType.scan_resumed, "offset": watch.offset, "log_bytes": _log_size(watch),
                           "message": f"log scan resumed at byte {watch.offset}; the "
                           f"{max(0, _log_size(watch) - watch.offset)} bytes after it are scanned slice by slice"})
    d.server_watch = ServerWatch.of(d.runner, d.ctx.swarm)  # swarm mode: the server, beside the client
    preload_plotting()  # in the background: the plot at the end must not pay the import
    waiter = ExitWaiter()
    d.journal.on_cancel = waiter.wake
    try:
        return _watch(d, watch, waiter)
    finally:
        d.journal.on_cancel = None
        waiter.close()
        watch.close()


def _watch(d: Drive, watch: AttemptWatch, waiter: ExitWaiter) -> bool:
    """Ticks follow each other at once while the log has a backlog, else every poll interval — or at
    once when the command's process ends (pidfd) or a stop is announced. A quiet run's ticks are lent
    to the process's shared watch loop (workers/drive/watch_loop.py); the rest happen here."""
    passes = WatchPasses(d, watch, waiter)
    while not passes.tick():
        if passes.quiet():
            LOOP.run(passes.shared_tick, waiter, passes.next_due())
            if passes.proposal is not None:
                break
        elif not watch.behind:
            waiter.wait(_until_next_look(d, passes.started, time.time()))
    assert passes.proposal is not None and passes.last is not None
    _end_attempt(d, passes.proposal, passes.last.alive)
    for o in passes.hooks:
        o.on_attempt_end(d, passes.last)
    return True


class WatchPasses:
    """The watch loop's state from tick to tick; `tick()` is one pass: one bounded slice of the log, the
    results file, then every rule."""

    def __init__(self, d: Drive, watch: AttemptWatch, waiter: ExitWaiter) -> None:
        assert d.handle is not None
        self.d, self.watch, self.waiter = d, watch, waiter
        self.attempt_started = d.handle.started_at
        self.started = d.started_at or self.attempt_started
        self.queue = QueueWait.of(d)  # a scheduler's job: its wait in the queue moves both clocks
        self.clocks = (self.started + (self.queue.earlier(d) if self.queue else 0.0), self.attempt_started)
        self.hooks = observers()
        self.schedule = RuleSchedule(d.rules)  # each rule runs when its inputs changed or its deadline came
        self.local = not d.runner.remote()
        self.plain = d.gang is None and d.server_watch is None  # nothing but the run itself to look at
        self.first_step_timeout = first_step_timeout_from_text(d.bp.exp_max_time_text)
        self.next_results = 0.0
        self.gap = watch.resumed_from  # an adopted run: announce once the gap after the checkpoint is scanned
        self.gap_t0 = time.monotonic()
        self.proposal: Proposal | None = None
        self.last: Tick | None = None

    def quiet(self) -> bool:
        """Alive, its exit watched by a pidfd, its log caught up: a tick that cannot block or take long."""
        return (self.plain and self.local and self.waiter.watching and not self.watch.behind
                and self.last is not None and self.last.alive)

    def next_due(self) -> float:
        """The next tick (monotonic) on the poll interval's grid, so every lent run is ticked in one pass;
        sooner at the time limit."""
        now, wall = time.monotonic(), time.time()
        wait = _until_next_look(self.d, self.started, wall)
        every = self.d.settings.poll_interval
        if wait < every or every <= 0:
            return now + wait
        return (now // every + 1) * every

    def shared_tick(self) -> float | None:
        """A tick in the shared loop: the next one's due time, or None to give the run back to its thread."""
        if self.tick(shared=True) or not self.quiet():
            return None
        return self.next_due()

    def tick(self, shared: bool = False) -> bool:
        """One pass; True when a rule proposed an end (`proposal`) — or, `shared`, when the process was
        found ended (its driver's thread then waits for the exit code)."""
        d, watch = self.d, self.watch
        tick = Tick(t0=time.monotonic(), now=time.time(), started=self.started, watch=watch, read_before=0)
        for o in self.hooks:
            o.before_tick(d, tick)
        self._sync(tick)
        alive = self._alive()
        if shared and not alive:
            return True
        tick.alive = alive
        self.last = tick
        tick.read_before = watch.bytes_read
        watch.read_log(tick.now)
        watch.maybe_save(tick.t0)
        self._note_caught_up()
        self._look_for_evaluations(tick, alive)
        exit_code, exit_record_error = self._exit_facts(alive)
        obs = Observation(
            now=tick.now, started_at=self.started, attempt_started_at=self.attempt_started,
            max_seconds=d.bp.exp_max_time_seconds, process_alive=alive, exit_code=exit_code,
            cancel_requested=d.journal.cancel_requested(), last_output_at=watch.last_output_at,
            last_eval_at=watch.last_eval_at, completed_run=watch.scanner.completed_run,
            # While it runs, only a specific signature counts (a caught, logged traceback does not).
            cause=watch.scanner.live_cause if alive else watch.scanner.cause, cause_seen_at=watch.cause_seen_at,
            progress_after_cause=watch.scanner.progress_after_cause,
            evaluations=_primary_evaluations(d),
            first_step_seen=watch.first_step_seen,
            first_step_timeout=self.first_step_timeout,
            gang_problem=gang.problem(d),
            exit_record_error=exit_record_error,
            **_server_fields(d),
        )
        for o in self.hooks:
            o.after_tick(d, tick)
        self.proposal = self.schedule.decide(obs, d.lc.can)
        return self.proposal is not None

    def _sync(self, tick: Tick) -> None:
        """Bring a remote host's log and results over (with the executor's notices), and move the clocks on
        by the time the job waited in a scheduler's queue."""
        d = self.d
        assert d.handle is not None
        if not self.local:
            d.runner.sync(d.handle)  # a host that does not share our disk: bring its log and results over
            for note in executor_notices(d.runner):  # ssh: the link went away, came back
                d.journal.publish(note)
        if self.queue is not None:
            waited = self.queue.look(d)
            self.started, self.attempt_started = self.clocks[0] + waited, self.clocks[1] + waited
            tick.started = self.started

    def _alive(self) -> bool:
        """The pidfd says whether the process runs (checked against its start time when opened); psutil
        and the rc file only without one. The wrapper writes the rc only after the process ended."""
        d = self.d
        assert d.handle is not None
        alive = self.waiter.process_alive()
        if alive is None:
            alive = self.watch.alive(d.runner)
            if alive and self.local:
                self.waiter.watch(d.handle.pid, d.handle.pid_create_time)
        return alive

    def _note_caught_up(self) -> None:
        """After adopting a run, say once when the scan has caught up with the log."""
        watch = self.watch
        if self.gap is None or watch.behind:
            return
        self.d.journal.publish({
            "type": EventType.scan_caught_up, "from": self.gap, "to": watch.offset,
            "seconds": round(time.monotonic() - self.gap_t0, 3), "unscanned": list(watch.unscanned),
            "message": f"scanned bytes {self.gap}-{watch.offset} of the log after adopting the run"})
        self.gap = None

    def _look_for_evaluations(self, tick: Tick, alive: bool) -> None:
        """New evaluations feed slow rules (plateau, progress): looked for every RESULTS_EVERY s, and at the end."""
        if alive and tick.t0 < self.next_results:
            return
        new_evals = self.watch.read_results(tick.now)
        self.next_results = tick.t0 + RESULTS_EVERY
        if new_evals:
            for o in self.hooks:
                o.on_evaluations(self.d, tick, new_evals)

    def _exit_facts(self, alive: bool) -> tuple[int | None, str]:
        """An ended process's exit code and what is wrong with its exit record ("" when sound, or alive)."""
        if alive:
            return None, ""
        d, watch = self.d, self.watch
        assert d.handle is not None
        exit_code = watch.exit_code(d.runner)
        watch.finish_log(time.time())
        record = exit_record_problem(d.handle.rc_path, d.bp.exp_result_dir, d.roots)
        return exit_code, record.reason if record is not None else executor_lost(d.runner, d.handle)


def _log_size(watch: AttemptWatch) -> int:
    try:
        return os.stat(watch.handle.log_path).st_size
    except OSError:
        return 0


def _until_next_look(d: Drive, started: float, now: float) -> float:
    """The poll interval, cut short to wake right at the time limit (and at its grace's end): the
    exit, a stop request and a hand-back wake the loop by themselves (pidfd, pipe)."""
    wait = d.settings.poll_interval
    limit = d.bp.exp_max_time_seconds
    if limit and limit > 0:
        for at in (started + limit, started + limit + d.settings.time_limit_grace_seconds):
            if at > now:
                return min(wait, at - now + 0.01)
    return wait


def _server_fields(d: Drive) -> dict[str, Any]:
    """Swarm mode: the server's state for the Observation (the `swarm_server` rule decides)."""
    server = d.server_watch
    if server is None:
        return {}
    server.look()
    return {"server_alive": server.alive, "server_cause": server.cause,
            "server_last_line": "" if server.alive else server.last_line()}


def _primary_evaluations(d: Drive) -> list[Any]:
    """The primary dataset's evaluations: the same list object while the summary is the same (it is
    replaced when the results change), so the rules' inputs compare by identity, without a copy a tick."""
    assert d.watch is not None
    summary = d.watch.summary
    cached = d.watch.primary_cache
    if cached is not None and cached[0] is summary:
        return cached[1]
    primary = summary.primary_dataset
    evals = [e for e in summary.evaluations if not primary or e.dataset == primary]
    d.watch.primary_cache = (summary, evals)
    return evals


def _publish_evaluations(d: Drive, new: list[Any]) -> None:
    assert d.watch is not None
    metrics = latest_metrics(d.watch.summary)
    d.journal.update({"latest_metrics": metrics})
    for e in new:
        d.journal.publish({"type": EventType.evaluation, **e.to_json(), "attempt": d.lc.attempt})


def _maybe_report(d: Drive, elapsed: float) -> None:
    """Progress events on a person's backoff cadence (docs/background.md#manual-workflow): a log excerpt
    and the latest metrics."""
    if elapsed < report_due_at(d.ctx.reports_sent, d.backoff):
        return
    d.ctx.reports_sent += 1
    assert d.watch is not None
    d.journal.publish({
        "type": EventType.progress, "elapsed": round(elapsed, 1), "max_seconds": d.bp.exp_max_time_seconds,
        "log_excerpt": d.watch.scanner.tail(20), "metrics": latest_metrics(d.watch.summary),
    })


def _stop_or_exit_code(d: Drive, proposal: Proposal, alive: bool) -> int | None:
    """Stop a process still running (its exit code, None when processes survived); else its exit code."""
    assert d.handle is not None and d.watch is not None
    if not alive:
        return d.runner.exit_code(d.handle)
    exit_code = None
    grace = 2.0 if proposal.force_kill else d.settings.stop_grace_seconds
    try:
        exit_code = d.runner.stop(d.handle, grace)
    except RuntimeError as exc:  # ProcessesSurvived: record it, go on
        d.journal.publish({"type": EventType.warning, "message": f"stop left processes behind: {exc}"})
    d.watch.finish_log(time.time())
    return exit_code


def _close_attempt(d: Drive, exit_code: int | None, reason: str) -> None:
    """The attempt's record gets its end and what the watcher kept of its log."""
    assert d.watch is not None
    attempt = d.ctx.attempts[-1] if d.ctx.attempts else None
    if attempt is None:
        return
    attempt.ended_at, attempt.exit_code, attempt.end_reason = time.time(), exit_code, reason
    setattr(attempt, CONSOLE_KEY, d.watch.console_evaluations())
    setattr(attempt, TRAIN_KEY, d.watch.console_train_steps())
    setattr(attempt, UNSCANNED_KEY, list(d.watch.unscanned))
    keep_start_facts(attempt, d.watch.scanner.start)


def _end_attempt(d: Drive, proposal: Proposal, alive: bool) -> None:
    assert d.handle is not None and d.watch is not None
    # What the log said before we stopped it: our own SIGINT makes the job print a traceback.
    cause = proposal.finding or d.watch.scanner.cause
    exit_code = _stop_or_exit_code(d, proposal, alive)
    for gap in d.watch.unscanned:  # named, never silent: the report lists them too
        d.journal.publish({"type": EventType.unscanned, "attempt": d.lc.attempt, **gap,
                           "message": f"bytes {gap['start']}-{gap['end']} of the log were not scanned: "
                           f"{gap['reason']}"})
    remove_checkpoint(d.handle.log_path)
    d.cleanup_processes()
    d.cleaned_attempt = d.lc.attempt  # collecting need not scan the process table again
    gang.stop_members(d)  # a multi-node run: every other rank too
    _close_attempt(d, exit_code, proposal.reason)
    if proposal.trigger == Trigger.anomaly:
        d.ctx.pending_repair = PendingRepair(
            cause=cause.model_dump() if cause else None,
            reason=proposal.reason,
            log_excerpt=d.server_watch.excerpt() if proposal.rule == SwarmServerRule.name and d.server_watch
            else _excerpt(d, cause),
            log_tail=d.watch.scanner.tail(80),
        )
    detail: dict[str, Any] = {"rule": proposal.rule}
    if cause is not None:
        detail["signature"] = cause.signature
    d.fire(proposal.trigger, proposal.reason, **detail)


def _excerpt(d: Drive, cause: Finding | None) -> str:
    assert d.watch is not None
    return "\n".join(d.watch.scanner.tail(25 if cause is not None else 40))
