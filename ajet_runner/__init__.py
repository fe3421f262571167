"""ajet-runner: runs AgentJet experiment blueprints on GPU nodes (tmux, watching, repairs, reports, finish.flag).

One import package. Its sub-packages are the repository's top-level folders (`statemachine/`, `store/`,
`workers/`, `service/`, `cli/`, `resultdir/`, `logsetup/`, `examples/`), linked in here so the wheel,
the type checker and an editable install all see the same names. The public Python client is
`ajet_runner.client`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ajet-runner")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
