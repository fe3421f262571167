"""What the console shows, read the way the API reads it: records from Redis, a few named files of the result dir.

Files: only the report, repair log, plot and results.json, and only when their real path is inside the
record's result dir (the rule the API's /log route follows for attempt logs). The names come from
resultdir/names.py, which the worker's report writer uses too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ajet_runner.resultdir.names import PLOT_NAME, REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME
from ajet_runner.service.api import listing
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.statemachine.models import Evaluation
from ajet_runner.store.cluster.stages import stage_names
from ajet_runner.store.per_experiment.filters import SEARCH_WINDOW, Query
from ajet_runner.store.store import Store

SERVED_FILES = {REPORT_NAME: "text/markdown; charset=utf-8", REPAIR_LOG_NAME: "text/markdown; charset=utf-8",
                PLOT_NAME: "image/png", RESULTS_NAME: "application/json"}
MAX_FILE_BYTES = 5_000_000
PAGE_SIZE = 25


@dataclass
class Filters:
    state: str = ""
    outcome: str = ""
    node: str = ""
    q: str = ""
    page: int = 1
    stage: str = ""
    scan: str = ""  # with q: the cursor (a created_at) the searched window is older than; "" = the newest

    def any(self) -> bool:
        return bool(self.state or self.outcome or self.node or self.q or self.stage)


@dataclass
class Page:
    items: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    nodes: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    search: dict[str, Any] | None = None  # with q: listing.list_page's "search"


def experiments(store: Store, f: Filters, page_size: int = PAGE_SIZE, window: int = SEARCH_WINDOW) -> Page:
    """Newest first, filtered by the API's own path (store/per_experiment/filters.py indexes; the search in the purpose
    reads a bounded window of the newest candidates older than the cursor `f.scan`)."""
    start = (max(1, f.page) - 1) * page_size
    query = Query(f.state, f.node, f.outcome, f.stage)
    got = listing.list_page(store, query, start, page_size, q=f.q, scan_before=f.scan, window=window)
    total = int(got["total"])
    pages = max(1, -(-total // page_size))
    return Page(got["items"], total, max(1, f.page), pages, sorted(n["name"] for n in store.nodes.all()),
                stage_names(store), got["search"])


def evaluations(store: Store, exp_id: str) -> list[Evaluation]:
    """The evaluation of every `evaluation` event, oldest first (one that names no step is none)."""
    out: list[Evaluation] = []
    after = "0-0"
    while True:
        batch = store.events.read(exp_id, after=after, count=1000)
        if not batch:
            return out
        for e in batch:
            if e.get("type") == EventType.evaluation and (ev := Evaluation.from_json(
                    {"step": e.get("step"), "dataset": e.get("dataset"), "metrics": e.get("metrics") or {},
                     "attempt": e.get("attempt")})) is not None:
                out.append(ev)
        after = batch[-1]["event_id"]


def inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return bool(root) and (real == base or real.startswith(base.rstrip("/") + "/"))


def result_file(rec: dict[str, Any], name: str) -> bytes | None:
    """One of SERVED_FILES from the record's result dir; None when absent, unreadable or outside it."""
    root = str(rec.get("result_dir") or "")
    if name not in SERVED_FILES or not root:
        return None
    path = os.path.join(root, name)
    if not inside(path, root) or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_FILE_BYTES)
    except OSError:
        return None


def result_text(rec: dict[str, Any], name: str) -> str | None:
    data = result_file(rec, name)
    return None if data is None else data.decode("utf-8", errors="replace")


def results_json(rec: dict[str, Any]) -> dict[str, Any]:
    text = result_text(rec, RESULTS_NAME)
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
