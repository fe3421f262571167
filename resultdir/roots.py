"""The allowed roots, enforced where files are written and commands launched (not only at submission).

A path checked once at submission can be swapped for a symlink afterwards, so every write of the
runner goes through the confined writer (ajet_runner.resultdir.confined), which opens its directory by
walking down from a resolved root with `O_NOFOLLOW` on each component (openat-style): a component that
is (or became) a symlink is refused, and so is a directory whose real path is outside every root.
The check before each launch resolves the codebase, result dir, YAML and venv the same way.

With no roots configured (`AJET_RUNNER_ALLOWED_ROOTS` unset) nothing is confined: the old behaviour.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

_CONFINED: ContextVar[tuple[str, ...]] = ContextVar("ajet_runner_write_roots", default=())


class OutsideRoots(PermissionError):
    """A path that resolves outside the allowed roots (or through a symlink swapped in below one)."""

    def __init__(self, path: str, real: str, roots: Sequence[str]) -> None:
        self.path, self.real, self.roots = path, real, tuple(roots)
        where = path if real == path else f"{path} (resolves to {real})"
        super().__init__(errno.EACCES, f"{where} is outside the allowed roots ({', '.join(roots)})")

    def __str__(self) -> str:
        return str(self.strerror)


def parse_roots(value: str) -> tuple[str, ...]:
    """Colon-separated roots from settings, resolved (a root may itself be a symlink, e.g. a mount)."""
    return tuple(os.path.realpath(r.strip()) for r in value.split(":") if r.strip())


def root_of(real: str, roots: Sequence[str]) -> str | None:
    """The root that holds the (already resolved) path, or None."""
    for root in roots:
        if real == root or real.startswith(root.rstrip("/") + "/"):
            return root
    return None


def check_inside(path: str, roots: Sequence[str], *, keep_name: bool = False) -> str:
    """The real path of `path` if it is inside a root; raises OutsideRoots. No roots: anything goes.

    `keep_name` resolves the directory only: a venv's `bin/python` is a symlink to the system
    interpreter by design, so the venv dir is what must be inside the roots.
    """
    if not roots:
        return path
    absolute = os.path.abspath(path)
    if keep_name:
        real = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
    else:
        real = os.path.realpath(absolute)
    if root_of(real, roots) is None:
        raise OutsideRoots(path, real, roots)
    return real


def active_roots() -> tuple[str, ...]:
    """The roots the enclosing :func:`confined` block set (empty: nothing is confined)."""
    return _CONFINED.get()


@contextlib.contextmanager
def confined(roots: Sequence[str]) -> Iterator[None]:
    """Within this block, :func:`ajet_runner.resultdir.confined.open_dir` (hence every write of the
    confined writer) stays inside `roots`."""
    token = _CONFINED.set(tuple(roots))
    try:
        yield
    finally:
        _CONFINED.reset(token)
