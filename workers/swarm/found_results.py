"""Where a swarm client's `## Step N` results are when the blueprint names no results file.

A swarm client writes its results where its own Python code says (AgentJet's appworld example:
`./appworld_swarm_results/val_results.md`, relative to the codebase it runs in). Without
`[exp_val_result_path]` the runner takes every markdown file under the result dir
(recursively) and under the codebase's `*_swarm_results/` folders that was created or grew
after this run's launch. Each such file's inode and size are recorded at launch (`snapshot`),
so what a file held then (an earlier run's blocks) is never counted, and a file that did not
grow is not this run's at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.logs.results import OWN_FILES, SKIP_DIRS, ResultSummary, parse_val_files
from ajet_runner.statemachine.models import Blueprint
from ajet_runner.workers.watching.watch import file_start, own_offset

__all__ = ["SWARM_DIR_SUFFIX", "SwarmResults", "candidate_files", "snapshot", "swarm_results_source"]

MD_SUFFIXES = frozenset({".md", ".markdown"})
SWARM_DIR_SUFFIX = "_swarm_results"
MAX_DEPTH = 4


def _markdown_under(root: Path) -> Iterator[Path]:
    """Markdown files under `root`, not in `previous/` (earlier runs), hidden or heavy folders."""
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".") and depth < MAX_DEPTH]
        for name in filenames:
            path = Path(dirpath) / name
            if name in OWN_FILES or name.startswith(".") or path.suffix.lower() not in MD_SUFFIXES:
                continue
            yield path


def candidate_files(bp: Blueprint) -> list[Path]:
    """Every markdown file the client may have written: under the result dir, and under the
    codebase's top-level `*_swarm_results/` folders."""
    found: set[Path] = set()
    result_dir = Path(bp.exp_result_dir)
    if bp.exp_result_dir and result_dir.is_dir():
        found.update(_markdown_under(result_dir))
    if bp.exp_codebase_dir:
        try:
            entries = list(os.scandir(bp.exp_codebase_dir))
        except OSError:
            entries = []
        for entry in entries:
            if entry.name.endswith(SWARM_DIR_SUFFIX) and entry.is_dir():
                found.update(_markdown_under(Path(entry.path)))
    return sorted(found)


def snapshot(bp: Blueprint) -> dict[str, dict[str, int]]:
    """Each candidate file's `{"inode", "offset"}` at launch: the bytes before are earlier runs'."""
    return {str(p): file_start(p) for p in candidate_files(bp)}


@dataclass
class SwarmResults:
    """This run's part of the discovered files. `starts` is the launch snapshot (kept in the
    experiment's context and updated in place: a file created later is recorded as all ours)."""

    bp: Blueprint
    starts: dict[str, dict[str, int]]

    def own_files(self) -> list[tuple[Path, int]]:
        """(file, offset where this run's part begins) for each file created or grown since launch."""
        out = []
        for path in candidate_files(self.bp):
            start = self.starts.setdefault(str(path), {"inode": 0, "offset": 0})  # new since launch
            offset = own_offset(path, start)
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size > offset:
                out.append((path, offset))
        return out

    def stamp(self) -> tuple[Any, ...]:
        """Changes whenever one of this run's files changes (re-parse only then)."""
        out = []
        for path, offset in self.own_files():
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((str(path), offset, st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(out)

    def summary(self) -> tuple[ResultSummary | None, str]:
        """This run's evaluations across the files, and a sentence saying which files (and from where)."""
        files = [(p, off) for p, off in self.own_files()]
        if not files:
            return None, ("no markdown results file under the result dir or the codebase's "
                          f"`*{SWARM_DIR_SUFFIX}/` folders was created or grew after launch")
        root = os.path.commonpath([str(p.parent) for p, _ in files])
        summary = parse_val_files([p for p, _ in files], root=root, starts={str(p): off for p, off in files})
        parts = [f"`{p}`" + (f" (after its first {off} bytes, which were there before launch)" if off else "")
                 for p, off in files]
        where = ("swarm results files created or grown after launch (no `[exp_val_result_path]`): "
                 + ", ".join(parts))
        return (summary if summary.evaluations else None), f"{where}: {len(summary.evaluations)} evaluation(s)"


def swarm_results_source(bp: Blueprint, swarm: dict[str, Any] | None) -> SwarmResults | None:
    """The discovery of a swarm experiment that names no results file, else None."""
    if not swarm or swarm.get("result_starts") is None:
        return None
    return SwarmResults(bp, swarm["result_starts"])
