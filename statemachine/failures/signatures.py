"""The failure-signature catalogue: data in catalogue.yaml, compiled once at import.

Keeping the catalogue as data lets the repair step, the metrics and the report all name a
failure by the same stable id, and lets a new signature be added without new code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ajet_runner.statemachine.logs.lineshape import DEFAULT_SHAPES, Shape
from ajet_runner.statemachine.models import Finding, RepairAction

CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")
TRACEBACK_ID = "python_traceback"
MAX_FINDING_TEXT = 500


class TransientSpec(BaseModel):
    """A cause that may pass by itself (a network outage, a GPU busy with someone else's job): an
    unchanged relaunch is allowed after each wait in `backoff_seconds` (so as many repeats as waits).
    `until`: a condition the runner watches during the wait and that ends it early (`gpus_free`: every
    GPU nvidia-smi lists is at least 95 % free, the launcher's own rule)."""

    model_config = ConfigDict(extra="forbid")

    backoff_seconds: list[float] = Field(min_length=1)
    until: Literal["gpus_free"] | None = None
    # A relaunch WITH a fix waits too: the n-th failure of this cause waits the n-th backoff (the last one past
    # the list). A network outage does not pass in the seconds a relaunch takes (a proxy fix may need it too).
    before_every_relaunch: bool = False

    @model_validator(mode="after")
    def _non_negative(self) -> TransientSpec:
        if any(not 0 <= s <= 3600 for s in self.backoff_seconds):
            raise ValueError("backoff_seconds must each be between 0 and 3600")
        return self


class BenignSpec(BaseModel):
    """A benign look-alike of an entry: a line its patterns match that is not the failure.

    `example` is a real-looking line (tests prove it never becomes a verdict); `pattern`, when given,
    makes every line it matches a look-alike of this entry whatever its shape (a veto)."""

    model_config = ConfigDict(extra="forbid")

    example: str = Field(min_length=1)
    why: str = Field(min_length=1)
    pattern: str | None = None

    @model_validator(mode="after")
    def _pattern_matches_example(self) -> BenignSpec:
        if self.pattern is not None:
            try:
                compiled = re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"bad benign pattern {self.pattern!r}: {exc}") from None
            if compiled.search(self.example) is None:
                raise ValueError(f"the benign pattern {self.pattern!r} does not match its own example")
        return self


class SignatureSpec(BaseModel):
    """One catalogue entry as written in the YAML, validated before compiling."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    patterns: list[str] = Field(default_factory=list)
    fatal: bool
    generic: bool = False
    explanation: str
    repairable: bool
    repair: list[RepairAction] = Field(default_factory=list)
    settle_seconds: float | None = Field(default=None, ge=0, le=600)
    transient: TransientSpec | None = None
    benign: list[BenignSpec] = Field(default_factory=list)
    shapes: list[Shape] = Field(default_factory=list)  # evidence shapes besides lineshape.DEFAULT_SHAPES
    if_it_persists: str = ""  # what a person does when the repairs and waits are spent (the give-up reason ends so)

    @model_validator(mode="after")
    def _plan_matches_repairable(self) -> SignatureSpec:
        if self.repairable != bool(self.repair):
            raise ValueError(f"{self.id}: repairable must be true exactly when a repair plan is given")
        return self


@dataclass(frozen=True)
class Signature:
    """A compiled catalogue entry."""

    id: str
    patterns: tuple[re.Pattern[str], ...]
    fatal: bool
    generic: bool
    explanation: str
    repairable: bool
    repair: tuple[RepairAction, ...]
    settle_seconds: float | None = None  # a live process may linger this long after the line (None: default)
    transient: TransientSpec | None = None  # an unchanged relaunch is allowed after a backoff (see TransientSpec)
    benign: tuple[BenignSpec, ...] = ()
    vetoes: tuple[re.Pattern[str], ...] = ()  # the benign entries' patterns
    shapes: frozenset[Shape] = DEFAULT_SHAPES  # the line shapes that count as evidence for this entry
    if_it_persists: str = ""  # what a person does when the repairs and waits are spent

    def matches(self, line: str) -> bool:
        """True when any pattern is found in the (cleaned) line: a candidate, not yet evidence."""
        return any(p.search(line) for p in self.patterns)

    def starts(self, line: str) -> bool:
        """True when a pattern matches at the very start of the (cleaned) line."""
        return any(p.match(line) for p in self.patterns)

    def veto_reason(self, line: str) -> str | None:
        """Why the line is a known look-alike of this entry (one of its benign patterns matches), or None."""
        if not self.vetoes:
            return None
        vetoing = [b for b in self.benign if b.pattern is not None]
        return next((b.why for b, p in zip(vetoing, self.vetoes, strict=True) if p.search(line)), None)

    def vetoed(self, line: str) -> bool:
        return self.veto_reason(line) is not None

    def finding(self, line: int, text: str, *, fatal: bool | None = None, note: str = "") -> Finding:
        """A Finding for this signature at 1-based `line`; each gets its own copy of the plan."""
        explanation = f"{self.explanation} {note}".strip() if note else self.explanation
        return Finding(
            signature=self.id,
            fatal=self.fatal if fatal is None else fatal,
            line=line,
            text=text[:MAX_FINDING_TEXT],
            explanation=explanation,
            repairable=self.repairable,
            repair=[a.model_copy(deep=True) for a in self.repair],
        )


def _compile(specs: Sequence[SignatureSpec], path: Path, taken: set[str] | None = None) -> list[Signature]:
    seen: set[str] = set(taken or ())
    result: list[Signature] = []
    for spec in specs:
        if spec.id in seen:
            raise ValueError(f"{path}: duplicate signature id {spec.id!r}")
        seen.add(spec.id)
        try:
            # MULTILINE: ^ and $ are line anchors, so a pattern can scan a block of lines at once.
            patterns = tuple(re.compile(p, re.MULTILINE) for p in spec.patterns)
        except re.error as exc:
            raise ValueError(f"{path}: {spec.id}: bad pattern: {exc}") from exc
        result.append(
            Signature(
                id=spec.id,
                patterns=patterns,
                fatal=spec.fatal,
                generic=spec.generic,
                explanation=" ".join(spec.explanation.split()),
                repairable=spec.repairable,
                repair=tuple(spec.repair),
                settle_seconds=spec.settle_seconds,
                transient=spec.transient,
                if_it_persists=spec.if_it_persists.strip(),
                benign=tuple(spec.benign),
                vetoes=tuple(re.compile(b.pattern) for b in spec.benign if b.pattern is not None),
                shapes=DEFAULT_SHAPES | frozenset(spec.shapes),
            )
        )
    return result


def load_catalogue(path: Path = CATALOGUE_PATH) -> list[Signature]:
    """Read, validate and compile a catalogue file (raises ValueError on a bad entry). Read with libyaml's safe
    loader where PyYAML has it: 4 ms instead of 32 for ours, paid by every watcher's start."""
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of signatures")
    specs = [SignatureSpec.model_validate(entry) for entry in raw]
    result = _compile(specs, path)
    if TRACEBACK_ID not in {s.id for s in result}:
        raise ValueError(f"{path}: the {TRACEBACK_ID!r} fallback entry is required")
    return result


class SiteSignatureSpec(SignatureSpec):
    """An entry of a site's catalogue extension: specific (patterns, not generic), no unknown keys.

    `suggested` (where an adviser's suggestion came from) is allowed so an adopted suggestion can be
    copied as it is.
    """

    model_config = ConfigDict(extra="forbid")

    patterns: list[str] = Field(min_length=1)
    suggested: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _specific(self) -> SiteSignatureSpec:
        if self.generic:
            raise ValueError(f"{self.id}: a site entry must be specific (generic: false)")
        return self


def load_extension(path: Path | str) -> list[Signature]:
    """Read and validate a site catalogue extension; ValueError names the file, the entry and the problem."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the site catalogue: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of catalogue entries")
    specs = [_site_spec(entry, i, path) for i, entry in enumerate(raw, 1)]
    builtin = {s.id for s in load_catalogue()}
    clash = [s.id for s in specs if s.id in builtin]
    if clash:
        raise ValueError(f"{path}: {', '.join(clash)}: the built-in catalogue already has this id")
    return _compile(specs, path)


def _site_spec(entry: Any, i: int, path: Path) -> SiteSignatureSpec:
    """Entry `i` of a site catalogue, validated; ValueError names the file, the entry and each problem."""
    try:
        return SiteSignatureSpec.model_validate(entry)
    except ValidationError as exc:
        name = entry.get("id", f"entry {i}") if isinstance(entry, dict) else f"entry {i}"
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: {name}: {problems}") from None


def use_extension(path: Path | str) -> list[str]:
    """Load a site extension into the catalogue (before the generic entries); returns the ids added.

    Idempotent: entries already installed from an earlier call are replaced, not doubled.
    """
    extra = load_extension(path)
    ids = {s.id for s in extra}
    CATALOGUE[:] = [s for s in CATALOGUE if s.id not in ids]
    at = next((i for i, s in enumerate(CATALOGUE) if s.generic), len(CATALOGUE))
    CATALOGUE[at:at] = extra
    _BY_ID.clear()
    _BY_ID.update({s.id: s for s in CATALOGUE})
    return [s.id for s in extra]


CATALOGUE: list[Signature] = load_catalogue()
_BY_ID: dict[str, Signature] = {s.id: s for s in CATALOGUE}


def signature(id: str) -> Signature:  # `id` (a builtin): the public name other modules use
    """The catalogue entry with this id (KeyError names the unknown id)."""
    try:
        return _BY_ID[id]
    except KeyError:
        raise KeyError(f"unknown failure signature {id!r}") from None


PREFILTER_MAX_CHARS = 16384  # above this, per-pattern searches (literal-prefix scans in C) are faster
_BACKREF = re.compile(r"\\[1-9]|\(\?P=")
_prefilter: tuple[tuple[Signature, ...], re.Pattern[str] | None] = ((), None)


def _combined() -> re.Pattern[str] | None:
    """Every pattern of the catalogue as one alternation: one search tells a small block has no
    candidate at all (the common case), instead of ~80 searches. None when a pattern cannot be
    combined soundly (a back-reference or a group name used twice)."""
    global _prefilter
    key = tuple(CATALOGUE)
    if _prefilter[0] != key:
        sources = [p.pattern for s in CATALOGUE for p in s.patterns]
        combined = None
        if not any(_BACKREF.search(src) for src in sources):
            try:
                combined = re.compile("|".join(f"(?:{src})" for src in sources), re.MULTILINE)
            except re.error:
                combined = None
        _prefilter = (key, combined)
    return _prefilter[1]


def candidates(block: str) -> list[Signature]:
    """The entries that match at least one line of a '\\n'-joined block of cleaned lines.

    Sound because a match inside one line is also a match in the block (MULTILINE anchors,
    and `.` never crosses a newline); most blocks have no candidate at all, so almost no
    line is matched on its own. Order is catalogue order.
    """
    if len(block) <= PREFILTER_MAX_CHARS and (pre := _combined()) is not None and pre.search(block) is None:
        return []
    return [s for s in CATALOGUE if s.matches(block)]


def match_line(line: str, among: list[Signature] | None = None) -> Signature | None:
    """The first entry (in catalogue order) whose patterns match one cleaned line."""
    return next((s for s in (CATALOGUE if among is None else among) if s.matches(line)), None)
