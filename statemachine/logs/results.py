"""Read AgentJet validation and training result files, whatever state they are in.

Two validation formats exist, and one file may mix them (auto-detected per line/block):

- classic: one Python ``dict`` repr per line, written by the trainer at every validation
  (``{'global_steps': 10, ..., 'std_reward': np.float64(0.47), ...}``);
- swarm: markdown blocks ``## Step N`` / ``## Step N (label)`` followed by ``- key: value``
  lines, pass rates as percentages.

The files are append-only and written by processes that get killed and relaunched, so
the parsers never raise, keep the last write of each (step, dataset), skip what is
truncated (counted in ``skipped``), read files line by line with a bounded line length,
and never ``eval`` anything: dict reprs go through :func:`ast.literal_eval` after numpy
and nan/inf tokens are rewritten, with a per-pair regex as a fallback.

Summary semantics (pinned by tests, relied on by reports and the watcher):

- ``evaluations``: one per (step, dataset), last write wins, sorted by (step, dataset).
- ``primary_dataset``: the dataset with the most evaluations; ties go to the first seen.
- ``final``: ``{"step", "dataset", "metrics"}`` of the newest step of the primary dataset.
- ``baseline``: same shape, the primary dataset's step-0 evaluation, else its first one.
- ``best``: ``{metric: {"value", "step"}}`` over the primary dataset, for higher-is-better
  metrics only (see :func:`higher_is_better`); non-finite values are ignored; a tie keeps
  the earliest step.
"""

from __future__ import annotations

import ast
import functools
import io
import math
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, Field

from ajet_runner.statemachine.metric_vocabulary import (
    MEAN_REWARD,
    NUM_PASS_N_TASKS,
    PASS_N,
    PASS_RATE_PREFIX,
    higher_is_better,
    pass_rate,
)
from ajet_runner.statemachine.models import Evaluation

MAX_LINE_CHARS = 4 * 1024 * 1024  # a real result line is < 100 KB; longer ones are garbage
SNIFF_CHARS = 256 * 1024
OWN_FILES = frozenset({"experiment_report.md", "repair_log.md"})
RESULT_SUFFIXES = frozenset({".md", ".txt", ".markdown", ""})
# `previous/` holds earlier runs' files moved aside when a result dir is reused: never this run's.
SKIP_DIRS = frozenset({"previous", ".git", "__pycache__", "checkpoints", "global_step", "node_modules", ".venv"})

STEP_KEYS = ("global_steps", "global_step", "step")
TRAIN_STEP_KEYS = ("training/global_step", "global_steps", "global_step", "step")
DATASET_KEYS = frozenset({"dataset", "target_dataset_name", "dataset_name", "eval_set"})
VAL_HINT_KEYS = (MEAN_REWARD, PASS_RATE_PREFIX, NUM_PASS_N_TASKS, PASS_N, "val-core/")

_OVERLONG = "\x00overlong\n"  # what _iter_lines yields in place of a line too long to hold
_NAN = "\x00ajet-nan\x00"  # stand-in literal for nan: ast.literal_eval has no nan literal

_REWRITE_RE = re.compile(
    r"""(?P<str>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
    r"""|float\(\s*(?P<fq>['"])\s*(?P<fsign>[+-]?)(?P<fword>nan|inf|infinity)\s*(?P=fq)\s*\)"""
    r"""|\b(?:np|numpy)\.(?P<npbool>True|False)_"""
    r"""|\b(?:np|numpy)\.\w+\((?P<npinner>[^()]*)\)"""
    r"""|(?<![\w.])(?P<sign>[+-]?)(?P<word>nan|inf)(?![\w.(])""",
    re.IGNORECASE,
)
_PAIR_VALUE = (
    r"""(?P<val>[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf)"""
    r"""|(?:np|numpy)\.\w+\([^()]*\)|float\([^()]*\)|'[^'\\\n]*'|"[^"\\\n]*"|True|False|None)"""
)
_PAIR_RE = re.compile(
    r"""(?:'(?P<k1>[^'\\\n]*)'|"(?P<k2>[^"\\\n]*)")\s*:\s*""" + _PAIR_VALUE + r"""\s*(?=[,}])"""
)
_NUM = r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf)"
_FAST_ITEM_RE = re.compile(  # one `'key': scalar,` of a flat dict repr, the shape every real line has
    r"""\s*(?:'(?P<k1>[^'\\\n]*)'|"(?P<k2>[^"\\\n]*)")\s*:\s*"""
    r"""(?:(?P<num>""" + _NUM + r""")|(?:np|numpy)\.\w+\(\s*(?P<npnum>""" + _NUM + r""")\s*\)"""
    r"""|'(?P<s1>[^'\\\n]*)'|"(?P<s2>[^"\\\n]*)"|(?P<const>True|False|None))\s*(?P<end>,\s*\}|,|\})"""
)
_HEADING_RE = re.compile(
    r"^#{1,6}\s*step\s*[:#]?\s*(?P<step>[+-]?\d+)\s*(?:\((?P<paren>[^)]*)\)|[:\-–—|]\s*(?P<rest>.*?))?\s*#*\s*$",
    re.IGNORECASE,
)
_ITEM_RE = re.compile(r"^\s*[-*+]\s")
_NUMBER_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?nan|[+-]?inf(?:inity)?)\s*(?P<pct>%)?$",
    re.IGNORECASE,
)
_KEY_SUFFIX_RE = re.compile(r"\s*\([^()]*\)\s*$")
# Swarm clients write `pass@k` / `pass_at_k` (percentages); verl logs `.../TGC@k`: all are the
# share of tasks solved in k tries, which the runner reports as `task_pass_rate@k`.
_PASS_AT_RE = re.compile(r"^(?:.*/)?(?:pass(?:@|_at_?|_)|tgc@)(\d+)$", re.IGNORECASE)


# One shared fields-set for the (many) evaluations we build: model_construct would otherwise
# give each its own set, about a fifth of an evaluation's memory. It holds every field, so
# pydantic's `.add()` on attribute assignment never changes it.
_EVAL_FIELDS = set(Evaluation.model_fields)


ResultFormat = Literal["", "classic", "swarm", "mixed", "console"]
_FORMATS: dict[str, ResultFormat] = {"classic": "classic", "swarm": "swarm", "mixed": "mixed", "console": "console"}


class ResultSummary(BaseModel):
    """Everything a report or the watcher needs from one validation file (or a merge of several)."""

    evaluations: list[Evaluation] = Field(default_factory=list)
    final: dict[str, Any] = Field(default_factory=dict)
    best: dict[str, dict[str, Any]] = Field(default_factory=dict)
    baseline: dict[str, Any] = Field(default_factory=dict)
    primary_dataset: str = ""
    datasets: list[str] = Field(default_factory=list)
    format: ResultFormat = ""  # console: from log lines
    skipped: int = 0
    files: list[str] = Field(default_factory=list)


class TrainStep(BaseModel):
    step: int
    metrics: dict[str, float] = Field(default_factory=dict)


class TrainSummary(BaseModel):
    """Per-training-step metrics, deduplicated by step (last write wins), sorted by step."""

    steps: list[TrainStep] = Field(default_factory=list)
    skipped: int = 0

    def series(self, metric: str) -> list[tuple[int, float]]:
        """(step, value) pairs of one metric, for plots and stall checks."""
        return [(s.step, s.metrics[metric]) for s in self.steps if metric in s.metrics]


def pass_rate_aliases(metrics: dict[str, float]) -> dict[str, float]:
    """Add `task_pass_rate@k` for `pass@k`, `pass_at_k` and `TGC@k` keys, keeping the originals;
    an alias never replaces a key the record already has (its own `task_pass_rate@k` wins)."""
    out = metrics
    for key, value in metrics.items():
        if key.startswith(PASS_RATE_PREFIX):
            continue
        m = _PASS_AT_RE.match(key)
        if m is not None:
            if out is metrics:
                out = dict(metrics)
            out.setdefault(pass_rate(m.group(1)), value)
    return out


@functools.lru_cache(maxsize=4096)
def normalize_key(key: str) -> str:
    """`num_pass_n_tasks(pass@4)` → `num_pass_n_tasks`; markdown emphasis and backticks dropped."""
    key = key.strip().strip("*`_ ").strip()
    return _KEY_SUFFIX_RE.sub("", key) or key


# ----------------------------------------------------------------------------- values


def _to_float(value: Any) -> float | None:
    """A metric value as float, or None when it is not a number (bools are not metrics)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            number = float(value)
            return math.nan if number != number else number  # one nan object: equal dicts compare equal
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if value == _NAN:
        return math.nan
    return None


def _parse_text_value(text: str) -> tuple[float | None, bool]:
    """A swarm `- key: value` value: (number or None, was a percentage)."""
    text = text.strip().strip("`*").strip()
    if text.startswith(("np.", "numpy.", "float(")):
        return _to_float(_literal_scalar(text)), False
    m = _NUMBER_RE.match(text)
    if not m:
        return None, False
    if m.group("pct"):
        try:  # Decimal keeps `20.83%` → 0.2083 exactly as written
            return _to_float(float(Decimal(m.group("num")) / 100)), True
        except (InvalidOperation, ValueError):
            return None, False
    try:
        return _to_float(float(m.group("num"))), False
    except ValueError:
        return None, False


def _as_step(value: Any) -> int | None:
    """An integral step number, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        number, _ = _parse_text_value(value)
        return _as_step(number) if number is not None else None
    return None


# ----------------------------------------------------------------------------- dict lines


def _rewrite_match(m: re.Match[str]) -> str:
    if m.group("str") is not None:
        return m.group("str")
    if m.group("fword") is not None:
        return _special(m.group("fsign"), m.group("fword"))
    if m.group("npbool") is not None:
        return m.group("npbool").capitalize()
    if m.group("npinner") is not None:
        return _rewrite_numpy(m.group("npinner"))
    return _special(m.group("sign"), m.group("word"))


def _special(sign: str, word: str) -> str:
    if word.lower() == "nan":
        return repr(_NAN)
    return "-1e999" if sign == "-" else "1e999"  # float literal overflow is inf


def _rewrite_numpy(text: str) -> str:
    """Make numpy/nan/inf reprs into literals ast.literal_eval accepts; strings stay untouched."""
    return _REWRITE_RE.sub(_rewrite_match, text)


def _literal_dict(text: str) -> dict[Any, Any] | None:
    try:
        value = ast.literal_eval(_rewrite_numpy(text))
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, MemoryError, RecursionError, ...: not a dict
        return None
    return value if isinstance(value, dict) else None


def _pairs_dict(text: str) -> dict[str, Any]:
    """Fallback for lines with reprs literal_eval refuses (`array(...)`, `tensor(...)`)."""
    out: dict[str, Any] = {}
    for m in _PAIR_RE.finditer(text):
        key = m.group("k1") if m.group("k1") is not None else m.group("k2")
        parsed = _literal_scalar(m.group("val"))
        if parsed is not _MISSING:
            out[key] = parsed
    return out


_MISSING = object()


def _literal_scalar(text: str) -> Any:
    try:
        return ast.literal_eval(_rewrite_numpy(text))
    except Exception:  # noqa: BLE001 - whatever literal_eval raises: the value is missing
        return _MISSING


_CONSTS: dict[str, Any] = {"True": True, "False": False, "None": None}


def _fast_dict(line: str) -> dict[str, Any] | None:
    """A flat `{'k': scalar, ...}` line parsed by one regex pass (no ast); None when the line
    has any other shape, so the caller falls back to ast.literal_eval."""
    if not line.startswith("{"):
        return None
    if line[1:].strip() == "}":
        return {}
    out: dict[str, Any] = {}
    pos = 1
    closed = False
    for m in _FAST_ITEM_RE.finditer(line, 1):
        if m.start() != pos or closed:
            return None  # something between items that is not a flat scalar item
        key, value = _fast_item(m)
        out[key] = value
        pos = m.end()
        closed = m.group("end") != ","
    if not closed or line[pos:].strip():
        return None
    return out


def _fast_item(m: re.Match[str]) -> tuple[str, Any]:
    """The key and value of one `_FAST_ITEM_RE` match: a number (nan for NaN), a constant or a string."""
    k1, k2, num, npnum, s1, s2, const, _end = m.groups()
    key = k1 if k1 is not None else k2
    num = num or npnum
    if num is not None:
        value = float(num)
        return key, value if value == value else math.nan
    if const is not None:
        return key, _CONSTS[const]
    return key, s1 if s1 is not None else s2


def _parse_dict_line(line: str) -> tuple[dict[Any, Any] | None, int]:
    """A whole dict-repr line → (dict or None, records lost on this line)."""
    data = _fast_dict(line)
    if data is not None:
        return data, 0
    data = _literal_dict(line)
    if data is not None:
        return data, 0
    # A writer killed mid-line, then relaunched, leaves `{'global_steps': 2, 'pa{'global_steps': 2, ...}`.
    cut = max(line.rfind("{'"), line.rfind('{"'))
    if cut > 0:
        data = _literal_dict(line[cut:])
        if data is not None:
            return data, 1
    pairs = _pairs_dict(line)
    return (pairs or None), 0


def _item_body(line: str) -> str | None:
    """The text after a markdown bullet (`- `, `* `, `+ `), else None. String ops, not a regex:
    this runs on every line of a swarm file."""
    s = line.lstrip()
    if len(s) >= 2 and s[0] in "-*+" and s[1] in " \t":
        return s[2:]
    return None


# ----------------------------------------------------------------------------- line reading


def _iter_lines(stream: IO[str]) -> Iterator[str]:
    """Lines with their endings, each at most MAX_LINE_CHARS; an overlong line comes out as one
    `\\x00`-marked placeholder so the caller can count it without holding it in memory."""
    while True:
        chunk = stream.readline(MAX_LINE_CHARS)
        if not chunk:
            return
        if len(chunk) < MAX_LINE_CHARS or chunk.endswith(("\n", "\r")):
            yield chunk
            continue
        while chunk and not chunk.endswith(("\n", "\r")):
            chunk = stream.readline(MAX_LINE_CHARS)
        yield _OVERLONG


def _open_text(path: str | os.PathLike[str]) -> IO[str]:
    return open(path, encoding="utf-8", errors="replace", newline="")


# ----------------------------------------------------------------------------- val parsing


def _classic_fields(data: dict[Any, Any]) -> tuple[str, dict[str, float]]:
    """(dataset, numeric metrics by normalized name) of a classic dict line; the step keys are neither."""
    dataset = ""
    metrics: dict[str, float] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            continue
        name = normalize_key(key)
        if name in DATASET_KEYS:
            if isinstance(value, str):
                dataset = value.strip()
            continue
        if name in STEP_KEYS:
            continue
        number = _to_float(value)
        if number is not None:
            metrics[name] = number
    return dataset, metrics


@dataclass(slots=True)
class _Block:
    """One swarm `## Step N` block being read."""

    step: int
    label: str
    chain: list[int] = field(default_factory=list)  # hash of each prefix of the key sequence
    metrics: dict[str, float] = field(default_factory=dict)
    dataset: str = ""
    malformed: bool = False
    open_last_line: bool = False


@dataclass(slots=True)
class _Kept:
    seq: int
    step: int
    dataset: str
    metrics: dict[str, float]
    shape: int | None = None  # id of a swarm block's key sequence
    unnamed_ordinal: int = -1  # >= 0 for swarm blocks without a dataset name


class _ValParser:
    """Streaming state for one validation file: dedupes as it goes, finishes in `summary()`."""

    def __init__(self) -> None:
        self.kept: dict[tuple[int, str | int], _Kept] = {}
        self.skipped = 0
        self.seq = 0
        self.block: _Block | None = None
        self.shape_counts: Counter[int] = Counter()
        self.proper_prefixes: set[int] = set()
        self.formats: set[str] = set()
        self.run_step: int | None = None
        self.run_len = 0
        self.last_was_unnamed = False
        self.run_lengths: Counter[int] = Counter()

    # -- feeding
    def feed(self, raw: str) -> None:
        line = raw.rstrip("\r\n")
        if self.block is not None:
            body = _item_body(line)
            if body is not None:
                self._block_item(body, ended=len(line) != len(raw))
                return
            if not line.strip():
                return
            self._close_block()
        stripped = line.strip().lstrip("\ufeff\x00").strip()
        if raw.startswith(_OVERLONG):
            self.skipped += 1
        elif stripped.startswith("{"):
            self._dict_line(stripped)
        elif stripped.startswith("#"):
            m = _HEADING_RE.match(stripped)
            if m:
                label = (m.group("paren") or m.group("rest") or "").strip().strip("`*").strip()
                self.block = _Block(step=int(m.group("step")), label=label)

    def finish(self) -> None:
        if self.block is not None:
            self._close_block()
        self._end_run()

    # -- classic
    def _dict_line(self, line: str) -> None:
        if not line.endswith("}"):
            self.skipped += 1  # truncated: the writer died mid-line
            return
        data, lost = _parse_dict_line(line)
        self.skipped += lost
        step = _step_in(data, STEP_KEYS) if data is not None else None
        if data is None or step is None:
            self.skipped += 1
            return
        dataset, metrics = _classic_fields(data)
        self.formats.add("classic")
        self._end_run()
        self._keep(step, dataset, metrics)

    # -- swarm
    def _block_item(self, body: str, ended: bool) -> None:
        block = self.block
        assert block is not None
        block.open_last_line = not ended
        key, colon, raw_value = body.partition(":")
        key = key.strip()
        if not colon or not key:
            block.malformed = True  # `- total_tas`: a line cut before its colon
            return
        name = normalize_key(key)
        block.chain.append(hash((block.chain[-1] if block.chain else 0, name)))
        if name in DATASET_KEYS:
            block.dataset = raw_value.strip().strip("`*'\" ")
            return
        if name in STEP_KEYS:
            return
        try:
            number: float | None = float(raw_value)  # the common case: a plain number
            if number != number:
                number = math.nan
        except ValueError:
            number, _ = _parse_text_value(raw_value)
        if number is not None:
            block.metrics[name] = number

    def _close_block(self) -> None:
        block, self.block = self.block, None
        assert block is not None
        if block.malformed or block.open_last_line or not block.metrics:
            self.skipped += 1  # cut mid-line, or nothing but a heading
            return
        shape = block.chain[-1]
        self.shape_counts[shape] += 1
        self.proper_prefixes.update(block.chain[:-1])
        self.formats.add("swarm")
        block.metrics = pass_rate_aliases(block.metrics)
        dataset = block.dataset or block.label
        if dataset:
            self._end_run()
            self._keep(block.step, dataset, block.metrics, shape)
            return
        if self.last_was_unnamed and self.run_step == block.step:
            self.run_len += 1
        else:
            self._end_run()
            self.run_step, self.run_len = block.step, 1
        self._keep(block.step, "", block.metrics, shape, ordinal=self.run_len - 1)
        self.last_was_unnamed = True

    def _end_run(self) -> None:
        if self.run_len:
            self.run_lengths[self.run_len] += 1
        self.run_step, self.run_len, self.last_was_unnamed = None, 0, False

    def _keep(
        self, step: int, dataset: str, metrics: dict[str, float], shape: int | None = None, ordinal: int = -1
    ) -> None:
        self.seq += 1
        slot: str | int = dataset if ordinal < 0 else ordinal
        self.kept[(step, slot)] = _Kept(self.seq, step, dataset, metrics, shape, ordinal)

    # -- result
    def summary(self) -> ResultSummary:
        sets = _unnamed_set_count(self.run_lengths)
        # A writer killed mid-block leaves a block whose keys are a strict prefix of the usual
        # ones; a key sequence seen only once and extended elsewhere is such a block. (A format
        # that changed between relaunches repeats its shorter sequence, so it is kept.)
        partial = {s for s, n in self.shape_counts.items() if n == 1 and s in self.proper_prefixes}
        self.skipped += len(partial)
        final = self._surviving(partial, sets)
        order: dict[str, int] = {}
        for kept in sorted(final.values(), key=lambda k: k.seq):
            order.setdefault(kept.dataset, len(order))
        evaluations = [
            Evaluation.model_construct(_EVAL_FIELDS, step=k.step, dataset=k.dataset, metrics=k.metrics)
            for k in sorted(final.values(), key=lambda k: (k.step, k.dataset))
        ]
        return summarize(evaluations, skipped=self.skipped, dataset_order=order, fmt=_format_of(self.formats))

    def _surviving(self, partial: set[int], sets: int) -> dict[tuple[int, str], _Kept]:
        """The last write of each (step, dataset), in the order of the surviving writes; blocks cut short
        (`partial` shapes) dropped, unnamed datasets named `setN` when the runs hold `sets` of them."""
        final: dict[tuple[int, str], _Kept] = {}
        for kept in sorted(self.kept.values(), key=lambda k: k.seq):
            if kept.shape in partial:
                continue
            if kept.unnamed_ordinal >= 0 and sets > 1:
                kept.dataset = f"set{kept.unnamed_ordinal % sets + 1}"
            key = (kept.step, kept.dataset)
            if key in final:
                del final[key]  # re-insert so first_seen order follows the surviving write
            final[key] = kept
        return final


def _unnamed_set_count(run_lengths: Counter[int]) -> int:
    """How many unnamed eval sets one validation writes: the most common run length of
    consecutive same-step blocks (ties → the smallest, since a relaunch doubles a run)."""
    if not run_lengths:
        return 1
    top = max(run_lengths.values())
    return min(length for length, count in run_lengths.items() if count == top)


def summarize(
    evaluations: list[Evaluation],
    skipped: int = 0,
    dataset_order: dict[str, int] | None = None,
    fmt: str = "",
) -> ResultSummary:
    """Compute primary dataset, final, baseline and best from deduplicated evaluations."""
    order = dataset_order or {}
    counts = Counter(e.dataset for e in evaluations)
    datasets = sorted(counts, key=lambda d: (order.get(d, len(order)), d))
    rank = {d: i for i, d in enumerate(datasets)}
    primary = max(datasets, key=lambda d: (counts[d], -rank[d])) if datasets else ""
    mine = sorted((e for e in evaluations if e.dataset == primary), key=lambda e: e.step)
    final = baseline = {}
    if mine:
        final = _entry(mine[-1])
        baseline = _entry(next((e for e in mine if e.step == 0), mine[0]))
    return ResultSummary(
        evaluations=evaluations,
        final=final,
        best=dict(sorted(_best_values(mine).items())),
        baseline=baseline,
        primary_dataset=primary,
        datasets=datasets,
        format=_FORMATS.get(fmt, ""),
        skipped=skipped,
    )


def _entry(ev: Evaluation) -> dict[str, Any]:
    """An evaluation as the summary's final and baseline hold it."""
    return {"step": ev.step, "dataset": ev.dataset, "metrics": dict(ev.metrics)}


def _best_values(evaluations: list[Evaluation]) -> dict[str, dict[str, Any]]:
    """Per metric where higher is better, its highest finite value and the step of its first occurrence."""
    best: dict[str, dict[str, Any]] = {}
    for ev in evaluations:
        for name, value in ev.metrics.items():
            if not higher_is_better(name) or not math.isfinite(value):
                continue
            if name not in best or value > best[name]["value"]:
                best[name] = {"value": value, "step": ev.step}
    return best


def parse_val_lines(lines: Iterable[str]) -> ResultSummary:
    """Parse validation results from lines, with or without their endings (each is taken as
    whole; use parse_val_text or parse_val_file to have a cut last line detected)."""
    parser = _ValParser()
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            parser.skipped += 1
            continue
        parser.feed(line if line.endswith(("\n", "\r")) else line + "\n")
    return _finish(parser)


def _finish(parser: _ValParser) -> ResultSummary:
    parser.finish()
    return parser.summary()


def parse_val_text(text: str) -> ResultSummary:
    """Parse the text of a validation file. A missing final newline marks a truncated last line."""
    parser = _ValParser()
    for line in text.splitlines(keepends=True):
        if len(line) > MAX_LINE_CHARS:
            parser.skipped += 1
            continue
        parser.feed(line)
    return _finish(parser)


def parse_val_file(path: str | os.PathLike[str], start: int = 0) -> ResultSummary:
    """Parse one validation file, streaming, from byte `start` (what a run appended after an
    earlier run's lines); an unreadable file gives an empty summary."""
    parser = _ValParser()
    try:
        with open(path, "rb") as raw:
            if start > 0:
                raw.seek(start)
            with io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="") as stream:
                for line in _iter_lines(stream):
                    parser.feed(line)
    except OSError:
        pass
    summary = _finish(parser)
    summary.files = [str(path)]
    return summary


def parse_val_files(
    paths: Iterable[str | os.PathLike[str]], root: str | os.PathLike[str] = "",
    starts: Mapping[str, int] | None = None,
) -> ResultSummary:
    """Merge several validation files. With more than one file, each dataset name is
    qualified by the file's path relative to `root` (`saved_val_result/a.md:main_val_dataset`)
    so that two files never overwrite each other's evaluations. `starts` maps a path to the
    byte offset its own part begins at (what earlier runs wrote before is not read)."""
    files = [Path(p) for p in paths]
    offsets = {str(k): int(v) for k, v in (starts or {}).items()}
    if len(files) == 1:
        return parse_val_file(files[0], start=offsets.get(str(files[0]), 0))
    evaluations: list[Evaluation] = []
    order: dict[str, int] = {}
    skipped = 0
    formats: set[str] = set()
    for path in files:
        part = parse_val_file(path, start=offsets.get(str(path), 0))
        skipped += part.skipped
        if part.format:
            formats.add(part.format)
        name = _file_label(path, root)
        for ev in part.evaluations:
            dataset = f"{name}:{ev.dataset}" if ev.dataset else name
            order.setdefault(dataset, len(order))
            evaluations.append(Evaluation.model_construct(step=ev.step, dataset=dataset, metrics=ev.metrics))
    evaluations.sort(key=lambda e: (e.step, e.dataset))
    summary = summarize(evaluations, skipped=skipped, dataset_order=order, fmt=_format_of(formats))
    summary.files = [str(p) for p in files]
    return summary


def _file_label(path: Path, root: str | os.PathLike[str]) -> str:
    """The file's path relative to `root` (as given when it lies outside, or without a root)."""
    try:
        return str(path.relative_to(root)) if root else str(path)
    except ValueError:
        return str(path)


def _format_of(formats: set[str]) -> str:
    """The format of results written in `formats`: the one, "mixed" for several, "" for none."""
    return "mixed" if len(formats) > 1 else next(iter(formats), "")


def latest_metrics(summary: ResultSummary) -> dict[str, float]:
    """The newest evaluation of the primary dataset as a flat dict, `step` included."""
    if not summary.final:
        return {}
    out = dict(summary.final.get("metrics", {}))
    out["step"] = float(summary.final["step"])
    return out


# ----------------------------------------------------------------------------- train file


def parse_train_lines(lines: Iterable[str]) -> TrainSummary:
    """Per-step training metrics from dict-repr lines; never raises."""
    steps: dict[int, dict[str, float]] = {}
    skipped = 0
    for raw in lines:
        line = raw.strip().lstrip("\ufeff\x00").strip()
        if raw.startswith(_OVERLONG) or len(line) > MAX_LINE_CHARS:
            skipped += 1
            continue
        if not line.startswith("{"):
            continue
        read, lost = _train_line(line)
        skipped += lost
        if read is not None:
            step, metrics = read
            steps.pop(step, None)  # a step written again counts where it was last written
            steps[step] = metrics
    return TrainSummary(
        steps=[TrainStep.model_construct(step=s, metrics=m) for s, m in sorted(steps.items())],
        skipped=skipped,
    )


def _train_line(line: str) -> tuple[tuple[int, dict[str, float]] | None, int]:
    """(step, numeric metrics) of a dict line (None when it is cut short, unreadable or has no step), and
    how many lines it counts as skipped."""
    if not line.endswith("}"):
        return None, 1
    data, lost = _parse_dict_line(line)
    step = _step_in(data, TRAIN_STEP_KEYS) if data is not None else None
    if data is None or step is None:
        return None, lost + 1
    metrics: dict[str, float] = {}
    for key, value in data.items():
        number = _to_float(value)
        if isinstance(key, str) and number is not None and key not in TRAIN_STEP_KEYS:
            metrics[sys.intern(key)] = number
    return (step, metrics), lost


def _step_in(data: dict[Any, Any], keys: Iterable[str]) -> int | None:
    """The step under the first of `keys` the line holds (None when none holds a step)."""
    return next((_as_step(data[k]) for k in keys if k in data), None)


def parse_train_file(path: str | os.PathLike[str]) -> TrainSummary:
    """Parse a train file (`train_print_to_markdown_file_path`), streaming."""
    try:
        with _open_text(path) as stream:
            return parse_train_lines(_iter_lines(stream))
    except OSError:
        return TrainSummary()


# ----------------------------------------------------------------------------- discovery


def classify_file(path: str | os.PathLike[str]) -> Literal["val", "train", ""]:
    """What a file holds, judged from its first SNIFF_CHARS characters.

    train: a dict line with `training/global_step` (train lines at test steps also carry
    the validation keys, so this is checked first); val: a dict line with a step key and a
    validation metric, or a `## Step N` heading followed by a validation `- key: value`.
    """
    try:
        with _open_text(path) as stream:
            lines = stream.read(SNIFF_CHARS).splitlines()
    except OSError:
        return ""
    if any(s.startswith("{") and "training/global_step" in s for s in map(str.strip, lines)):
        return "train"
    return "val" if _shows_validation(lines) else ""


def _shows_validation(lines: list[str]) -> bool:
    """A dict line with a step key and a validation metric, or a validation `- key: value` item in the
    block under a `## Step N` heading."""
    in_block = False
    for line in lines:
        s = line.strip()
        if s.startswith("{"):
            in_block = False
            if _val_dict_line(s):
                return True
        elif _HEADING_RE.match(s):
            in_block = True
        elif in_block and _ITEM_RE.match(line):
            if _has_val_hint(s):
                return True
        elif s:
            in_block = False
    return False


def _has_val_hint(s: str) -> bool:
    """Whether the line names a validation metric."""
    return any(h in s for h in VAL_HINT_KEYS)


def _val_dict_line(s: str) -> bool:
    """Whether a dict line holds a (quoted) step key and a validation metric."""
    return any(f"'{k}'" in s or f'"{k}"' in s for k in STEP_KEYS) and _has_val_hint(s)


def _candidates(root: Path, max_depth: int = 4) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".") and depth < max_depth
        )
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if _may_hold_results(name, path) and path.is_file():
                yield path


def _may_hold_results(name: str, path: Path) -> bool:
    """A file named like results: a result suffix, not hidden, not one of the runner's own files."""
    return name not in OWN_FILES and path.suffix.lower() in RESULT_SUFFIXES and not name.startswith(".")


def find_result_files(path: str | os.PathLike[str]) -> list[Path]:
    """Validation files: the file itself, or those found under a result dir (subdirs such as
    `saved_val_result/` included; our own reports and train files excluded), sorted by path."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        return []
    return sorted(c for c in _candidates(p) if classify_file(c) == "val")


def find_train_files(path: str | os.PathLike[str]) -> list[Path]:
    """Train files under a result dir (or the file itself when it is one)."""
    p = Path(path)
    if p.is_file():
        return [p] if classify_file(p) == "train" else []
    if not p.is_dir():
        return []
    return sorted(c for c in _candidates(p) if classify_file(c) == "train")
