"""The Lua scripts (store/*.lua) document exactly the KEYS they use, spell no key themselves, and the
store passes as many keys as documented."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest

from ajet_runner.store.keys import PREFIX
from ajet_runner.store.record_store import Records

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
    # (a finishing transition, state "finished", goes in one MULTI with its outbox task, store/outbox.py; the
    # keys are the same: tests/integration/test_stage_store.py runs it on a real Redis)
    records.transition("e1", expected_version=1, fields={"reason": "done"}, event={"type": "transition"},
                       stats={"transition": "collecting>finished", "outcome": "completed", "duration": 3.0})
    text = resources.files("ajet_runner.store").joinpath("transition.lua").read_text(encoding="utf-8")
    # 11 + 7 state indexes, the node's set, the expiry schedule, the log tail, the event numbers, the result
    # dir claims, the 5 outcomes' duration buckets (their expiry), the schedule's index keys, 5 outcome indexes,
    # the purposes a search reads
    assert len(recorder.keys) == len(_documented(text, "KEYS")) == 35
    assert all(k.startswith(f"{PREFIX}:") for k in recorder.keys)
    assert recorder.keys[7].endswith(":duration_bucket:completed")
    assert recorder.args[4:6] == [10_000, 100_000]  # the stream limits, from store/record_store.py
