"""Observes one running attempt: the process, new log bytes, the validation file.

Cheap enough to call every half second: the log is read incrementally from the last offset
(constant memory on a multi-GB log), at most one bounded slice per call so the rules are never
starved by a fast writer, and the validation file is parsed only when it changed. The scanner's
state is checkpointed beside the log (every few MB and every few seconds), so a worker adopting
the run goes on from there and scans the gap the same way, slice by slice. No byte of a live log
is skipped; what an ended attempt leaves unread (a backlog read only at its end) is named, range
and reason, in `unscanned`.

Only this run's results count: a validation file that already held an earlier run's lines
at launch is read from the size it had then (`FileStart`); a file replaced or truncated
since is read from its start. Console validation lines (`Initial/Final validation
metrics`, verl's `step:N - key:value - ...` validation rows) fill the steps the file lacks, so a
run of an AgentJet that writes no results file still has evaluations (and can plateau); its
training rows are the training steps logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.failures.diagnose import LogScanner
from ajet_runner.statemachine.logs.metrics import (
    LogMetrics,
    merge_file_and_log,
    scan_log_lines,
    step_ranges,
    steps_of_ranges,
)
from ajet_runner.statemachine.logs.results import ResultSummary, parse_val_file
from ajet_runner.statemachine.models import Evaluation, Finding
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Runner
from ajet_runner.workers.watching import scan_checkpoint

log = logging.getLogger(__name__)
CHUNK = 1 << 20
SLICE_BYTES = 4 << 20  # one pass reads at most this much, then the rules run
SLICE_SECONDS = 0.25  # ... or for at most this long
FINISH_BYTES = 4 << 20  # an ended attempt: read at most this much more before jumping ...
FINISH_SECONDS = 0.15
FINISH_TAIL = 1 << 20  # ... to its last MiB (~10k lines: where the failure is)
CONSOLE_KEY = "console_evaluations"  # in each ctx.attempts entry: what the watcher read from that log
TRAIN_KEY = "console_train_steps"  # ... and the training steps it printed, as [first, last] runs
UNSCANNED_KEY = "unscanned"  # in each ctx.attempts entry: the byte ranges of its log never scanned, with why
MAX_RANGES = 16  # unscanned ranges kept per attempt (later ones are merged into the last)


def file_start(path: str | os.PathLike[str] | None) -> dict[str, int]:
    """Where this run's part of a results file begins: `{"inode", "offset"}` (offset 0 when
    the file does not exist yet). Recorded once, at the first launch."""
    if not path:
        return {"inode": 0, "offset": 0}
    try:
        st = os.stat(path)
    except OSError:
        return {"inode": 0, "offset": 0}
    return {"inode": st.st_ino, "offset": st.st_size}


def own_offset(path: str | os.PathLike[str], start: dict[str, int] | None) -> int:
    """The byte offset to read `path` from; a file replaced (new inode) or truncated (shorter
    than the recorded offset) since launch is all this run's, and `start` is updated to say so."""
    if not start:
        return 0
    try:
        st = os.stat(path)
    except OSError:
        return int(start.get("offset", 0))
    offset = int(start.get("offset", 0))
    if (start.get("inode") and st.st_ino != start["inode"]) or st.st_size < offset:
        start.update(inode=st.st_ino, offset=0)
        return 0
    if not start.get("inode"):
        start["inode"] = st.st_ino  # created after launch: it is ours from byte 0
    return offset


def parse_own_results(path: str | os.PathLike[str], start: dict[str, int] | None) -> ResultSummary:
    """The validation results this run wrote to `path` (see `own_offset`)."""
    return parse_val_file(path, start=own_offset(path, start))


def _scan_log(path: str) -> LogMetrics | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return scan_log_lines(fh)
    except OSError:
        return None


def log_evaluations(paths: list[str]) -> list[Evaluation]:
    """Console evaluations of several attempt logs, in order: a later attempt's step wins."""
    by_step: dict[int, Evaluation] = {}
    for path in paths:
        scanned = _scan_log(path)
        if scanned is not None:
            by_step.update(scanned.evaluations)
    return [by_step[k] for k in sorted(by_step)]


def attempt_train_steps(attempts: Sequence[Any]) -> set[int]:
    """The training steps these attempts' logs printed (a resumed attempt's repeats count once): what
    the watcher kept (`TRAIN_KEY`), else parsed from the log (an older record)."""
    steps: set[int] = set()
    for attempt in attempts:
        get = attempt.get if isinstance(attempt, dict) else lambda k, a=attempt: getattr(a, k, None)
        saved = get(TRAIN_KEY)
        if isinstance(saved, list):
            steps |= steps_of_ranges(saved)
        elif get("log_path"):
            scanned = _scan_log(str(get("log_path")))
            steps |= scanned.train_steps if scanned is not None else set()
    return steps


def attempt_evaluations(attempts: Sequence[Any]) -> list[Evaluation]:
    """Console evaluations of these attempts, in order (a later attempt's step wins): the ones the
    watcher kept when each attempt ended (`CONSOLE_KEY`), so a multi-GB log is never parsed again
    at collecting or relaunch; an attempt without them (an older record) is parsed from its log."""
    by_step: dict[int, Evaluation] = {}
    for attempt in attempts:
        get = attempt.get if isinstance(attempt, dict) else lambda k, a=attempt: getattr(a, k, None)
        saved = get(CONSOLE_KEY)
        if isinstance(saved, list):
            evals = [Evaluation.model_validate(e) for e in saved]
        else:
            evals = log_evaluations([str(get("log_path"))]) if get("log_path") else []
        by_step.update((e.step, e) for e in evals)
    return [by_step[k] for k in sorted(by_step)]


@dataclass
class AttemptWatch:
    handle: RunHandle
    val_path: Path | None
    val_start: dict[str, int] | None = None  # shared with the driver's context, updated in place
    earlier_log: list[Evaluation] = field(default_factory=list)  # earlier attempts' console evaluations
    val_source: Any = None  # several discovered files instead of `val_path` (ajet_runner.workers.swarm.found_results)
    log_metrics: LogMetrics = field(default_factory=LogMetrics)
    scanner: LogScanner = field(init=False)  # made in __post_init__: it shares log_metrics
    offset: int = 0
    last_output_at: float = 0.0
    bytes_read: int = 0
    cause_seen_at: float | None = None  # when the current live cause (cause_key) was first read
    cause_key: tuple[str, int] | None = None  # (signature, line) of the live cause the settle clock is for
    behind: bool = False  # the last read stopped at its budget: more bytes are waiting
    skipped_bytes: int = 0  # a backlog left unread when the attempt ended (see finish_log)
    unscanned: list[dict[str, Any]] = field(default_factory=list)  # {"start", "end", "bytes", "reason"}
    resumed_from: int | None = None  # the offset a checkpoint let us start at
    _val_stamp: tuple[Any, ...] | None = None
    summary: ResultSummary = field(default_factory=ResultSummary)
    file_summary: ResultSummary | None = None
    last_eval_at: float | None = None
    _log_records: int = -1
    _saved_bytes: int = -1
    _next_save: float = 0.0
    _log: Any = None  # the log file, held open between ticks (see _log_fd)
    _log_ino: tuple[int, int] | None = None
    _head: str | None = None  # the held log's first-bytes fingerprint, once it has HEAD_BYTES (checkpoints)
    primary_cache: tuple[Any, list[Evaluation]] | None = None  # (summary, its primary evaluations): running.py

    def __post_init__(self) -> None:
        self.scanner = LogScanner(metrics=self.log_metrics)

    @property
    def first_step_seen(self) -> bool:
        return self.scanner.last_step_line > 0

    def read_log(self, now: float, max_bytes: int = SLICE_BYTES, max_seconds: float = SLICE_SECONDS) -> list[Finding]:
        """Feed at most one slice of the bytes appended since the last call to the scanner.

        The slice is bounded in bytes and time so the rules run between slices whatever the log
        rate: a command writing 50 MB/s must not keep a stop request waiting. `behind` says
        whether more is waiting (the caller then loops again without sleeping)."""
        found: list[Finding] = []
        deadline = time.monotonic() + max_seconds
        budget = max_bytes
        try:
            st = os.stat(self.handle.log_path)
        except FileNotFoundError:
            self.behind = False
            return found
        end = st.st_size
        if end <= self.offset:  # nothing new: one stat, no read
            self.behind = False
            return found
        fd = self._log_fd(st)
        if fd is None:
            self.behind = False
            return found
        # Read up to the size just seen (no pread of an empty EOF, no fstat after): what is written
        # meanwhile is the next tick's, or the next slice's when this one stopped at its budget.
        while budget > 0 and self.offset < end and (
                chunk := os.pread(fd, min(CHUNK, budget, end - self.offset), self.offset)):
            self.offset += len(chunk)
            self.bytes_read += len(chunk)
            budget -= len(chunk)
            self.last_output_at = now
            found += self.scanner.feed(chunk)
            if time.monotonic() >= deadline:
                break
        self.behind = self.offset < end
        self._note_cause(now)
        return found

    def _note_cause(self, now: float) -> None:
        """A new candidate cause (or none): its settle starts now."""
        live = self.scanner.live_cause
        key = (live.signature, live.line) if live is not None else None
        if key != self.cause_key:
            self.cause_key = key
            self.cause_seen_at = now if key is not None else None

    def _log_fd(self, st: os.stat_result) -> int | None:
        """The log, kept open between ticks (a tick is a stat and a pread, not an open and a close);
        opened again when the path now names another file."""
        if self._log is not None and self._log_ino != (st.st_dev, st.st_ino):
            self.close()
            self._head = None
        if self._log is None:
            try:
                self._log = open(self.handle.log_path, "rb", buffering=0)  # noqa: SIM115 - kept open on purpose
            except FileNotFoundError:
                return None
            held = os.fstat(self._log.fileno())
            self._log_ino = (held.st_dev, held.st_ino)
        return self._log.fileno()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def finish_log(self, now: float) -> None:
        """Read what the ended attempt left: a bounded amount, then its last FINISH_TAIL bytes.

        A backlog of gigabytes is not read before acting (a stop must stay quick); the end of
        the log, where the failure is, always is. The gap is named in `unscanned`."""
        self.read_log(now, FINISH_BYTES, FINISH_SECONDS)
        if self.behind:
            with contextlib.suppress(OSError):
                size = os.stat(self.handle.log_path).st_size
                self._jump(size - FINISH_TAIL, f"the attempt ended with {size - self.offset} bytes of its log "
                           f"not yet scanned; only its last {FINISH_TAIL} bytes were read before acting on the end")
            self.read_log(now, FINISH_TAIL + CHUNK, FINISH_SECONDS * 3)
        self.scanner.close()

    def _jump(self, offset: int, reason: str) -> None:
        """Leave the bytes up to `offset` unread: counted in `skipped_bytes`, named in `unscanned`."""
        if offset <= self.offset:
            return
        log.warning("%s: bytes %d-%d not scanned: %s", self.handle.log_path, self.offset, offset, reason)
        self.skipped_bytes += offset - self.offset
        entry = {"start": self.offset, "end": offset, "bytes": offset - self.offset, "reason": reason}
        if len(self.unscanned) >= MAX_RANGES:
            last = self.unscanned[-1]
            last.update(end=offset, bytes=last["bytes"] + entry["bytes"], reason=f"{last['reason']}; {reason}")
        else:
            self.unscanned.append(entry)
        self.scanner.skip_gap()
        self.offset = offset

    # -- checkpoint: an adopting worker goes on from here -------------------------------------
    def console_evaluations(self) -> list[dict[str, Any]]:
        """This attempt's console evaluations as JSON-able dicts (kept in ctx when it ends)."""
        return [e.model_dump(mode="json") for e in self.log_metrics.evaluations.values()]

    def console_train_steps(self) -> list[list[int]]:
        """This attempt's training steps seen in its log, as [first, last] runs (kept in ctx when it ends)."""
        return step_ranges(self.log_metrics.train_steps)

    def checkpoint(self) -> dict[str, Any]:
        return {"offset": self.offset, "bytes_read": self.bytes_read, "last_output_at": self.last_output_at,
                "cause_seen_at": self.cause_seen_at, "cause_key": list(self.cause_key) if self.cause_key else None,
                "last_eval_at": self.last_eval_at, "skipped_bytes": self.skipped_bytes,
                "unscanned": self.unscanned, "scanner": self.scanner.checkpoint()}

    def maybe_save(self, mono: float, force: bool = False) -> bool:
        """Save the checkpoint once SAVE_BYTES more were read or SAVE_EVERY seconds passed (while the log
        grows): an adopter never has more than a few MB to read again."""
        if self.bytes_read == self._saved_bytes:
            return False
        due = mono >= self._next_save or self.bytes_read - self._saved_bytes >= scan_checkpoint.SAVE_BYTES
        if not (due or force):
            return False
        self._next_save = mono + scan_checkpoint.SAVE_EVERY
        self._saved_bytes = self.bytes_read
        if self._log is None or self._log_ino is None:
            return scan_checkpoint.save(self.handle.log_path, self.checkpoint())
        if self._head is None and self.offset >= scan_checkpoint.HEAD_BYTES:  # fixed from here on: read once
            with contextlib.suppress(OSError):
                self._head = scan_checkpoint.head_of(os.pread(self._log.fileno(), scan_checkpoint.HEAD_BYTES, 0))
        return scan_checkpoint.save(self.handle.log_path, self.checkpoint(), inode=self._log_ino[1], head=self._head)

    def resume(self) -> bool:
        """Go on from the checkpoint saved beside this log, if it still fits the file."""
        state = scan_checkpoint.load(self.handle.log_path)
        if state is None:
            return False
        try:
            scanner = LogScanner.resume(state["scanner"])
            offset, read = int(state["offset"]), int(state["bytes_read"])
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("%s: ignoring the scan checkpoint: %s", self.handle.log_path, exc)
            return False
        self.scanner = scanner
        self.log_metrics = scanner.metrics or LogMetrics()
        self.scanner.metrics = self.log_metrics
        self.offset, self.bytes_read, self.resumed_from = offset, read, offset
        self._saved_bytes = read
        self.last_output_at = float(state.get("last_output_at") or self.last_output_at)
        self.cause_seen_at = state.get("cause_seen_at")
        self.cause_key = _cause_key(state.get("cause_key"))
        self.last_eval_at = state.get("last_eval_at")
        self.skipped_bytes = int(state.get("skipped_bytes") or 0)
        self.unscanned = [dict(r) for r in state.get("unscanned") or [] if isinstance(r, dict)]
        return True

    def read_results(self, now: float) -> list[Evaluation]:
        """Merge the validation file (re-parsed when its size or mtime changed) with the console
        evaluations seen so far; return the evaluations that are new or changed."""
        changed = self._read_results_file()
        if self.log_metrics.records != self._log_records:
            self._log_records = self.log_metrics.records
            changed = True
        if not changed:
            return []
        before = {(e.step, e.dataset): e.metrics for e in self.summary.evaluations}
        log = self.log_metrics.summary(self.earlier_log) if (self.log_metrics.records or self.earlier_log) else None
        self.summary = merge_file_and_log(self.file_summary, log)
        new = [e for e in self.summary.evaluations if before.get((e.step, e.dataset)) != e.metrics]
        if new:
            self.last_eval_at = now
        return new

    def _read_results_file(self) -> bool:
        """Re-read the results (a swarm's discovered source, or this run's part of the file) when they
        changed since the last look; whether they did."""
        if self.val_source is not None:
            stamp = self.val_source.stamp()
            if stamp == self._val_stamp:
                return False
            self._val_stamp = stamp
            self.file_summary, _ = self.val_source.summary()
            return True
        if self.val_path is None:
            return False
        try:
            st = os.stat(self.val_path)
        except OSError:
            return False
        stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
        if stamp == self._val_stamp:
            return False
        self._val_stamp = stamp
        self.file_summary = parse_own_results(self.val_path, self.val_start)
        return True

    def alive(self, runner: Runner) -> bool:
        return runner.is_running(self.handle)

    def exit_code(self, runner: Runner, wait: float = 6.0) -> int | None:
        """The recorded exit code; the wrapper writes it a moment after the process ends."""
        return runner.wait_for_exit(self.handle, wait) if wait > 0 else runner.exit_code(self.handle)


def _cause_key(key: Any) -> tuple[str, int] | None:
    """A checkpoint's cause key ([signature, line]) back as a tuple; None when absent or malformed."""
    return (str(key[0]), int(key[1])) if isinstance(key, list) and len(key) == 2 else None


def monotonic_to_wall(mono: float) -> float:
    return time.time() - (time.monotonic() - mono)
