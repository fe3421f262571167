"""Timeouts scaled by the measured load (tests/load.py): as written on a quiet machine, longer at load,
capped so a wedged machine still fails."""

from __future__ import annotations

import os

import pytest

from tests.load import MAX_FACTOR, load_factor, scaled


def test_a_quiet_machine_keeps_the_timeout_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    assert load_factor() == 1.0 and scaled(10) == 10


def test_load_per_core_scales_it_up_to_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    assert scaled(10) == 40
    monkeypatch.setattr(os, "getloadavg", lambda: (80.0, 80.0, 80.0))
    assert load_factor() == MAX_FACTOR
