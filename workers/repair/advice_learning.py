"""Learning from the adviser: an advised repair that led to a completed run becomes a suggestion.

Suggestions are appended (under an exclusive lock, as several slots may finish at once) to a
site YAML file of catalogue entries that `ajet-runner catalogue suggestions` lists; a person
reviews one and copies it into the file named by AJET_RUNNER_CATALOGUE_EXTRA to adopt it.
"""

from __future__ import annotations

import fcntl
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ajet_runner.statemachine.fixes.advice import AdviceChange
from ajet_runner.statemachine.fixes.advice_context import suggested_entry
from ajet_runner.store.records import Context, RepairRecord

log = logging.getLogger(__name__)


def append_suggestion(path: Path, entry: dict[str, Any]) -> bool:
    """Append one entry to the YAML list in `path` (created with its directory when missing).

    False when an entry with its id is already there (a re-adopted driver collecting again).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=100)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.seek(0)
            try:
                existing = yaml.safe_load(fh.read()) or []
            except yaml.YAMLError:
                existing = []  # a hand-edited file with a mistake: still append, the CLI will say so
            if isinstance(existing, list) and any(isinstance(e, dict) and e.get("id") == entry["id"]
                                                  for e in existing):
                return False
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                fh.write("# Catalogue entries suggested by advised repairs that led to a completed run.\n"
                         "# Review one, then copy it into the file named by AJET_RUNNER_CATALOGUE_EXTRA.\n")
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return True


def learn_from_advice(ctx: Context, outcome: str, *, exp_id: str, suggestions_file: Path) -> tuple[str, str] | None:
    """After collecting: record a suggestion when the run completed thanks to advice.

    Returns (model, "then <outcome>") for ajet_runner_advised_repairs_total for the last advised relaunch,
    or None. Never raises: a read-only site file must not keep an experiment from finishing.
    """
    rec = _last_advised_relaunch(ctx)
    if rec is None:
        return None
    stat = (rec.advised_by or "unknown", f"then {outcome or 'unknown'}")
    if outcome != "completed":
        return stat
    text = rec.signature_text.strip()
    if not text:
        rec.suggestion = "no error line to recognise it by; no catalogue entry suggested"
        return stat
    _suggest(rec, text, exp_id, suggestions_file)
    return stat


def _last_advised_relaunch(ctx: Context) -> RepairRecord | None:
    """The repair the adviser planned that relaunched into the last attempt, if any."""
    last = max((a.number for a in ctx.attempts), default=0)
    advised = [r for r in ctx.repairs if r.source == "adviser" and r.relaunched and r.attempt == last - 1]
    return advised[-1] if advised else None


def _suggest(rec: RepairRecord, text: str, exp_id: str, suggestions_file: Path) -> None:
    """Append the advised fix to the site's suggestions file as a catalogue entry; the record says where
    (or why not: never raised)."""
    try:
        changes = [AdviceChange.model_validate(c) for c in rec.advice_changes]
        entry = suggested_entry(
            signature_text=text, cause=rec.advice_diagnosis or rec.explanation,
            changes=changes, rationale=rec.rationale, model=rec.advised_by,
            experiment=exp_id, at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            entry_id=f"advised_{exp_id.lower()}_{rec.attempt}",
        )
        path = suggestions_file
        done = "written to" if append_suggestion(path, entry) else "already in"
        rec.suggestion = f"suggested catalogue entry {entry['id']} {done} {path}"
    except (OSError, ValidationError, ValueError) as exc:
        rec.suggestion = f"could not write the suggested catalogue entry: {exc}"
        log.warning("%s: %s", exp_id, rec.suggestion)
