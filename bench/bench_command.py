"""How long the launch-command analysis takes: the blueprint corpus's commands, the shapes the tests
use (every hiding place of a launcher call), and long commands near the 10,000-character cap.

Each command goes through what the preflight does with it (analyze, drop the hazards, point
`--conf` at a copy, add `--skip-check-avail-gpu`, find the launcher's chain segment), with the
parse cache cleared first (cold) and then again on the same text (warm). Also prints the cost of
the first call in a fresh process (imports, grammar load). Usage: python bench/bench_command.py [rounds]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ajet_runner.statemachine.shell import command as cmdlib

ROOT = Path(__file__).resolve().parent.parent
CORPUS = [ROOT / "tests/corpus/blueprints/expected.json", ROOT / "tests/corpus/blueprints/skills/expected.json"]
L = "python -m ajet.launcher --conf a.yaml --autokill"
SHAPES = [
    L, f"cd . && {L}", f"true; {L}", f"env A=1 proxychains4 -q {L}", f"(cd . && {L})", f"bash -c '{L}'",
    f"sh -c \"cd . && {L}\"", f"bash -c \"bash -c '{L}'\"", f"f() {{ {L}; }}\nf", f"if true; then\n  {L}\nfi",
    f"bash <<'EOF'\n{L}\nEOF", f"x=$({L})", f"{L} 2>&1 | tee log.txt", f"nohup {L} &\nwait", f"timeout 30 {L}",
    f"eval '{L}'", "python -m ajet.launcher --conf ${CONF:-x y.yaml} --with-ray",
    f"diff <(cat x.yaml) b.yaml; {L}", f"for i in 1 2; do\n  {L}\ndone", f"while false; do {L}; done",
    "python -m ajet.launcher --conf a.yaml $EXTRA", f"echo {L} | bash", "echo a.yaml | xargs python -m ajet.launcher",
]
LONG = {
    "100 chained launches": "\n".join([f"cd . && {L}"] * 100),
    "5,000 `a;`": "a;" * 5_000,
    "833 `bash -c 'a';`": "bash -c 'a';" * 833,
    "1,111 `f(){ a;};`": "f(){ a;};" * 1_111,
    "2,000 `$(a)` lines": "$(a)\n" * 2_000,
}


def _corpus() -> list[str]:
    out = []
    for path in CORPUS:
        for entry in json.loads(path.read_text()).values():
            cmd = entry.get("exp_launch_command") or entry.get("launch_command")
            if cmd:
                out.append(cmd)
    return out


def _clear() -> None:
    """Forget cached parses and scans (both implementations keep one per text)."""
    from ajet_runner.statemachine.shell import syntax as shell_ast

    for module in (shell_ast, cmdlib):
        for name in dir(module):
            fn = getattr(module, name)
            if callable(getattr(fn, "cache_clear", None)):
                fn.cache_clear()


def _pipeline(cmd: str) -> None:
    cmdlib.analyze_command(cmd)
    cmdlib.remove_hazards(cmd)
    cmdlib.replace_conf(cmd, "/copy/a.yaml")
    cmdlib.add_flag(cmd, "--skip-check-avail-gpu")
    cmdlib.launcher_segment(cmd)


def _time(fn: Callable[[], None], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def _row(label: str, cold: list[float], warm: list[float]) -> str:
    return (f"{label:<30} cold median {statistics.median(cold) * 1000:8.2f} ms  max {max(cold) * 1000:8.2f} ms | "
            f"warm median {statistics.median(warm) * 1000:8.2f} ms")


def _set(cmds: list[str]) -> Callable[[], None]:
    def run() -> None:
        for cmd in cmds:
            _pipeline(cmd)
    return run


def _cold(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        _clear()
        fn()
    return run


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    first = subprocess.run(
        [sys.executable, "-c", "import time; t = time.perf_counter(); "
         "from ajet_runner.statemachine.shell.command import analyze_command; "
         "analyze_command('python -m ajet.launcher --conf a.yaml'); print(time.perf_counter() - t)"],
        capture_output=True, text=True, check=True)
    print(f"{'first call in a new process':<30} {float(first.stdout) * 1000:8.1f} ms (import + first parse)")
    _pipeline(L)  # warm the imports of this process
    corpus = _corpus()
    for label, cmds in ((f"corpus ({len(corpus)} commands)", corpus), (f"shapes ({len(SHAPES)} commands)", SHAPES)):
        run = _set(cmds)
        print(_row(label, _time(_cold(run), rounds), _time(run, rounds)))
    for label, cmd in LONG.items():
        run = _set([cmd])
        print(_row(f"{label} ({len(cmd):,} ch)", _time(_cold(run), max(3, rounds // 4)), _time(run, 3)))


if __name__ == "__main__":
    main()
