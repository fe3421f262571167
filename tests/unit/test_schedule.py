"""The suite's slowest-first order (tests/schedule.py): measured seconds first, groups kept whole, xdist's
`@group` suffix ignored, the order of ties kept."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests import schedule


@dataclass
class Item:
    """What slowest_first reads of a pytest item: its node id and its marks."""
    nodeid: str
    marks: dict[str, pytest.Mark] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marks.get(name)


def group(name: str) -> dict[str, pytest.Mark]:
    return {"xdist_group": pytest.mark.xdist_group(name).mark}


SLOW = {"slow": pytest.mark.slow.mark}


def test_the_longest_start_first_and_ties_keep_their_order() -> None:
    items = [Item("a.py::t1"), Item("a.py::t2"), Item("b.py::long"), Item("a.py::t3"), Item("c.py::mid")]
    schedule.slowest_first(items, {"b.py::long": 60.0, "c.py::mid": 5.0})  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["b.py::long", "c.py::mid", "a.py::t1", "a.py::t2", "a.py::t3"]


def test_a_group_counts_its_tests_together_and_stays_in_its_order() -> None:
    items = [Item("s.py::one@slurm", group("slurm")), Item("x.py::alone"), Item("s.py::two@slurm", group("slurm"))]
    schedule.slowest_first(items, {"s.py::one": 10.0, "s.py::two": 10.0, "x.py::alone": 15.0})  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["s.py::one@slurm", "s.py::two@slurm", "x.py::alone"]


def test_an_unmeasured_slow_test_goes_before_the_short_ones() -> None:
    items = [Item("u.py::quick"), Item("i.py::new_scenario", SLOW), Item("u.py::measured")]
    schedule.slowest_first(items, {"u.py::measured": 1.0})  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["i.py::new_scenario", "u.py::measured", "u.py::quick"]


@pytest.mark.parametrize(("nodeid", "base"), [
    ("t.py::test_x@slurm", "t.py::test_x"),
    ("t.py::test_x[a@b]", "t.py::test_x[a@b]"),
    ("t.py::test_x[a@b]@slurm", "t.py::test_x[a@b]"),
    ("t.py::test_x", "t.py::test_x"),
])
def test_the_group_suffix_is_not_part_of_the_test(nodeid: str, base: str) -> None:
    assert schedule.base_nodeid(nodeid) == base


def test_the_committed_durations_name_tests_that_exist() -> None:
    """A renamed test in tests/durations.json only loses its place; most of the file must still match."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    listed = json.loads(schedule.DURATIONS_FILE.read_text(encoding="utf-8"))
    files = {nodeid.split("::")[0] for nodeid in listed}
    missing = sorted(f for f in files if not (root / f).exists())
    assert missing == []
