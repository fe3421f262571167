"""Linear-time blueprint parsing, proven by growth: each shape fuzzing has found, at 10 KB and at 100 KB;
ten times the input may cost at most fifteen times the CPU (best of three, cyclic GC paused).

A backtracking regex on attacker-controlled text shows as ~100x here (a run of `*` inside a path token
took 63 ms at 4 KB and 7.2 s at 40 KB in the parser before the markdown-it rewrite). Times under 1 ms
are read as 1 ms: the timer and the interpreter's noise, not the parser, decide below that. The shapes
keep lines ~100 characters long, so even 100 KB stays under the line cap (`BLUEPRINT_MAX_LINES`) and
every byte is really parsed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from ajet_runner.statemachine.blueprint.parse import BLUEPRINT_MAX_LINES, parse_blueprint, validate_blueprint

SMALL, BIG = 10_000, 100_000  # characters
GROWTH_MAX = 15.0
FLOOR_SECONDS = 0.001
_PAD = "x" * 120


def _lines(head: str, line: str, size: int, tail: str = "") -> str:
    """`head`, then `line` repeated to about `size` characters, then `tail`."""
    return head + line * max(1, (size - len(head) - len(tail)) // len(line)) + tail


GROWTH_SHAPES: dict[str, Callable[[int], str]] = {
    "runs of * in a path": lambda n: "[exp_result_dir] /data/a" + "*" * (n - 30) + "b\n",
    "runs of * in a bullet value": lambda n: "## [exp_result_dir]\n- path: /data/a" + "*" * (n - 40) + "b\n",
    "runs of * around a command": lambda n: "[exp_launch_command] **" + "*" * (n - 40) + "python x\n",
    "backticks": lambda n: "[exp_launch_command] " + "`a" * ((n - 30) // 2) + "\n",
    "a run of backticks": lambda n: "## [exp_launch_command]\n" + "`" * (n - 30) + "\n",
    "brackets": lambda n: "[exp_codebase_dir] " + "[" * (n - 30) + "\n",
    "full-width brackets": lambda n: "【exp_codebase_dir】 " + "【" * (n - 30) + "\n",
    "spaces after a path": lambda n: "[exp_result_dir] /data/a" + " " * (n - 40) + "x\n",
    "a long line of words": lambda n: "[exp_purpose] " + "word " * ((n - 20) // 5) + "\n",
    "a long line of path pieces": lambda n: "[exp_codebase_dir] /" + "a b/" * ((n - 30) // 4) + "\n",
    "colons in a label": lambda n: "[exp_codebase_dir] " + "path:" * ((n - 30) // 5) + " /x\n",
    "repeated parts": lambda n: _lines("", f"## [exp_yaml_path] NA {_PAD}\n", n),
    "repeated bullet parts": lambda n: _lines("", f"## [exp_result_dir] {_PAD}\n- path: /r/{_PAD}\n", n),
    "many bullet fields": lambda n: _lines("## [exp_launch_command]\n", f"- hint: {_PAD}\n", n),
    "deep lists": lambda n: _lines("## [exp_purpose]\n",
                                   f"- a {_PAD}\n  - b {_PAD}\n    - c {_PAD}\n      - d {_PAD}\n", n),
    "quotes and lists": lambda n: _lines("", f"> - > - x {_PAD}\n", n),
    "command lines with continuations": lambda n: _lines("## [exp_launch_command]\n```bash\n",
                                                         f"echo {_PAD} \\\n", n, "```\n"),
    "quotes left open across lines": lambda n: _lines("## [exp_launch_command]\n```bash\n", f"echo '{_PAD}\n", n,
                                                      "```\n"),
    "heredocs": lambda n: _lines("## [exp_launch_command]\n```bash\n",
                                 f"cat <<EOF{_PAD[:20]} {_PAD}\n{_PAD}{_PAD}\nEOF{_PAD[:20]}\n", n, "```\n"),
    "prose in a command": lambda n: _lines("## [exp_launch_command]\n- command:\n", f"    Then wait {_PAD}.\n", n),
    "swarm block": lambda n: _lines("## [exp_yaml_path]\nNA\n## [exp_launch_command]\n```bash\n",
                                    f"export A{_PAD[:10]}={_PAD}\n", n, "ajet-swarm start &\nsleep 3\npython c\n```\n"),
    "table rows": lambda n: _lines("| part | value |\n|---|---|\n", f"| [exp_purpose] | {_PAD} |\n", n),
    "fences": lambda n: _lines("", f"```{_PAD}\n{_PAD}{_PAD}\n```\n{_PAD}{_PAD}\n", n),
    "markdown wrappers": lambda n: "```markdown\n" * 3 + _lines("", f"[exp_purpose] {_PAD}\n", n - 40) + "```\n",
}


def _once(text: str) -> float:
    started = time.thread_time()
    validate_blueprint(parse_blueprint(text), check_disk=False)
    return time.thread_time() - started


def _spent_pair(small: str, big: str) -> tuple[float, float]:
    """Best of three CPU times of each, measured in turns (a slow second hits both), GC paused."""
    gc.collect()
    gc.disable()
    try:
        times = [(_once(small), _once(big)) for _ in range(3)]
    finally:
        gc.enable()
    return min(t for t, _ in times), min(t for _, t in times)


@pytest.mark.parametrize("shape", sorted(GROWTH_SHAPES))
def test_ten_times_the_input_costs_at_most_fifteen_times_the_time(shape: str) -> None:
    make = GROWTH_SHAPES[shape]
    small, big = make(SMALL), make(BIG)
    assert 0.8 * BIG <= len(big) <= 1.05 * BIG and 0.8 * SMALL <= len(small) <= 1.05 * SMALL, (len(small), len(big))
    assert big.count("\n") < BLUEPRINT_MAX_LINES, "the shape must stay under the line cap: every byte is parsed"
    _once("[exp_purpose] warm-up\n")
    t_small, t_big = _spent_pair(small, big)
    ratio = t_big / max(t_small, FLOOR_SECONDS)
    assert ratio <= GROWTH_MAX, (f"{shape}: {t_small * 1000:.2f} ms at {len(small):,} chars, {t_big * 1000:.1f} ms at "
                                 f"{len(big):,} (x{ratio:.1f}, at most x{GROWTH_MAX:g})")
