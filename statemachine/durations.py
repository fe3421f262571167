"""Read a run-time limit such as `12 hours`, `1.5h (90 minutes)` or `1小时30分钟` as seconds.

Blueprints state `exp_max_time` in free text, in English or Chinese, often with the
placeholder `${MaxTime}` around the value. The parser takes the *first* complete duration
in the text (a run of components with falling units, like `2h30m` or `2 hours 30 minutes`)
and ignores whatever follows, so a restatement in parentheses is not added twice.

A bare number with no unit anywhere in the text counts as hours, because the original
task text speaks of "${MaxTime} 小时" (MaxTime hours).
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["DURATION_MAX_CHARS", "format_duration", "format_limit", "format_progress", "parse_duration"]

DURATION_MAX_CHARS = 200
"""Longer texts are not read (a duration is a few words): parsing stays well under a millisecond."""

_UNIT_SECONDS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}

# Spellings of each unit; English ones must not run into another letter ("12 hotdogs").
_UNIT_WORDS: dict[str, tuple[str, ...]] = {
    "w": ("weeks", "week", "wks", "wk", "w", "星期", "周"),
    "d": ("days", "day", "d", "天"),
    "h": ("hours", "hour", "hrs", "hr", "h", "小时", "钟头"),
    "m": ("minutes", "minute", "mins", "min", "m", "分钟", "分"),
    "s": ("seconds", "second", "secs", "sec", "s", "秒钟", "秒"),
}
_WORD_TO_UNIT = {word: unit for unit, words in _UNIT_WORDS.items() for word in words}
_UNIT_ALT = "|".join(
    re.escape(w) + (r"(?![A-Za-z])" if w.isascii() else "")
    for w in sorted(_WORD_TO_UNIT, key=len, reverse=True)
)
_FULL_WORD_UNIT_ALT = "|".join(
    w for w in sorted(_WORD_TO_UNIT, key=len, reverse=True) if w.isascii() and len(w) > 3
)

_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "forty": 40, "forty-five": 45, "fifty": 50, "sixty": 60, "ninety": 90,
}
_EN_NUM_ALT = "|".join(sorted((re.escape(k) for k in _EN_NUMBERS), key=len, reverse=True))
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}
_ZH_NUM = "[零〇一二两三四五六七八九十百]+"

# One component: "12 hours", "1.5h", "三小时", "一个半小时", "半小时", "an hour", "half an hour".
# A number glued to a word ("qwen2.5") starts no duration, except right after a previous
# component ("2h30m"), hence the two variants.
_COMPONENT_TEMPLATE = r"""
    (?:
        LOOKBEHIND(?P<sign>-\s*)?(?P<num>\d+(?:\.\d+)?|\.\d+)
      | (?<![零〇一二两三四五六七八九十百])(?P<zh>{_ZH_NUM})
      | (?<![A-Za-z])(?P<en>{_EN_NUM_ALT})\s+(?=(?:{_FULL_WORD_UNIT_ALT})(?![A-Za-z]))
      | (?P<halfonly>半|(?<![A-Za-z])half\s+(?:an?\s+)?(?=(?:{_FULL_WORD_UNIT_ALT})(?![A-Za-z])))
    )
    \s*(?:个\s*)?(?P<half>半)?\s*
    (?P<unit>{_UNIT_ALT})
    """


@functools.cache
def _components() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The first component of a duration, and a following one: compiled on first use, because these
    two alternations cost every CLI call ~10 ms at import and most never read a duration."""
    fill = {"_ZH_NUM": _ZH_NUM, "_EN_NUM_ALT": _EN_NUM_ALT, "_FULL_WORD_UNIT_ALT": _FULL_WORD_UNIT_ALT,
            "_UNIT_ALT": _UNIT_ALT}
    first = _COMPONENT_TEMPLATE.replace("LOOKBEHIND", r"(?<![A-Za-z0-9_.])").format(**fill)
    following = _COMPONENT_TEMPLATE.replace("LOOKBEHIND", "").format(**fill)
    return re.compile(first, re.VERBOSE | re.IGNORECASE), re.compile(following, re.VERBOSE | re.IGNORECASE)


# What may stand between two components of one duration: "2 hours 30 minutes", "2h, 30m",
# "1 hour and 30 minutes", "1小时30分钟", "1小时零5分".
_JOINER = re.compile(r"\s*(?:,|，|and|&|\+|又|零)?\s*", re.IGNORECASE)
_CLOCK = re.compile(r"(?<![\d:.])(?P<h>\d{1,3}):(?P<m>[0-5]\d)(?::(?P<s>[0-5]\d))?(?![\d:])")
# A lone number ending its line ("${MaxTime} = 12"): hours.
_BARE_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.$/{\-])(?P<num>\d+(?:\.\d+)?)(?=[ \t]*[.;,。；，)）]?[ \t]*$)", re.MULTILINE
)


def _zh_number(text: str) -> float | None:
    """Chinese numerals up to the hundreds: 三, 十二, 二十四, 一百二十."""
    total, current = 0, 0
    for ch in text:
        if ch in _ZH_DIGITS:
            current = _ZH_DIGITS[ch]
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        elif ch == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return float(total + current)


def _amount(m: re.Match[str]) -> float | None:
    """A component's number: digits (signed), Chinese or English numerals, or a bare "half" (0.5)."""
    if m.group("num") is not None:
        value = float(m.group("num"))
        return -value if m.group("sign") else value
    if m.group("zh") is not None:
        return _zh_number(m.group("zh"))
    if m.group("en") is not None:
        return float(_EN_NUMBERS[m.group("en").lower()])
    return 0.5


def _component_seconds(m: re.Match[str]) -> float | None:
    value = _amount(m)
    if value is None:
        return None
    if m.group("half"):
        value += 0.5
    unit = _WORD_TO_UNIT.get(m.group("unit")) or _WORD_TO_UNIT.get(m.group("unit").lower())
    if unit is None or (m.group("zh") is not None and m.group("unit") == "分"):
        return None  # "十分" is "very", not ten minutes
    return value * _UNIT_SECONDS[unit]


def _unit_of(m: re.Match[str]) -> str:
    return _WORD_TO_UNIT.get(m.group("unit")) or _WORD_TO_UNIT[m.group("unit").lower()]


def _first_compound(text: str) -> tuple[int, float] | None:
    """The first duration made of components with falling units, as (start, seconds)."""
    component, next_component = _components()
    for first in component.finditer(text):
        seconds = _component_seconds(first)
        if seconds is not None:
            return first.start(), _with_smaller_units(text, first, seconds, next_component)
    return None


def _with_smaller_units(text: str, first: re.Match[str], seconds: float, next_component: re.Pattern[str]) -> float:
    """`seconds` of component `first` plus those of the components after it whose units fall (`1h 30m`),
    a negative duration's too (`-1h 30m` is -5400)."""
    units = list(_UNIT_SECONDS)
    rank = units.index(_unit_of(first))
    pos = first.end()
    while True:
        joiner = _JOINER.match(text, pos)
        nxt = next_component.match(text, joiner.end() if joiner else pos)
        if nxt is None or nxt.group("sign"):
            return seconds
        nxt_seconds = _component_seconds(nxt)
        nxt_rank = units.index(_unit_of(nxt)) if nxt_seconds is not None else -1
        if nxt_seconds is None or nxt_rank <= rank:
            return seconds
        seconds += nxt_seconds if seconds >= 0 else -nxt_seconds
        rank, pos = nxt_rank, nxt.end()


def parse_duration(text: str) -> float | None:
    """Seconds stated by `text`, or None when it states no duration. Never raises.

    Takes the earliest of a unit duration (`90 minutes`, `2h30m`, `3 小时`) or a clock
    form (`12:00:00`, `1:30` = h:mm); a lone number without any unit counts as hours.
    """
    try:
        if not isinstance(text, str) or not text.strip() or len(text) > DURATION_MAX_CHARS:
            return None
        norm = unicodedata.normalize("NFKC", text)
        found: list[tuple[int, float]] = []
        compound = _first_compound(norm)
        if compound is not None:
            found.append(compound)
        clock = _CLOCK.search(norm)
        if clock is not None:
            secs = int(clock.group("h")) * 3600 + int(clock.group("m")) * 60 + int(clock.group("s") or 0)
            found.append((clock.start(), float(secs)))
        if found:
            return min(found)[1]
        bare = _BARE_NUMBER.search(norm)
        if bare is not None:
            return float(bare.group("num")) * 3600.0
        return None
    except (ValueError, KeyError, OverflowError, RecursionError):
        return None


def _parts(seconds: float) -> tuple[str, list[tuple[int, str]]]:
    """The sign and the (value, unit) components of a whole number of seconds, biggest first."""
    sign = "-" if seconds < 0 else ""
    rest = int(round(abs(seconds)))
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        parts.append((rest // size, unit))
        rest %= size
    return sign, parts


def _two(parts: list[tuple[int, str]], first: int) -> str:
    """`first`'s component and the next one, zero-padded: `1h 02m`, `3m 00s`."""
    (big, big_unit), (small, small_unit) = parts[first], parts[first + 1]
    return f"{big}{big_unit} {small:02d}{small_unit}"


def format_duration(seconds: float | None) -> str:
    """How long something took or has run, the one style every output uses: `15s`, `3m 00s`,
    `1h 02m`, `2d 03h` (two units at most, the second zero-padded so a ticking clock keeps its width)."""
    if seconds is None or seconds != seconds:  # None or nan
        return "unknown"
    if abs(seconds) == float("inf"):
        return "unknown"
    sign, parts = _parts(seconds)
    first = next((i for i, (value, _) in enumerate(parts) if value), 3)
    return sign + (f"{parts[3][0]}s" if first == 3 else _two(parts, first))


def format_limit(seconds: float | None) -> str:
    """A limit or a setting, which people state as round figures: `5h`, `30m`, `1h 30m`, `45s`
    (the same units as `format_duration`, without the zero-padded tail of a round figure)."""
    if seconds is None or seconds != seconds or abs(seconds) == float("inf"):
        return "unknown"
    sign, parts = _parts(seconds)
    first = next((i for i, (value, _) in enumerate(parts) if value), 3)
    if first == 3:
        return f"{sign}{parts[3][0]}s"
    if parts[first + 1][0] == 0 and all(value == 0 for value, _ in parts[first + 2:]):
        return f"{sign}{parts[first][0]}{parts[first][1]}"
    return sign + _two(parts, first)


def format_progress(elapsed: float | None, limit: float | None) -> str:
    """Elapsed time against a limit: `3m 00s of 5h`; just the elapsed time when there is no limit."""
    shown = format_duration(elapsed) if elapsed is not None else "-"
    return f"{shown} of {format_limit(limit)}" if limit else shown
