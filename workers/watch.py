"""Observes one running attempt: the process, new log bytes, the validation file.

Cheap enough to call every half second: the log is read incrementally from the last offset
(constant memory on a multi-GB log) and the validation file is parsed only when it changed.

Only this run's results count: a validation file that already held an earlier run's lines
at launch is read from the size it had then (`FileStart`); a file replaced or truncated
since is read from its start. Console validation lines (`Initial/Final validation
metrics`, verl's `step:N - val-core/...` lines) fill the steps the file lacks, so a run of
an AgentJet that writes no results file still has evaluations (and can plateau).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statemachine.diagnose import LogScanner
from statemachine.first_step import shows_training_step
from statemachine.logmetrics import LogMetrics, merge_file_and_log, parse_log_lines
from statemachine.models import Evaluation, Finding
from statemachine.results import ResultSummary, parse_val_file
from workers.tmux import RunHandle, TmuxRunner

CHUNK = 1 << 20


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


def log_evaluations(paths: list[str]) -> list[Evaluation]:
    """Console evaluations of several attempt logs, in order: a later attempt's step wins."""
    by_step: dict[int, Evaluation] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                summary = parse_log_lines(fh)
        except OSError:
            continue
        by_step.update((e.step, e) for e in summary.evaluations)
    return [by_step[k] for k in sorted(by_step)]


@dataclass
class AttemptWatch:
    handle: RunHandle
    val_path: Path | None
    val_start: dict[str, int] | None = None  # shared with the driver's context, updated in place
    earlier_log: list[Evaluation] = field(default_factory=list)  # earlier attempts' console evaluations
    val_source: Any = None  # several discovered files instead of `val_path` (workers.swarm_results)
    log_metrics: LogMetrics = field(default_factory=LogMetrics)
    scanner: LogScanner = field(default=None)  # type: ignore[assignment]
    offset: int = 0
    last_output_at: float = 0.0
    bytes_read: int = 0
    cause_seen_at: float | None = None
    _val_stamp: tuple[Any, ...] | None = None
    summary: ResultSummary = field(default_factory=ResultSummary)
    file_summary: ResultSummary | None = None
    last_eval_at: float | None = None
    first_step_seen: bool = False
    _log_records: int = -1

    def __post_init__(self) -> None:
        if self.scanner is None:
            self.scanner = LogScanner(metrics=self.log_metrics)

    def read_log(self, now: float) -> list[Finding]:
        """Feed the bytes appended since the last call to the scanner."""
        found: list[Finding] = []
        try:
            with open(self.handle.log_path, "rb") as f:
                f.seek(self.offset)
                while chunk := f.read(CHUNK):
                    self.offset += len(chunk)
                    self.bytes_read += len(chunk)
                    self.last_output_at = now
                    found += self.scanner.feed(chunk)
                    if not self.first_step_seen:
                        self.first_step_seen = shows_training_step(chunk.decode("utf-8", errors="replace"))
        except FileNotFoundError:
            return found
        if self.scanner.live_cause is not None and self.cause_seen_at is None:
            self.cause_seen_at = now
        return found

    def finish_log(self, now: float) -> None:
        self.read_log(now)
        self.scanner.close()

    def read_results(self, now: float) -> list[Evaluation]:
        """Merge the validation file (re-parsed when its size or mtime changed) with the console
        evaluations seen so far; return the evaluations that are new or changed."""
        changed = False
        if self.val_source is not None:
            stamp = self.val_source.stamp()
            if stamp != self._val_stamp:
                self._val_stamp = stamp
                self.file_summary, _ = self.val_source.summary()
                changed = True
        elif self.val_path is not None:
            try:
                st = os.stat(self.val_path)
            except OSError:
                st = None
            stamp = (st.st_size, st.st_mtime_ns, st.st_ino) if st else None
            if st is not None and stamp != self._val_stamp:
                self._val_stamp = stamp
                self.file_summary = parse_own_results(self.val_path, self.val_start)
                changed = True
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

    def alive(self, runner: TmuxRunner) -> bool:
        return runner.is_running(self.handle)

    def exit_code(self, runner: TmuxRunner, wait: float = 6.0) -> int | None:
        """The recorded exit code; the wrapper writes it a moment after the process ends."""
        return runner.wait_for_exit(self.handle, wait) if wait > 0 else runner.exit_code(self.handle)


def monotonic_to_wall(mono: float) -> float:
    return time.time() - (time.monotonic() - mono)
