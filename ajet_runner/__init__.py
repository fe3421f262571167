"""ajet-runner: runs AgentJet experiment blueprints on GPU nodes (tmux, watching, repairs, reports, finish.flag).

One import package. Its sub-packages are the repository's top-level folders (`statemachine/`, `store/`,
`workers/`, `service/`, `cli/`, `resultdir/`, `logsetup/`, `examples/`), linked in here so the wheel,
the type checker and an editable install all see the same names. The public Python client is
`ajet_runner.client`.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """`__version__` on first use: reading the installed metadata costs every `ajet-runner` call ~30 ms."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("ajet-runner")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
