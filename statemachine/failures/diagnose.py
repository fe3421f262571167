"""Read an AgentJet log and say why the run failed (or that it did not).

One code path serves both uses: `LogScanner` for a worker tailing a growing multi-GB log
with constant memory, and `diagnose_lines` / `diagnose_text` for a finished log.

A catalogue pattern only makes a line a candidate. It is evidence when the line reports the
failure (statemachine/failures/evidence.py: an exception line, a traceback's last line, an ERROR record,
the shell's report); other matches are look-alikes, kept as non-fatal findings. Evidence stays
open until the log shows progress after it: any progress (progress_lines.py) clears it for the
live verdict (`live_cause`), a training step that advances clears it for the verdict on the
ended run (`cause`) — what the run survived did not end it.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import Field

from ajet_runner.statemachine.failures.evidence import evidence_shape, lookalike_note
from ajet_runner.statemachine.failures.signatures import (
    CATALOGUE,
    TRACEBACK_ID,
    Signature,
    candidates,
    match_line,
    signature,
)
from ajet_runner.statemachine.logs.checkpoints import StartScan
from ajet_runner.statemachine.logs.first_step import shows_training_step
from ajet_runner.statemachine.logs.lineshape import (
    announces_retry,
    is_exception_line,
    is_info_record,
    is_warning_record,
)
from ajet_runner.statemachine.logs.metrics import METRIC_MARKERS, LogMetrics
from ajet_runner.statemachine.logs.progress_lines import (
    NO_NUMBER,
    may_show_progress,
    may_show_steps,
    shows_activity,
    step_number,
)
from ajet_runner.statemachine.logs.text import clean_line, clean_lines
from ajet_runner.statemachine.models import Diagnosis, Finding

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
CHECKPOINT_VERSION = 2
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
_WENT_ON_NOTE = "Training went on after it, so it did not end the run."
_EVIDENCE, _LOOKALIKE, _INFO = "evidence", "lookalike", "info"


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
    caught: bool = False  # introduced by a line announcing a retry: a handled error, logged


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


@dataclass(slots=True)
class _BlockFacts:
    """What one search of a block of lines tells about all of them, so most lines need no regex of their own."""

    block: str
    among: list[Signature]  # the catalogue entries that match some line of the block
    steps: bool  # some line shows a training step
    step_lines: bool  # some line may show a step number
    _progress: bool | None = None  # may_show_progress(block), asked only while evidence is open

    def step_of(self, text: str) -> int | None:
        """The step number the line shows (a substring test first, the regex only on marked lines)."""
        return step_number(text) if self.step_lines and _mentions_step(text) else None

    def may_show_progress(self) -> bool:
        if self._progress is None:
            self._progress = may_show_progress(self.block)
        return self._progress


class LogScanner:
    """Incremental log diagnosis: feed bytes as they arrive, read findings at any time.

    Memory stays constant however long the log: one partial line (capped), a bounded tail,
    and at most one finding per signature (repeats are counted, not stored).
    """

    def __init__(self, tail_lines: int = DEFAULT_TAIL, metrics: LogMetrics | None = None) -> None:
        self.metrics = metrics  # console validation results, fed from the same cleaned lines
        self.start = StartScan()  # the experiment name and start step, kept as they stream by (repair/resume.py)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._parts_len = 0
        self._discarding = False  # the current line passed the cap; drop the rest of it
        self._closed = False
        self._line_no = 0
        self._tail: deque[str] = deque(maxlen=max(tail_lines, 1))
        self._findings: list[Finding] = []  # the first finding of each (signature, kind)
        self._first_keys: set[tuple[str, str]] = set()
        self._counts: dict[str, int] = {}
        self._completed_line: int | None = None
        self._last_fatal_match = 0  # line of the latest evidence of a fatal signature, deduped or not
        self._traceback: _OpenTraceback | None = None
        self._last_step_line = 0  # latest line showing a training step (kl_loss, progress bar, global_step)
        # Evidence not yet followed by progress, the first per signature: since the last progress of
        # any kind (the live verdict), and since the last training step that advanced (the ended run's).
        self._pending_live: dict[str, Finding] = {}
        self._pending_exit: dict[str, Finding] = {}
        self._last_progress_line = 0
        self._max_step = NO_NUMBER  # the highest step number seen (a redrawn bar of an old step is no progress)
        self._recent: tuple[str, str] = ("", "")  # the last two lines scanned (a retry announced before a traceback)

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
        self.start.close()
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
        """Progress was logged after the live cause's line (never: progress clears the live cause)."""
        cause = self.live_cause
        return cause is not None and self._last_progress_line > cause.line

    @property
    def last_progress_line(self) -> int:
        """The latest line that showed progress while evidence was open (0: none)."""
        return self._last_progress_line

    @property
    def counts(self) -> dict[str, int]:
        """How many lines matched each signature (findings keep only the first)."""
        return dict(self._counts)

    @property
    def findings(self) -> list[Finding]:
        """All findings in log order, with fatal flags resolved for the whole log so far: only evidence
        that no advancing training step followed stays fatal (specific before generic)."""
        items = {(f.signature, f.line): f for f in self._findings}
        for f in self._pending_exit.values():
            items.setdefault((f.signature, f.line), f)
        open_ = {(f.signature, f.line) for f in self._pending_exit.values()}
        return _resolve(sorted(items.values(), key=lambda f: f.line), self._completed_line, open_)

    @property
    def cause(self) -> Finding | None:
        """Why the ended run failed: the first fatal finding after resolution (specific beats generic)."""
        return next((f for f in self.findings if f.fatal), None)

    @property
    def live_cause(self) -> Finding | None:
        """The first *specific* evidence that nothing has progressed after: the candidate verdict while
        the process still runs (the diagnosis rule confirms it once it has settled).

        Generic symptoms (a logged traceback, a dead actor) also appear in healthy runs that
        catch and log errors; they explain an exit, but should not stop a live run.
        """
        if self._completed_line is not None:
            return None
        specific = [f for f in self._pending_live.values() if not signature(f.signature).generic]
        return min(specific, key=lambda f: f.line) if specific else None

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
            "first_keys": sorted([list(k) for k in self._first_keys]),
            "counts": dict(self._counts), "completed_line": self._completed_line,
            "last_fatal_match": self._last_fatal_match, "last_step_line": self._last_step_line,
            "pending_live": {k: f.model_dump(mode="json") for k, f in self._pending_live.items()},
            "pending_exit": {k: f.model_dump(mode="json") for k, f in self._pending_exit.items()},
            "last_progress_line": self._last_progress_line, "max_step": self._max_step,
            "recent": list(self._recent),
            "traceback": asdict(self._traceback) if self._traceback is not None else None,
            "metrics": self.metrics.checkpoint() if self.metrics is not None else None,
            "start": self.start.checkpoint(),
        }

    @classmethod
    def resume(cls, state: dict[str, Any]) -> LogScanner:
        """A scanner in the state `checkpoint()` saved; ValueError for a state it cannot use."""
        if not isinstance(state, dict) or state.get("v") != CHECKPOINT_VERSION:
            raise ValueError("not a LogScanner checkpoint of this version")
        try:
            metrics = LogMetrics.resume(state["metrics"]) if state.get("metrics") is not None else None
            scanner = cls(tail_lines=int(state["tail_len"] or DEFAULT_TAIL), metrics=metrics)
            scanner._resume_reading(state)
            scanner._resume_verdicts(state)
            scanner.start = StartScan.resume(state.get("start"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unusable LogScanner checkpoint: {exc}") from exc
        return scanner

    def _resume_reading(self, state: dict[str, Any]) -> None:
        """Where the reading stood: the decoder, a partial line, the line count, the tail, the open traceback."""
        pending, flag = state["decoder"]
        self._decoder.setstate((bytes.fromhex(pending), int(flag)))
        partial = str(state["partial"])
        self._parts, self._parts_len = ([partial], len(partial)) if partial else ([], 0)
        self._discarding = bool(state["discarding"])
        self._line_no = int(state["line_no"])
        self._tail.extend(str(t) for t in state["tail"])
        a, b = state["recent"]
        self._recent = (str(a), str(b))
        tb = state.get("traceback")
        self._traceback = _OpenTraceback(**tb) if tb else None

    def _resume_verdicts(self, state: dict[str, Any]) -> None:
        """What was found: findings and counts, completion, the last fatal, step and progress lines, open evidence."""
        self._findings = [Finding.model_validate(f) for f in state["findings"]]
        self._first_keys = {(str(a), str(b)) for a, b in state["first_keys"]}
        self._counts = {str(k): int(v) for k, v in state["counts"].items()}
        self._completed_line = state["completed_line"]
        self._last_fatal_match = int(state["last_fatal_match"])
        self._last_step_line = int(state["last_step_line"])
        self._pending_live = {str(k): Finding.model_validate(f) for k, f in state["pending_live"].items()}
        self._pending_exit = {str(k): Finding.model_validate(f) for k, f in state["pending_exit"].items()}
        self._last_progress_line = int(state["last_progress_line"])
        self._max_step = int(state["max_step"])

    def skip_gap(self) -> None:
        """The bytes from here to a later offset will not be read (a backlog too big to scan before
        acting): drop the partial line and any open traceback, so nothing spans the gap."""
        self._decoder.reset()
        self._parts, self._parts_len, self._discarding = [], 0, False
        self._traceback = None
        self.start.gap()
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
        self._feed_block(block, texts)
        facts = _BlockFacts(block, among, steps=shows_training_step(block), step_lines=may_show_steps(block))
        recent = self._recent  # the two lines before this one (a traceback's announcement is among them)
        for text in texts:
            self._line_no += 1
            self._tail.append(text)
            self._scan_line(text, self._line_no, facts, recent, out)
            recent = (recent[1], text)
        self._recent = recent

    def _scan_line(self, text: str, number: int, facts: _BlockFacts, recent: tuple[str, str],
                   out: list[Finding]) -> None:
        """One line: failure evidence first, then completion, training steps and progress (which clears
        open evidence unless the line is itself part of a failure)."""
        in_failure = self._scan_failure(text, number, facts.among, recent, out)
        if self._completed_line is None and _is_completion(text):
            self._completed_line = number
        step = facts.step_of(text)
        if facts.steps and shows_training_step(text):
            self._last_step_line = number
        if not in_failure and self._awaits_progress(step) and facts.may_show_progress():
            self._note_progress(text, number, step)
        if step is not None and step > self._max_step:
            self._max_step = step

    def _scan_failure(self, text: str, number: int, among: list[Signature], recent: tuple[str, str],
                      out: list[Finding]) -> bool:
        """Follow tracebacks and match the catalogue's candidates; True when the line is part of a traceback
        or fatal evidence."""
        in_traceback = ends_traceback = evidence = False
        if self._traceback is not None or text.startswith(_TRACEBACK_START):
            in_traceback, ends_traceback = self._track_traceback(text, number, out, recent)
        if among and text:
            evidence = self._match(text, number, among, out, in_traceback, ends_traceback)
        return in_traceback or evidence

    def _awaits_progress(self, step: int | None) -> bool:
        """Whether open evidence could be cleared by progress: live evidence by any, exit evidence only by
        a training step."""
        return bool(self._pending_live) or (bool(self._pending_exit) and step is not None)

    def _feed_block(self, block: str, texts: list[str]) -> None:
        """The start scan and the metrics read a block at a time (the metrics only when it may hold some)."""
        if not self.start.done:
            self.start.feed(block, texts)
        if self.metrics is not None and (self.metrics.pending or any(m in block for m in METRIC_MARKERS)):
            self.metrics.feed_lines(texts)

    def _match(self, text: str, number: int, among: list[Signature], out: list[Finding], in_traceback: bool,
               ends_traceback: bool) -> bool:
        """Match the line against the candidate signatures; True when it is fatal evidence."""
        sig = match_line(text, among)
        if sig is None:
            return False
        caught = in_traceback and self._traceback is not None and self._traceback.caught
        return self._record(sig, number, text, out, ends_traceback=ends_traceback, caught=caught) == _EVIDENCE

    def _note_progress(self, text: str, number: int, step: int | None) -> None:
        """Clear the open evidence when this line shows the run going on: a training step past the
        highest one seen clears both verdicts, other progress only the live one."""
        if step is not None:
            if step == NO_NUMBER or step > self._max_step:
                self._pending_live.clear()
                self._pending_exit.clear()
                self._last_progress_line = number
            return  # a bar redrawn at an old step (tqdm does so as the process exits) is no progress
        if self._pending_live and not is_exception_line(text) and shows_activity(text):
            self._pending_live.clear()
            self._last_progress_line = number

    def _record(self, sig: Signature, number: int, text: str, out: list[Finding], *,
                ends_traceback: bool = False, caught: bool = False) -> str:
        """Count the match and keep its finding (the first of each kind); returns the kind."""
        self._counts[sig.id] = self._counts.get(sig.id, 0) + 1
        if not sig.fatal:
            kind, finding = _INFO, sig.finding(number, text)
        elif evidence_shape(sig, text, ends_traceback=ends_traceback, caught=caught) is None:
            kind = _LOOKALIKE
            finding = sig.finding(number, text, fatal=False, note=lookalike_note(sig, text, caught=caught))
        else:
            kind = _EVIDENCE
            self._last_fatal_match = number
            if self._completed_line is not None:
                note = _COMPLETION_NOTE.format(line=self._completed_line)
                finding = sig.finding(number, text, fatal=False, note=note)
            else:
                finding = sig.finding(number, text)
                self._pending_live.setdefault(sig.id, finding)
                self._pending_exit.setdefault(sig.id, finding)
        if (sig.id, kind) not in self._first_keys:
            self._first_keys.add((sig.id, kind))
            self._findings.append(finding)
            out.append(finding)
        return kind

    def _track_traceback(self, text: str, number: int, out: list[Finding],
                         recent: tuple[str, ...] = ()) -> tuple[bool, bool]:
        """Follow an open traceback; (the line is part of it, the line is its exception line). A new one
        right after a line announcing a retry (`recent`: the lines before) is a handled error, logged."""
        tb = self._traceback
        if text.startswith(_TRACEBACK_START):
            self._traceback_starts(number, out, recent)
            return True, False
        if tb is None:
            return False, False
        if not text.strip() or text[0] in " \t":
            return True, False  # frames, source lines, ^^^ markers, blank separators
        if text.startswith(_CHAIN_PREFIXES):
            tb.chained = True
            return True, False
        if _ends_traceback(text, after_exception=bool(tb.exception_line)):
            tb.exception_line, tb.exception_text = number, text
            return True, True
        if tb.exception_line:
            self._close_traceback(out)
            return False, False
        tb.foreign += 1
        if tb.foreign > _TRACEBACK_FOREIGN_LIMIT:
            self._traceback = None
        return False, False

    def _traceback_starts(self, number: int, out: list[Finding], recent: tuple[str, ...]) -> None:
        """A `Traceback` line: the chained one of the open traceback ("During handling…"), or a new one
        (the open one closed)."""
        tb = self._traceback
        if tb is not None and tb.chained:
            tb.chained = False
            return
        self._close_traceback(out)
        caught = any(announces_retry(t) for t in recent)
        self._traceback = _OpenTraceback(start=number, caught=caught)

    def _close_traceback(self, out: list[Finding]) -> None:
        tb, self._traceback = self._traceback, None
        if tb is None or not tb.exception_line:
            return
        if self._last_fatal_match >= tb.start:
            return  # a known signature inside this traceback already explains it
        self._record(signature(TRACEBACK_ID), tb.exception_line, tb.exception_text, out, ends_traceback=True,
                     caught=tb.caught)


def _mentions_step(text: str) -> bool:
    """A cheap test before the step regex: the words a training-step line holds."""
    return "step" in text or "Training Progress" in text or "kl_loss" in text


def _ends_traceback(text: str, *, after_exception: bool) -> bool:
    """An exception line of an open traceback: `Name: message` — not a log record interleaved from
    another process (`WARNING: ...`); after a first exception line, only a real exception line (Ray's
    RayTaskError is followed by the remote frames and the remote exception)."""
    if not _EXCEPTION_LINE.match(text) or is_warning_record(text) or is_info_record(text):
        return False
    return not after_exception or is_exception_line(text)


def _resolve(findings: list[Finding], completed_line: int | None, open_: set[tuple[str, int]]) -> list[Finding]:
    """Final fatal flags: nothing is fatal in a completed run; evidence that training went on after is
    not what ended it; a specific cause beats symptoms."""
    if completed_line is not None:
        note = _EARLIER_NOTE.format(line=completed_line)
        return [_not_fatal(f, note) if f.fatal else f for f in findings]
    still = [f for f in findings if f.fatal and (f.signature, f.line) in open_]
    cause = next((f for f in still if not signature(f.signature).generic), None)
    return [_settled(f, open_, cause) for f in findings]


def _settled(f: Finding, open_: set[tuple[str, int]], cause: Finding | None) -> Finding:
    """A fatal finding stays fatal unless training went on after it, or it is a generic symptom of `cause`."""
    if not f.fatal:
        return f
    if (f.signature, f.line) not in open_:
        return _not_fatal(f, _WENT_ON_NOTE)
    if cause is not None and signature(f.signature).generic:
        return _not_fatal(f, _SYMPTOM_NOTE.format(cause=cause.signature, line=cause.line))
    return f


def _not_fatal(f: Finding, note: str) -> Finding:
    """The finding, no longer fatal, its explanation saying why."""
    return f.model_copy(update={"fatal": False, "explanation": f"{f.explanation} {note}"})


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
