"""The Lua scripts (store/*.lua) document exactly the KEYS they use, spell no key themselves, and the
store passes as many keys as documented."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest

from ajet_runner.store.keys import PREFIX
from ajet_runner.store.per_experiment.record_store import Records

SCRIPTS = sorted(p for p in resources.files("ajet_runner.store").iterdir() if p.name.endswith(".lua"))


def _documented(text: str, kind: str) -> set[int]:
    return {int(n) for n in re.findall(rf"^--\s+{kind}\[(\d+)\]", text, flags=re.M)}


def _code(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_documents_the_keys_it_uses_and_spells_none(script: Any) -> None:
    text = script.read_text(encoding="utf-8")
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", _code(text))}
    assert _documented(text, "KEYS") == used, f"{script.name}: documented KEYS differ from the KEYS used"
    assert f"'{PREFIX}:" not in _code(text) and f'"{PREFIX}:' not in _code(text), "a key spelled inside the Lua"
    used_argv = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", _code(text))}
    assert used_argv <= _documented(text, "ARGV"), f"{script.name}: an ARGV used but not documented"


def test_limits_are_arguments_not_literals() -> None:
    text = _code(resources.files("ajet_runner.store").joinpath("transition.lua").read_text(encoding="utf-8"))
    assert "10000" not in text and "100000" not in text  # stream MAXLENs come as ARGV


class _Recorder:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self.args: list[Any] = []

    def __call__(self, *, keys: list[str], args: list[Any]) -> list[Any]:
        self.keys, self.args = keys, args
        return [1, "2"]


def test_the_store_passes_every_documented_key_to_the_transition_script() -> None:
    records = Records.__new__(Records)
    records._transition = recorder = _Recorder()  # type: ignore[assignment]
    records.replicated = False  # a plain master (a Sentinel-managed one waits for a replica after the script)
    records.retention_seconds = 0
    # (a finishing transition, state "finished", goes in one MULTI with its outbox task, store/cluster/outbox.py; the
    # keys are the same: tests/integration/test_stage_store.py runs it on a real Redis)
    records.transition("e1", expected_version=1, fields={"reason": "done"}, event={"type": "transition"},
                       stats={"transition": "collecting>finished", "outcome": "completed", "duration": 3.0})
    text = resources.files("ajet_runner.store").joinpath("transition.lua").read_text(encoding="utf-8")
    # the 17 keys of one role each, then by name: one index per state, an index and duration buckets per outcome
    states, outcomes = recorder.args[6].split(","), recorder.args[9].split(",")
    assert len(_documented(text, "KEYS")) == 17
    assert len(recorder.keys) == 17 + len(states) + 2 * len(outcomes)
    assert all(k.startswith(f"{PREFIX}:") for k in recorder.keys)
    named = recorder.keys[17:]
    assert [k.rsplit(":", 1)[1] for k in named[:len(states)]] == states
    pairs = named[len(states):]
    assert [(a.rsplit(":", 1)[1], b.rsplit(":", 1)[1]) for a, b in zip(pairs[::2], pairs[1::2], strict=True)] == [
        (o, o) for o in outcomes]
    assert all(":duration_bucket:" in b for b in pairs[1::2])
    assert recorder.args[4:6] == [10_000, 100_000]  # the stream limits, from store/per_experiment/record_store.py
