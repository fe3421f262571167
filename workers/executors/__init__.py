"""Executors: where and how an attempt runs (a local tmux session, a tmux server on an ssh host, a SLURM
job, or scripted attempts in memory). One protocol (`protocol.Executor`), one neutral handle stored in the
record (`handle.RunHandle`), one wrapper script that all of them run (`wrapper.py`), and this factory:
the one place an executor is built. A new executor is a module here plus one line in `_BUILDERS`.

libtmux and the process table (psutil) are used only inside this package (tests/unit/test_layers.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ajet_runner.store.settings import Settings
    from ajet_runner.workers.executors.handle import RunHandle
    from ajet_runner.workers.executors.protocol import Executor

DEFAULT = "local"


class UnknownExecutor(ValueError):
    """An executor name no builder answers to."""


def _local(settings: Settings, host: str | None) -> Executor:
    from ajet_runner.workers.executors.local.tmux import TmuxRunner

    return TmuxRunner(settings.tmux_socket or None, linger=settings.pane_linger_seconds)


def _stub(settings: Settings, host: str | None) -> Executor:
    from ajet_runner.workers.executors.stub import StubExecutor

    return StubExecutor()


def _module_builder(module: str) -> Callable[[Settings, str | None], Executor]:
    """An executor whose module builds itself with `build(settings, host)` (imported only when used)."""

    def build(settings: Settings, host: str | None) -> Executor:
        made: Executor = importlib.import_module(f"ajet_runner.workers.executors.{module}").build(settings, host)
        return made

    return build


_BUILDERS: dict[str, Callable[[Settings, str | None], Executor]] = {
    "local": _local,
    "stub": _stub,
    "slurm": _module_builder("slurm"),
    "ssh": _module_builder("ssh"),
}


def names() -> list[str]:
    """The executors this runner knows."""
    return sorted(_BUILDERS)


def build_executor(settings: Settings, name: str | None = None, *, host: str | None = None) -> Executor:
    """The executor `name` (default: the settings', else local), for `host` where it runs on one."""
    chosen = (name or getattr(settings, "executor", "") or DEFAULT).strip().lower()
    builder = _BUILDERS.get(chosen)
    if builder is None:
        raise UnknownExecutor(f"unknown executor {chosen!r}: expected one of {', '.join(names())}")
    return builder(settings, host)


def executor_for_handle(settings: Settings, handle: RunHandle) -> Executor:
    """The executor that can find `handle`'s run again (adoption after a worker restart)."""
    return build_executor(settings, handle.executor, host=handle.host)
