"""Observes one running attempt: the process, new log bytes, the validation file.

Cheap enough to call every half second: the log is read incrementally from the last offset
(constant memory on a multi-GB log) and the validation file is parsed only when it changed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from statemachine.diagnose import LogScanner
from statemachine.first_step import shows_training_step
from statemachine.models import Evaluation, Finding
from statemachine.results import ResultSummary, parse_val_file
from workers.tmux import RunHandle, TmuxRunner

CHUNK = 1 << 20


@dataclass
class AttemptWatch:
    handle: RunHandle
    val_path: Path | None
    scanner: LogScanner = field(default_factory=LogScanner)
    offset: int = 0
    last_output_at: float = 0.0
    bytes_read: int = 0
    cause_seen_at: float | None = None
    _val_stamp: tuple[int, int] | None = None
    summary: ResultSummary = field(default_factory=ResultSummary)
    last_eval_at: float | None = None
    first_step_seen: bool = False

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
        """Re-parse the validation file when its size or mtime changed; return new evaluations."""
        if self.val_path is None:
            return []
        try:
            st = os.stat(self.val_path)
        except OSError:
            return []
        stamp = (st.st_size, st.st_mtime_ns)
        if stamp == self._val_stamp:
            return []
        self._val_stamp = stamp
        before = {(e.step, e.dataset): e.metrics for e in self.summary.evaluations}
        self.summary = parse_val_file(self.val_path)
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
