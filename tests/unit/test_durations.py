"""parse_duration: run-time limits in the forms blueprints really use, and garbage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.durations import format_duration, format_limit, format_progress, parse_duration
from tests.load import examples

H, M = 3600.0, 60.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("${MaxTime} = 12 hours", 12 * H),
        ("12h", 12 * H),
        ("12 H", 12 * H),
        ("90 minutes", 90 * M),
        ("1.5h (90 minutes)", 1.5 * H),  # the restatement is not added
        ("2h (that is 120 minutes)", 2 * H),
        ("0.5 hours", 0.5 * H),
        ("3 小时", 3 * H),
        ("30分钟", 30 * M),
        ("2 hours 30 minutes", 2.5 * H),
        ("2 hours and 30 minutes", 2.5 * H),
        ("1 hour, 30 minutes", 1.5 * H),
        ("2h30m", 2.5 * H),
        ("2h 30m 10s", 2.5 * H + 10),
        ("45 min", 45 * M),
        ("1 day", 24 * H),
        ("1 day 2 hours", 26 * H),
        ("3600s", 3600.0),
        ("运行时间不超过 3 小时", 3 * H),
        ("运行时间不超过 ${MaxTime}，每个实验强制在 ${MaxTime} 后终止。${MaxTime} = 3 小时", 3 * H),
        ("1小时30分钟", 1.5 * H),
        ("1小时零5分", 65 * M),
        ("半小时", 0.5 * H),
        ("半个小时", 0.5 * H),
        ("一个半小时", 1.5 * H),
        ("两个小时", 2 * H),
        ("十二小时", 12 * H),
        ("３小时", 3 * H),  # full-width digit
        ("an hour", H),
        ("half an hour", 0.5 * H),
        ("two hours", 2 * H),
        ("12:00:00", 12 * H),
        ("1:30", 1.5 * H),
        ("12", 12 * H),  # a bare number is hours, as in "${MaxTime} 小时" (docs/background.md#manual-workflow)
        ("${MaxTime} = 12", 12 * H),
        ("Maximum runtime is ${MaxTime}\n  Default:\n  - MaxTime per run:\n    24 hours\n  - First step: 20 minutes",
         24 * H),
        ("qwen2.5-14b, up to 3h", 3 * H),  # digits glued to a name start no duration
        ("这个十分重要：3h", 3 * H),  # "十分" means "very"
        ("0 hours", 0.0),
        ("-2h", -2 * H),
    ],
)
def test_parses_real_forms(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "until it converges", "${MaxTime}", "3 hotdogs", "blueprint_7 step 3 of the plan", "TBD"],
)
def test_nothing_to_read_gives_none(text: str) -> None:
    assert parse_duration(text) is None


def test_non_string_gives_none() -> None:
    assert parse_duration(None) is None  # type: ignore[arg-type]
    assert parse_duration(12) is None  # type: ignore[arg-type]


@settings(max_examples=examples(400), deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    result = parse_duration(text)
    assert result is None or isinstance(result, float)


_PIECES = st.sampled_from(
    ["12", "1.5", "半", "一个", "十", "h", "hours", " ", "小时", "分钟", "m", "30", "and", ",", "(", ")",
     "${MaxTime}", "=", "\n", ":", "00", "-", "个", "day", "s", "秒", "½", "١٢", "𝟙𝟚"]
)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_never_raises_on_duration_like_text(text: str) -> None:
    result = parse_duration(text)
    assert result is None or isinstance(result, float)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "unknown"), (float("nan"), "unknown"), (0, "0s"), (15, "15s"), (59.4, "59s"), (59.6, "1m 00s"),
     (180, "3m 00s"), (3599, "59m 59s"), (3720, "1h 02m"), (43200, "12h 00m"), (90000, "1d 01h"),
     (-7200, "-2h 00m")],
)
def test_format_duration(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "unknown"), (0, "0s"), (45, "45s"), (90, "1m 30s"), (300, "5m"), (5400, "1h 30m"), (18000, "5h"),
     (86400, "1d"), (-7200, "-2h")],
)
def test_format_limit_drops_the_zero_tail_of_a_round_figure(seconds: float | None, shown: str) -> None:
    assert format_limit(seconds) == shown


def test_progress_reads_elapsed_of_limit() -> None:
    assert format_progress(180, 18000) == "3m 00s of 5h"
    assert format_progress(15, None) == format_progress(15, 0) == "15s"
    assert format_progress(None, 300) == "- of 5m"
