"""The failure-signature catalogue: data in catalogue.yaml, compiled once at import.

Keeping the catalogue as data lets the repair step, the metrics and the report all name a
failure by the same stable id, and lets a new signature be added without new code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, model_validator

from statemachine.models import Finding, RepairAction

CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")
TRACEBACK_ID = "python_traceback"
MAX_FINDING_TEXT = 500


class SignatureSpec(BaseModel):
    """One catalogue entry as written in the YAML, validated before compiling."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    patterns: list[str] = Field(default_factory=list)
    fatal: bool
    generic: bool = False
    explanation: str
    repairable: bool
    repair: list[RepairAction] = Field(default_factory=list)

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

    def matches(self, line: str) -> bool:
        """True when any pattern is found in the (cleaned) line."""
        return any(p.search(line) for p in self.patterns)

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


def load_catalogue(path: Path = CATALOGUE_PATH) -> list[Signature]:
    """Read, validate and compile a catalogue file (raises ValueError on a bad entry)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of signatures")
    specs = [SignatureSpec.model_validate(entry) for entry in raw]
    seen: set[str] = set()
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
            )
        )
    if TRACEBACK_ID not in seen:
        raise ValueError(f"{path}: the {TRACEBACK_ID!r} fallback entry is required")
    return result


CATALOGUE: list[Signature] = load_catalogue()
_BY_ID: dict[str, Signature] = {s.id: s for s in CATALOGUE}


def signature(id: str) -> Signature:  # noqa: A002 - the public name other modules use
    """The catalogue entry with this id (KeyError names the unknown id)."""
    try:
        return _BY_ID[id]
    except KeyError:
        raise KeyError(f"unknown failure signature {id!r}") from None


def candidates(block: str) -> list[Signature]:
    """The entries that match at least one line of a '\\n'-joined block of cleaned lines.

    Sound because a match inside one line is also a match in the block (MULTILINE anchors,
    and `.` never crosses a newline); most blocks have no candidate at all, so almost no
    line is matched on its own. Order is catalogue order.
    """
    return [s for s in CATALOGUE if s.matches(block)]


def match_line(line: str, among: list[Signature] | None = None) -> Signature | None:
    """The first entry (in catalogue order) whose patterns match one cleaned line."""
    return next((s for s in (CATALOGUE if among is None else among) if s.matches(line)), None)
