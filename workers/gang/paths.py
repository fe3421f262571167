"""Names and files of one rank of a multi-node run: its tmux session, its log, its process marker."""

from __future__ import annotations

from pathlib import Path

from ajet_runner.store.naming import session_name


def rank_session(purpose: str, exp_id: str, rank: int) -> str:
    """`ajet_<purpose slug>_<short id>_r<rank>`: one session per node of the gang."""
    return f"{session_name(purpose, exp_id)}_r{rank}"


def rank_paths(result_dir: str, attempt: int, rank: int) -> dict[str, Path]:
    """`logs/attempt-<n>-rank<r>.log` (and .rc, .pid) in the shared result dir."""
    logs = Path(result_dir) / "logs"
    return {name: logs / f"attempt-{attempt}-rank{rank}.{name}" for name in ("log", "rc", "pid")}


def rank_marker(exp_id: str, rank: int) -> str:
    """The process marker of a non-head rank: its own, so a scoped cleanup on one node (or on one machine
    holding two "nodes") never reaches another rank's processes. The head keeps the experiment's id."""
    return exp_id if rank == 0 else f"{exp_id}.rank{rank}"
