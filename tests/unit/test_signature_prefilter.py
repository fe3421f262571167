"""The combined prefilter of the catalogue is sound: a block it rules out has no candidate by the
per-pattern search either, and a block it lets through gets exactly the per-pattern candidates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ajet_runner.statemachine.failures import signatures
from ajet_runner.statemachine.logs.text import clean_lines

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "logs"


def _brute(block: str) -> list[str]:
    return [s.id for s in signatures.CATALOGUE if s.matches(block)]


@pytest.mark.parametrize("log", sorted(CORPUS.glob("*.log")), ids=lambda p: p.name)
def test_candidates_equal_the_per_pattern_search_on_every_corpus_block(log: Path) -> None:
    lines = clean_lines(log.read_text(errors="replace").splitlines())
    blocks = [lines[i:i + 3] for i in range(0, len(lines), 3)] + [[line] for line in lines]
    assert signatures._combined() is not None
    hits = 0
    for block in blocks:
        text = "\n".join(block)
        got = [s.id for s in signatures.candidates(text)]
        assert got == _brute(text), text
        hits += bool(got)
    assert hits or "success" in log.name or "hang" in log.name  # the corpus failures do match


def test_a_catalogue_with_a_back_reference_is_not_combined(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = signatures.CATALOGUE[0]
    odd = signatures.Signature(id="repeat_word", patterns=(re.compile(r"\b(\w+) \1\b", re.M),), fatal=False,
                               generic=False, explanation="", repairable=False, repair=())
    monkeypatch.setattr(signatures, "CATALOGUE", [odd, spec])
    assert signatures._combined() is None
    assert [s.id for s in signatures.candidates("it is is here")] == ["repeat_word"]
