"""Validation results and training steps from the console log, for AgentJet versions that write no results file.

The public AgentJet trainer (PyPI 0.0.1, the repository snapshot of 2026-01) prints, and writes
no results file:

- at **every** validation, verl's console line `step:N - TGC@1:… - TGC@4:… - mean_reward:… - …`
  (`concat_dict_to_str`; AgentJet's `eval_dataset` logs it, and the training step that validated
  logs it again merged with its training keys), and at every training step a step line of
  training keys (`critic/…`, `actor/…`, `timing_s/…`). `ajet_runner.statemachine.logs.steplines` reads
  them and tells validation rows from training rows by their keys (the rule is documented there);
- `Initial validation metrics: {...}` before training and `Final validation metrics: {...}` at
  the end, with no step number. The dict comes through `pprint` of a string, so the line can be
  wrapped in quotes and parentheses and even split over several quoted lines; values may be
  numpy reprs. A dict equal to the evaluation just printed as a step line is that step's;
  otherwise Initial is the resumed step (0 on a fresh start) and Final the last step of the
  `Training Progress: ... | N/M` bar (or `Total training steps`);
- keys: `TGC@k` / `val-core/<source>/TGC@k` (task goal completion: the same idea as
  `task_pass_rate@k`, reported under that name too, the original key kept), `val-core/<source>/
  reward/mean@k` (also reported as `mean_reward`), `val-aux/...` and classic keys.

Lines must be cleaned first (`ajet_runner.statemachine.logs.text.clean_line`: ANSI, `\\r` redraws, Ray
prefixes). The parser never raises and holds at most one pending multi-line record of
bounded size (and one int per training step), so it can follow a multi-GB log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ajet_runner.statemachine.logs.results import (
    _EVAL_FIELDS,
    STEP_KEYS,
    ResultSummary,
    _as_step,
    _parse_dict_line,
    _to_float,
    normalize_key,
    pass_rate_aliases,
    summarize,
)
from ajet_runner.statemachine.logs.steplines import is_training_key, parse_step_line
from ajet_runner.statemachine.logs.text import clean_lines
from ajet_runner.statemachine.metric_vocabulary import MEAN_REWARD
from ajet_runner.statemachine.models import Evaluation

__all__ = ["LOG_DATASET", "METRIC_MARKERS", "LogMetrics", "merge_file_and_log", "parse_log_lines", "parse_log_text",
           "scan_log_lines", "step_ranges", "steps_of_ranges"]

METRIC_MARKERS = ("validation metrics", "step:", "Training Progress", "Total training steps", "global step")
LOG_DATASET = ""  # console evaluations name no dataset; a merge gives them the file's primary one
# A real record is a few KB (about 1 KB per validation source); longer ones are garbage, skipped
# before the slow fallbacks of the dict parser can spend time on them.
MAX_RECORD_CHARS = 32 * 1024
MAX_RECORD_LINES = 400
_MARKER_RE = re.compile(r"(?P<which>Initial|Final) validation metrics\s*:\s*")
_PROGRESS_RE = re.compile(r"Training Progress:.*?\|\s*(\d{1,9})/(\d{1,9})\b")
_TOTAL_RE = re.compile(r"Total training steps:\s*(\d{1,9})\b")
_RESUME_RE = re.compile(r"(?:Resuming from|Setting) global step (?:to )?(\d{1,9})\b")
_REWARD_MEAN_RE = re.compile(r"^val-core/[^/]+/reward/mean@\d+$")
_QUOTED_RE = re.compile(r"""^[(]?\s*[bru]*(?P<q>'|")(?P<body>.*)(?P=q)\s*[),]?$""", re.S)


def _unquote_piece(piece: str, opening: str = "") -> str:
    """One piece of a pprint-wrapped string (` 'text'`, ` 'text')`) → its text; `opening` is a
    quote already consumed before the piece."""
    s = (opening + piece).strip() if opening else piece.strip()
    m = _QUOTED_RE.match(s)
    if not m:
        return s[len(opening):] if opening else s
    body = m.group("body")
    return _ESCAPE_RE.sub(_unescape, body) if "\\" in body else body


_ESCAPE_RE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


def _unescape(m: re.Match[str]) -> str:
    """A Python string escape inside a repr'd record (`\\'`, `\\\\`, `\\n`); no eval, no compile."""
    return _ESCAPES.get(m.group(1), m.group(1))


def _aliases(metrics: dict[str, float]) -> dict[str, float]:
    """Add `task_pass_rate@k` for `.../TGC@k` and `pass@k` / `pass_at_k` (see `pass_rate_aliases`) and
    `mean_reward` for `val-core/<src>/reward/mean@k`, keeping the original keys; an alias never
    replaces a key the record already has."""
    out = dict(pass_rate_aliases(metrics))
    for key, value in metrics.items():
        if "/reward/mean@" in key and _REWARD_MEAN_RE.match(key):
            out.setdefault(MEAN_REWARD, value)
    return out


def _metrics_of(text: str) -> tuple[dict[str, float], int | None] | None:
    """The numeric metrics and step key (if any) of one dict record, or None if it is not one."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    data, _ = _parse_dict_line(text[start : end + 1])
    if not data:
        return None
    step = next((_as_step(data[k]) for k in STEP_KEYS if k in data), None)
    metrics = _numeric_metrics(data)
    return (_aliases(metrics), step) if metrics else None


def _numeric_metrics(data: dict[Any, Any]) -> dict[str, float]:
    """The record's numeric values by normalized name, the step keys left out."""
    metrics: dict[str, float] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            continue
        name = normalize_key(key)
        if name in STEP_KEYS:
            continue
        number = _to_float(value)
        if number is not None:
            metrics[name] = number
    return metrics


def _quoted_record(head: str, rest: str, quote: str) -> tuple[str, bool]:
    """The record's text inside a pprint'ed string literal, and whether pprint wrapped it in ( ... ) onto
    later lines."""
    body = rest.rstrip()
    wrapped = head[:-1].rstrip().endswith("(")  # pprint wraps a long string in ( ... )
    if wrapped and body.endswith(")"):
        body, wrapped = body[:-1].rstrip(), False
    return _unquote_piece(body if body.endswith(quote) and len(body) > 0 else body + quote, quote), wrapped


@dataclass
class LogMetrics:
    """Streaming state: feed cleaned lines, read `evaluations` at any time."""

    last_progress_step: int | None = None
    total_steps: int | None = None
    by_step: dict[int, dict[str, float]] = field(default_factory=dict)  # last write of a step wins
    records: int = 0
    skipped: int = 0
    train_steps: set[int] = field(default_factory=set)  # steps that printed a training row
    _pending: list[str] | None = None
    _max_step: int = 0
    _pending_which: str = ""
    _pending_chars: int = 0

    @property
    def pending(self) -> bool:
        """A pprint-wrapped record is open: the next lines belong to it."""
        return self._pending is not None

    @property
    def evaluations(self) -> dict[int, Evaluation]:
        """Step → evaluation, in the order the steps were last written."""
        return {step: Evaluation.model_construct(_EVAL_FIELDS, step=step, dataset=LOG_DATASET, metrics=m)
                for step, m in self.by_step.items()}

    def feed_lines(self, lines: Iterable[str]) -> list[int]:
        """Feed cleaned lines; returns the steps recorded (or rewritten) by them."""
        new: list[int] = []
        for line in lines:
            step = self.feed(line)
            if step is not None:
                new.append(step)
        return new

    def feed(self, line: str) -> int | None:
        """One cleaned line; returns the step of a record it completed."""
        if self._pending is not None:
            return self._continue(line)
        self._progress(line)
        if "validation metrics" not in line:
            return self._step_line(line) if line.lstrip().startswith("step:") else None
        m = _MARKER_RE.search(line)
        if m is None:
            return None
        which = m.group("which")
        head = line[: m.start()].rstrip()
        rest = line[m.end() :]
        quote = head[-1] if head.endswith(("'", '"')) else ""
        if quote:  # inside a pprint'ed string: the record is a string literal, maybe wrapped
            rest, wrapped = _quoted_record(head, rest, quote)
            if wrapped:
                self._open_wrapped(rest, which)
                return None
        if rest.strip() in _NO_RECORD:
            return None  # `Final validation metrics: None`: the last step did not validate
        if rest.rstrip().endswith("}"):
            return self._record(which, rest)
        self.skipped += 1  # a cut line
        return None

    def _progress(self, line: str) -> None:
        """The progress bar's step and total, a resume's global step, the trainer's total steps."""
        if "Training Progress" in line:
            m = _PROGRESS_RE.search(line)
            if m:
                self.last_progress_step = int(m.group(1))
                self.total_steps = int(m.group(2))
        elif "global step" in line:
            m = _RESUME_RE.search(line)
            if m:
                self.last_progress_step = int(m.group(1))
        elif "Total training steps" in line:
            m = _TOTAL_RE.search(line)
            if m and self.total_steps is None:
                self.total_steps = int(m.group(1))

    def _open_wrapped(self, rest: str, which: str) -> None:
        """A record pprint wrapped over several string pieces: collect them from the next lines."""
        if "{" not in rest:
            self.skipped += 1
            return
        self._pending, self._pending_which, self._pending_chars = [rest], which, len(rest)

    def _step_line(self, line: str) -> int | None:
        """verl's console logger: `step:N - key:value - ...`. A validation row becomes the step's
        evaluation (its validation keys only); a training row counts as a logged training step;
        a training step that validated prints one line that is both (ajet_runner.statemachine.logs.steplines)."""
        row = parse_step_line(line, training_values=False)
        if row is None:
            return None
        if row.is_training:
            self.train_steps.add(row.step)
        if not row.is_validation:
            return None
        return self._store(row.step, _aliases(row.validation))

    @property
    def train_step_count(self) -> int:
        """How many distinct training steps printed a training row."""
        return len(self.train_steps)

    def _continue(self, line: str) -> int | None:
        assert self._pending is not None
        s = line.strip()
        if not s.startswith(("'", '"')):
            self._pending = None  # another line started: the wrapped record was cut
            self.skipped += 1
            return self.feed(line)
        piece = _unquote_piece(s)
        self._pending.append(piece)
        self._pending_chars += len(piece)
        if self._pending_chars > MAX_RECORD_CHARS or len(self._pending) > MAX_RECORD_LINES:
            self._pending = None
            self.skipped += 1
            return None
        if s.endswith(")") or piece.rstrip().endswith("}"):
            text = "".join(self._pending)
            which = self._pending_which
            self._pending = None
            if text.rstrip().endswith("}"):
                return self._record(which, text)
            self.skipped += 1
        return None

    def _record(self, which: str, text: str) -> int | None:
        if len(text) > MAX_RECORD_CHARS:
            self.skipped += 1
            return None
        parsed = _metrics_of(text)
        if parsed is None:
            self.skipped += 1
            return None
        metrics, own_step = parsed
        just_printed = self._just_printed(metrics)
        if own_step is not None:
            step = own_step
        elif just_printed is not None:
            step = just_printed
        elif which == "Initial":
            step = self.last_progress_step if self.last_progress_step else 0
        elif self.last_progress_step is not None:
            step = self.last_progress_step
        elif self.total_steps is not None:
            step = self.total_steps
        else:
            step = self._max_step + 1
        return self._store(step, metrics)

    def _just_printed(self, metrics: dict[str, float]) -> int | None:
        """The step of the latest evaluation when it holds exactly these validation metrics: the
        trainer prints a validation as a step line first, then as the Initial/Final dict."""
        if not self.by_step:
            return None
        last = next(reversed(self.by_step))
        mine = {k: v for k, v in metrics.items() if not is_training_key(k)}
        return last if mine and self.by_step[last] == mine else None

    def _store(self, step: int, metrics: dict[str, float]) -> int:
        self.by_step.pop(step, None)
        self.by_step[step] = metrics  # last write of a step wins
        self._max_step = max(self._max_step, step)
        self.records += 1
        return step

    def checkpoint(self) -> dict[str, Any]:
        """The streaming state as JSON-able data (steps become string keys)."""
        return {"last_progress_step": self.last_progress_step, "total_steps": self.total_steps,
                "by_step": [[k, v] for k, v in self.by_step.items()], "records": self.records,
                "skipped": self.skipped, "pending": self._pending, "max_step": self._max_step,
                "pending_which": self._pending_which, "pending_chars": self._pending_chars,
                "train_steps": step_ranges(self.train_steps)}

    @classmethod
    def resume(cls, state: dict[str, Any]) -> LogMetrics:
        """The LogMetrics `checkpoint()` described."""
        return cls(last_progress_step=state["last_progress_step"], total_steps=state["total_steps"],
                   by_step={int(k): {str(n): float(x) for n, x in v.items()} for k, v in state["by_step"]},
                   records=int(state["records"]), skipped=int(state["skipped"]), _pending=state["pending"],
                   _max_step=int(state["max_step"]), _pending_which=str(state["pending_which"]),
                   _pending_chars=int(state["pending_chars"]),
                   train_steps=steps_of_ranges(state.get("train_steps") or []))

    def drop_pending(self) -> None:
        """Forget a record cut by a gap in the input."""
        if self._pending is not None:
            self._pending = None
            self.skipped += 1

    def summary(self, earlier: Iterable[Evaluation] = ()) -> ResultSummary:
        """The evaluations so far; `earlier` (previous attempts' logs) are overridden by this log."""
        by_step = {e.step: e for e in earlier}
        by_step.update(self.evaluations)  # this log overrides earlier attempts' steps
        return summarize(sorted(by_step.values(), key=lambda e: e.step), skipped=self.skipped, fmt="console")


_NO_RECORD = frozenset({"None", "{}", "'None'", '"None"'})


def step_ranges(steps: Iterable[int]) -> list[list[int]]:
    """Steps as `[first, last]` runs: a 100,000-step run is a few numbers in a checkpoint or a record."""
    out: list[list[int]] = []
    for step in sorted(set(steps)):
        if out and step == out[-1][1] + 1:
            out[-1][1] = step
        else:
            out.append([step, step])
    return out


def steps_of_ranges(ranges: Iterable[Any]) -> set[int]:
    """The steps `step_ranges` described (malformed runs are ignored; a run holds at most 10**7 steps)."""
    steps: set[int] = set()
    for item in ranges:
        try:
            first, last = int(item[0]), int(item[1])
        except (TypeError, ValueError, IndexError):
            continue
        if 0 <= last - first <= 10**7:
            steps.update(range(first, last + 1))
    return steps


_BATCH = 512


def scan_log_lines(lines: Iterable[str]) -> LogMetrics:
    """The console parser after reading a log given as lines (cleaned here): its evaluations and
    training steps. Lines are looked at in blocks: a block with no marker (almost all of a log)
    is neither cleaned nor parsed."""
    parser = LogMetrics()
    batch: list[str] = []

    def flush() -> None:
        block = "\n".join(batch)
        if parser.pending or any(m in block for m in METRIC_MARKERS):
            parser.feed_lines(clean_lines(batch))
        batch.clear()

    for raw in lines:
        for part in raw.removesuffix("\n").split("\n"):
            batch.append(part[: MAX_RECORD_CHARS + 1024])
        if len(batch) >= _BATCH:
            flush()
    flush()
    return parser


def parse_log_lines(lines: Iterable[str]) -> ResultSummary:
    """Console validation results of a log given as lines (see `scan_log_lines`)."""
    return scan_log_lines(lines).summary()


def parse_log_text(text: str) -> ResultSummary:
    return parse_log_lines(text.split("\n") if text else [])


def merge_file_and_log(file: ResultSummary | None, log: ResultSummary | None) -> ResultSummary:
    """A results file and the console together: the file wins, the log fills steps it lacks
    (console records join the file's primary dataset, so the curve stays one series)."""
    if file is None or not file.evaluations:
        return log if log is not None else (file or ResultSummary())
    if log is None or not log.evaluations:
        return file
    added = _steps_only_logged(file, log)
    if not added:
        return file
    order = {d: i for i, d in enumerate(file.datasets)}
    merged = summarize(sorted([*file.evaluations, *added], key=lambda e: (e.step, e.dataset)),
                       skipped=file.skipped + log.skipped, dataset_order=order,
                       fmt="mixed" if file.format != "console" else "console")
    merged.files = list(file.files)
    return merged


def _steps_only_logged(file: ResultSummary, log: ResultSummary) -> list[Evaluation]:
    """The console's evaluations at steps the file lacks on its primary dataset, moved to that dataset."""
    primary = file.primary_dataset
    have = {e.step for e in file.evaluations if e.dataset == primary}
    return [Evaluation.model_construct(step=e.step, dataset=primary, metrics=e.metrics)
            for e in log.evaluations if e.step not in have]
