"""The filtered list the API and the console both serve: index pages (store/per_experiment/filters.py), then the summary
fields of the page's records only."""

from __future__ import annotations

import time
from typing import Any

from ajet_runner.service.api.schemas import SUMMARY_FIELDS, summary_dict
from ajet_runner.store.per_experiment.filters import SEARCH_WINDOW, Query
from ajet_runner.store.store import Store


def summaries(store: Store, ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The summaries of `ids` (one pipeline of HMGETs), and the ids whose record is gone."""
    recs, gone = store.records.partial_and_gone(ids, SUMMARY_FIELDS)
    now = time.time()
    return [summary_dict(rec, now) for rec in recs], gone


def list_page(store: Store, query: Query, offset: int, limit: int, q: str = "", scan_before: str = "",
              window: int = SEARCH_WINDOW) -> dict[str, Any]:
    """{"items", "total", "limit", "offset", "search"}: newest first. With `q`, the matches of one bounded
    window of candidates (created before the cursor `scan_before`); `search` says how many were searched
    and gives the next window's cursor."""
    for _ in range(2):  # a record gone without the expiry sweep seeing it (deleted under an older version):
        search = None   # it leaves the indexes, and the page is read again
        if q:
            found = store.indexes.search(query, q, scan_before, window)
            ids, total = found.ids[offset:offset + limit], len(found.ids)
            search = {"scan_before": found.before or None, "searched": found.searched,
                      "candidates": found.candidates, "partial": found.partial,
                      "next_scan_before": found.next_before}
        else:
            ids, total = store.indexes.page(query, offset, limit)
        items, gone = summaries(store, ids)
        if not gone:
            break
        store.indexes.prune(gone, query.keys() or [])
    return {"items": items, "total": total, "limit": limit, "offset": offset, "search": search}
