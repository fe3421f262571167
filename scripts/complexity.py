"""Cyclomatic complexity of the product packages (radon), the figure issue 40 tracks.

Counts every function, method and nested function (radon's blocks, closures included; classes are
not functions) in the product packages — not tests/, bench/ or examples/. Prints the count, how many
are above 10, that share, the highest, and (with --list) the functions above 10, worst first.
`make lint` prints it; tests/unit/test_complexity.py holds the ceilings.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("statemachine", "store", "workers", "service", "cli", "resultdir", "logsetup")
BUSY = 10  # above this a function counts as complex (radon's rank C and worse)


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository
    name: str  # Class.method, outer.inner for a nested function
    line: int
    complexity: int


def _functions(blocks: list[Function | Class], path: str, prefix: str = "") -> list[Block]:
    out: list[Block] = []
    for b in blocks:
        if isinstance(b, Class):
            out += _functions(list(b.methods), path, f"{prefix}{b.name}.")  # methods, not the class
            out += _functions(list(b.inner_classes), path, f"{prefix}{b.name}.")
            continue
        name = f"{prefix}{b.name}"
        out.append(Block(path, name, b.lineno, b.complexity))
        out += _functions(list(b.closures), path, f"{name}.")
    return out


def measure(root: Path = ROOT) -> list[Block]:
    """Every function of the product packages with its complexity."""
    blocks: list[Block] = []
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            top = [b for b in cc_visit(file.read_text(encoding="utf-8")) if isinstance(b, Class) or not b.is_method]
            blocks += _functions(top, rel)
    return blocks


def main(argv: list[str]) -> int:
    blocks = measure()
    busy = sorted((b for b in blocks if b.complexity > BUSY), key=lambda b: (-b.complexity, b.path, b.line))
    worst = busy[0] if busy else max(blocks, key=lambda b: b.complexity)
    print(f"complexity: {len(blocks)} functions, {len(busy)} above {BUSY} ({100 * len(busy) / len(blocks):.1f} %), "
          f"highest {worst.complexity} ({worst.path}:{worst.line} {worst.name})")
    if "--list" in argv:
        for b in busy:
            print(f"{b.complexity:4d}  {b.path}:{b.line}  {b.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
