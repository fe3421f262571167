"""What the console shows, read the way the API reads it: records from Redis, a few named files of the result dir.

Files: only the report, repair log, plot and results.json, and only when their real path is inside the
record's result dir (the rule the API's /log route follows for attempt logs). The names come from
resultdir/names.py, which the worker's report writer uses too.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ajet_runner.resultdir.names import PLOT_NAME, REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME
from ajet_runner.service.api.schemas import SUMMARY_FIELDS, summary_dict
from ajet_runner.store.stages import stage_ids, stage_names
from ajet_runner.store.store import Store, decode, exp_key

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


def _matches(rec: dict[str, str], f: Filters) -> bool:
    if f.state and rec["state"] != f.state:
        return False
    if f.outcome and rec["outcome"] != f.outcome:
        return False
    if f.node and f.node not in (rec["node"], rec["target_node"]):
        return False
    return not f.q or f.q.casefold() in rec["purpose"].casefold()


def summaries(store: Store, ids: list[str]) -> list[dict[str, Any]]:
    pipe = store.r.pipeline(transaction=False)
    for i in ids:
        pipe.hmget(exp_key(i), SUMMARY_FIELDS)
    now = time.time()
    out = []
    for values in pipe.execute():
        raw = {k: v for k, v in zip(SUMMARY_FIELDS, values, strict=True) if v is not None}
        if raw.get("id"):
            out.append(summary_dict(decode(raw), now))
    return out


def experiments(store: Store, f: Filters, page_size: int = PAGE_SIZE) -> Page:
    """Newest first, filtered like the API's list (plus a case-insensitive search in the purpose)."""
    start = (max(1, f.page) - 1) * page_size
    if not f.any():
        total = store.count()
        ids = store.ids(start, page_size)
    else:
        all_ids = stage_ids(store, f.stage)[::-1] if f.stage else store.ids(0, 10_000_000)
        keys = ("state", "outcome", "node", "target_node", "purpose")
        pipe = store.r.pipeline(transaction=False)
        for i in all_ids:
            pipe.hmget(exp_key(i), keys)
        matching = []
        for exp_id, values in zip(all_ids, pipe.execute(), strict=True):
            rec = {k: (v.decode("utf-8", "replace") if v is not None else "")
                   for k, v in zip(keys, values, strict=True)}
            if _matches(rec, f):
                matching.append(exp_id)
        total, ids = len(matching), matching[start:start + page_size]
    pages = max(1, -(-total // page_size))
    return Page(summaries(store, ids), total, max(1, f.page), pages, sorted(n["name"] for n in store.nodes()),
                stage_names(store))


def evaluations(store: Store, exp_id: str) -> list[dict[str, Any]]:
    """Every `evaluation` event, oldest first: step, dataset, metrics."""
    out: list[dict[str, Any]] = []
    after = "0-0"
    while True:
        batch = store.events(exp_id, after=after, count=1000)
        if not batch:
            return out
        out += [e for e in batch if e.get("type") == "evaluation"]
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
