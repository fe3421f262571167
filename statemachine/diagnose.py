"""Read an AgentJet log and say why the run failed (or that it did not).

One code path serves both uses: `LogScanner` for a worker tailing a growing multi-GB log
with constant memory, and `diagnose_lines` / `diagnose_text` for a finished log.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import Field

from ajet_runner.statemachine.first_step import shows_training_step
from ajet_runner.statemachine.logmetrics import METRIC_MARKERS, LogMetrics
from ajet_runner.statemachine.logtext import clean_line, clean_lines
from ajet_runner.statemachine.models import Diagnosis, Finding
from ajet_runner.statemachine.signatures import CATALOGUE, TRACEBACK_ID, Signature, candidates, match_line, signature

__all__ = [
    "CATALOGUE",
    "LogDiagnosis",
    "LogScanner",
    "MAX_LINE_CHARS",
    "clean_line",
    "decisive_line",
    "diagnose_lines",
    "diagnose_text",
    "signature",
]

MAX_LINE_CHARS = 64 * 1024  # longer lines are cut: no real log line needs more to be recognised
DEFAULT_TAIL = 200
CHECKPOINT_VERSION = 1
_BATCH_LINES = 1024  # diagnose_lines scans this many lines per block
_TRACEBACK_FOREIGN_LIMIT = 20  # interleaved lines tolerated before a traceback's exception line

_TRACEBACK_START = "Traceback (most recent call last):"
_CHAIN_PREFIXES = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
# The last line of a traceback: "pkg.mod.SomeError: message", "RayTaskError(OutOfMemoryError): ...",
# or a bare "KeyboardInterrupt" / "AssertionError".
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:\([^()]*\))?:(?:\s|$)"
    r"|^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Iteration)(?:\([^()]*\))?$"
)
_PROGRESS_DONE = re.compile(r"Training Progress:\s*100%.*\|\s*(\d+)/(\d+)\b")
_COMPLETION_NOTE = "Seen after the run completed (line {line}): shutdown noise, not a failure."
_EARLIER_NOTE = "The run went on to complete (line {line}), so this was not fatal."
_SYMPTOM_NOTE = "Only a symptom here: the cause is {cause} (line {line})."


class LogDiagnosis(Diagnosis):
    """A Diagnosis plus scan facts: how often each signature was seen, how many lines."""

    counts: dict[str, int] = Field(default_factory=dict)
    line_count: int = 0
    completed_line: int | None = None


@dataclass
class _OpenTraceback:
    start: int
    exception_line: int = 0
    exception_text: str = ""
    chained: bool = False
    foreign: int = 0


def _bound(text: str) -> str:
    """Cap a line: keep what a terminal would show after \\r redraws, then cut to the limit."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    if "\r" in text:
        segments = text.split("\r")
        keep = next((i for i in range(len(segments) - 1, -1, -1) if segments[i].strip()), len(segments) - 1)
        text = "\r".join(segments[keep:])
    return text[:MAX_LINE_CHARS]


def _is_completion(line: str) -> bool:
    if "Final validation metrics" in line:
        return True
    if "Training Progress" in line:
        done = _PROGRESS_DONE.search(line)
        return bool(done and done.group(1) == done.group(2))
    return False


class LogScanner:
    """Incremental log diagnosis: feed bytes as they arrive, read findings at any time.

    Memory stays constant however long the log: one partial line (capped), a bounded tail,
    and at most one finding per signature (repeats are counted, not stored).
    """

    def __init__(self, tail_lines: int = DEFAULT_TAIL, metrics: LogMetrics | None = None) -> None:
        self.metrics = metrics  # console validation results, fed from the same cleaned lines
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._parts_len = 0
        self._discarding = False  # the current line passed the cap; drop the rest of it
        self._closed = False
        self._line_no = 0
        self._tail: deque[str] = deque(maxlen=max(tail_lines, 1))
        self._findings: list[Finding] = []
        self._counts: dict[str, int] = {}
        self._completed_line: int | None = None
        self._last_fatal_match = 0  # line of the latest fatal match, deduped or not
        self._traceback: _OpenTraceback | None = None
        self._last_step_line = 0  # latest line showing a training step (kl_loss, progress bar, global_step)

    # ---- input -------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Finding]:
        """Scan more bytes of the log; returns the findings first seen in them.

        Their fatal flags are as known at that moment; `findings`, `cause` and `live_cause`
        give the flags resolved for the whole log so far (a later specific cause or the run's
        successful end can demote a finding).
        """
        if self._closed:
            raise ValueError("LogScanner.feed() after close()")
        return self._feed_text(self._decoder.decode(data))

    def close(self) -> list[Finding]:
        """End of log: scan the unterminated last line and any open traceback."""
        if self._closed:
            return []
        out = self._feed_text(self._decoder.decode(b"", final=True))
        if self._parts:
            self._scan_lines([self._take_partial("")], out)
        self._close_traceback(out)
        self._closed = True
        return out

    def feed_lines(self, lines: list[str]) -> list[Finding]:
        """Scan already-split lines (without '\\n'): like feeding their bytes. Do not mix with feed()."""
        if self._closed:
            raise ValueError("LogScanner.feed_lines() after close()")
        if any("\n" in line for line in lines):
            lines = "\n".join(lines).split("\n")
        out: list[Finding] = []
        self._scan_lines(lines, out)
        return out

    # ---- results -----------------------------------------------------------------------

    @property
    def completed_run(self) -> bool:
        return self._completed_line is not None

    @property
    def line_count(self) -> int:
        return self._line_no

    @property
    def last_step_line(self) -> int:
        """The latest line that showed a training step (0: none yet): training going on after a
        fatal-looking line means that line did not kill the run."""
        return self._last_step_line

    @property
    def progress_after_cause(self) -> bool:
        """Training steps were logged after the live cause's line."""
        cause = self.live_cause
        return cause is not None and self._last_step_line > cause.line

    @property
    def counts(self) -> dict[str, int]:
        """How many lines matched each signature (findings keep only the first)."""
        return dict(self._counts)

    @property
    def findings(self) -> list[Finding]:
        """All findings in log order, with fatal flags resolved for the whole log so far."""
        return _resolve(self._findings, self._completed_line)

    @property
    def cause(self) -> Finding | None:
        """The first fatal finding after resolution: specific signatures beat generic ones."""
        return next((f for f in self.findings if f.fatal), None)

    @property
    def live_cause(self) -> Finding | None:
        """The first fatal *specific* finding: safe to act on while the process still runs.

        Generic symptoms (a logged traceback, a dead actor) also appear in healthy runs that
        catch and log errors; they explain an exit, but should not stop a live run.
        """
        return next((f for f in self.findings if f.fatal and not signature(f.signature).generic), None)

    def tail(self, n: int) -> list[str]:
        """The last `n` cleaned lines (at most the capacity given at construction)."""
        if n <= 0:
            return []
        return list(self._tail)[-n:]

    def diagnosis(self) -> LogDiagnosis:
        return LogDiagnosis(
            findings=self.findings,
            completed_run=self.completed_run,
            counts=self.counts,
            line_count=self._line_no,
            completed_line=self._completed_line,
        )

    # ---- checkpoint ----------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        """Everything needed to go on scanning from here (JSON-able): an adopting worker resumes
        from it instead of re-reading a multi-GB log. The console metrics are saved with it."""
        pending, flag = self._decoder.getstate()
        return {
            "v": CHECKPOINT_VERSION,
            "decoder": [pending.hex(), flag],
            "partial": "".join(self._parts), "discarding": self._discarding,
            "line_no": self._line_no, "tail": list(self._tail), "tail_len": self._tail.maxlen,
            "findings": [f.model_dump(mode="json") for f in self._findings],
            "counts": dict(self._counts), "completed_line": self._completed_line,
            "last_fatal_match": self._last_fatal_match, "last_step_line": self._last_step_line,
            "traceback": asdict(self._traceback) if self._traceback is not None else None,
            "metrics": self.metrics.checkpoint() if self.metrics is not None else None,
        }

    @classmethod
    def resume(cls, state: dict[str, Any]) -> LogScanner:
        """A scanner in the state `checkpoint()` saved; ValueError for a state it cannot use."""
        if not isinstance(state, dict) or state.get("v") != CHECKPOINT_VERSION:
            raise ValueError("not a LogScanner checkpoint of this version")
        try:
            metrics = LogMetrics.resume(state["metrics"]) if state.get("metrics") is not None else None
            scanner = cls(tail_lines=int(state["tail_len"] or DEFAULT_TAIL), metrics=metrics)
            pending, flag = state["decoder"]
            scanner._decoder.setstate((bytes.fromhex(pending), int(flag)))
            partial = str(state["partial"])
            scanner._parts, scanner._parts_len = ([partial], len(partial)) if partial else ([], 0)
            scanner._discarding = bool(state["discarding"])
            scanner._line_no = int(state["line_no"])
            scanner._tail.extend(str(t) for t in state["tail"])
            scanner._findings = [Finding.model_validate(f) for f in state["findings"]]
            scanner._counts = {str(k): int(v) for k, v in state["counts"].items()}
            scanner._completed_line = state["completed_line"]
            scanner._last_fatal_match = int(state["last_fatal_match"])
            scanner._last_step_line = int(state["last_step_line"])
            tb = state.get("traceback")
            scanner._traceback = _OpenTraceback(**tb) if tb else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unusable LogScanner checkpoint: {exc}") from exc
        return scanner

    def skip_gap(self) -> None:
        """The bytes from here to a later offset will not be read (a backlog too big to scan before
        acting): drop the partial line and any open traceback, so nothing spans the gap."""
        self._decoder.reset()
        self._parts, self._parts_len, self._discarding = [], 0, False
        self._traceback = None
        if self.metrics is not None:
            self.metrics.drop_pending()

    # ---- line splitting ----------------------------------------------------------------

    def _feed_text(self, text: str) -> list[Finding]:
        out: list[Finding] = []
        if not text:
            return out
        pieces = text.split("\n")
        rest = pieces.pop()
        if pieces:
            pieces[0] = self._take_partial(pieces[0])
            self._scan_lines(pieces, out)
        if rest and not self._discarding:
            self._parts.append(rest)
            self._parts_len += len(rest)
            if self._parts_len > MAX_LINE_CHARS:
                bounded = _bound("".join(self._parts))
                self._parts = [bounded]
                self._parts_len = len(bounded)
                self._discarding = len(bounded) >= MAX_LINE_CHARS
        return out

    def _take_partial(self, piece: str) -> str:
        if not self._parts:
            line = piece
        elif self._discarding:
            line = self._parts[0]
        else:
            line = "".join(self._parts) + piece
        self._parts = []
        self._parts_len = 0
        self._discarding = False
        return line

    # ---- the one scanning path ---------------------------------------------------------

    def _scan_lines(self, raws: list[str], out: list[Finding]) -> None:
        texts = clean_lines([_bound(raw) for raw in raws])
        block = "\n".join(texts)
        among = candidates(block)  # usually empty: no per-line matching at all
        if self.metrics is not None and (self.metrics.pending or any(m in block for m in METRIC_MARKERS)):
            self.metrics.feed_lines(texts)
        steps = shows_training_step(block)  # one search per block; per line only when it matched
        for text in texts:
            self._line_no += 1
            number = self._line_no
            self._tail.append(text)
            if self._traceback is not None or text.startswith(_TRACEBACK_START):
                self._track_traceback(text, number, out)
            if among and text:
                sig = match_line(text, among)
                if sig is not None:
                    self._record(sig, number, text, out)
            if self._completed_line is None and _is_completion(text):
                self._completed_line = number
            if steps and shows_training_step(text):
                self._last_step_line = number

    def _record(self, sig: Signature, number: int, text: str, out: list[Finding]) -> None:
        if sig.fatal:
            self._last_fatal_match = number
        seen = self._counts.get(sig.id, 0)
        self._counts[sig.id] = seen + 1
        if seen:
            return
        if sig.fatal and self._completed_line is not None:
            note = _COMPLETION_NOTE.format(line=self._completed_line)
            finding = sig.finding(number, text, fatal=False, note=note)
        else:
            finding = sig.finding(number, text)
        self._findings.append(finding)
        out.append(finding)

    def _track_traceback(self, text: str, number: int, out: list[Finding]) -> None:
        tb = self._traceback
        if text.startswith(_TRACEBACK_START):
            if tb is not None and tb.chained:
                tb.chained = False
                return
            self._close_traceback(out)
            self._traceback = _OpenTraceback(start=number)
            return
        if tb is None:
            return
        if not text.strip() or text[0] in " \t":
            return  # frames, source lines, ^^^ markers, blank separators
        if text.startswith(_CHAIN_PREFIXES):
            tb.chained = True
            return
        if _EXCEPTION_LINE.match(text):
            tb.exception_line, tb.exception_text = number, text
            return
        if tb.exception_line:
            self._close_traceback(out)
            return
        tb.foreign += 1
        if tb.foreign > _TRACEBACK_FOREIGN_LIMIT:
            self._traceback = None

    def _close_traceback(self, out: list[Finding]) -> None:
        tb, self._traceback = self._traceback, None
        if tb is None or not tb.exception_line:
            return
        if self._last_fatal_match >= tb.start:
            return  # a known signature inside this traceback already explains it
        self._record(signature(TRACEBACK_ID), tb.exception_line, tb.exception_text, out)


def _resolve(findings: list[Finding], completed_line: int | None) -> list[Finding]:
    """Final fatal flags: nothing is fatal in a completed run; a specific cause beats symptoms."""
    ordered = sorted(findings, key=lambda f: f.line)
    if completed_line is not None:
        note = _EARLIER_NOTE.format(line=completed_line)
        return [
            f.model_copy(update={"fatal": False, "explanation": f"{f.explanation} {note}"}) if f.fatal else f
            for f in ordered
        ]
    cause = next((f for f in ordered if f.fatal and not signature(f.signature).generic), None)
    if cause is None:
        return ordered
    note = _SYMPTOM_NOTE.format(cause=cause.signature, line=cause.line)
    return [
        f.model_copy(update={"fatal": False, "explanation": f"{f.explanation} {note}"})
        if f.fatal and signature(f.signature).generic
        else f
        for f in ordered
    ]


QUOTE_CHARS = 240


def decisive_line(cause: Finding | None, tail: Iterable[str] = ()) -> str:
    """The log line that decided a failure, quoted for an outcome line: the finding's own line
    (for a bare traceback, its exception line), else the last non-blank line of the log tail."""
    if cause is not None and cause.text.strip():
        text, where = cause.text.strip(), f"log line {cause.line}"
    else:
        text = next((t.strip() for t in reversed(list(tail)) if t.strip()), "")
        where = "last log line"
    if not text:
        return ""
    if len(text) > QUOTE_CHARS:
        text = text[: QUOTE_CHARS - 1] + "…"
    return f'{where}: "{text}"'


def diagnose_lines(lines: Iterable[str]) -> LogDiagnosis:
    """Diagnose a log given as lines (with or without their trailing newline)."""
    scanner = LogScanner(tail_lines=1)
    batch: list[str] = []
    for item in lines:
        batch.extend(item.removesuffix("\n").split("\n"))
        if len(batch) >= _BATCH_LINES:
            scanner.feed_lines(batch)
            batch = []
    scanner.feed_lines(batch)
    scanner.close()
    return scanner.diagnosis()


def diagnose_text(text: str) -> LogDiagnosis:
    """Diagnose a whole log held in memory; line numbers count '\\n' like the file does."""
    return diagnose_lines(text.removesuffix("\n").split("\n") if text else [])
