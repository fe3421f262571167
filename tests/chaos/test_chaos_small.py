"""The small chaos run of `make test`: 12 short experiments on 2 network-namespace hosts with a
supervisor and a watcher killed, a Redis restart, a host cut off and a worker upgraded
while its runs stay in the session host (bench/chaos.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]

CHAOS = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


def _chaos_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ajet_chaos", CHAOS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_small_chaos_run_loses_nothing_and_launches_nothing_twice(tmp_path: Path) -> None:
    chaos = _chaos_module()
    try:
        figures = chaos.run_chaos(12, seed=7, slots=3, timeout=300, work=tmp_path, steps=16, step_seconds=1.0)
    except chaos.CannotRun as exc:
        pytest.skip(str(exc))
    report = "\n".join(figures.lines())
    assert figures.duplicate_launches == 0 and figures.lost == 0 and figures.orphans == 0, report
    assert figures.finished == figures.flags_ok == 12, report
    assert {"supervisor", "watcher", "redis", "cut", "upgrade"} <= set(figures.disruptions), report
    assert figures.kept_through_upgrade > 0, report  # the upgrade happened under running experiments
