"""Stages: named groups of experiments (`submit --stage NAME`, a sweep, `ajet-runner stage add`).

The record carries its stage (`stage` field); the stage's index (a zset of ids, store/keys.stage_key) is
written in the MULTI that writes the record (store/stage_member.lua, from `Records.create`), or with the
field by store/stage_add.lua. A stage's settings (its dir for the automatic report, its own webhook URL)
and bookkeeping (the membership last reported) live in one hash beside it, written with its first accepted
experiment (store/stage_member.lua): a refused submission leaves no stage and rewrites no settings. A stage
whose last experiment expired (or was withdrawn) goes too (store/stage_drop_empty.lua, store/sweep_expired.lua).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

from redis.typing import EncodableT, FieldT

from ajet_runner.statemachine.lifecycle import FINISHED, EventType
from ajet_runner.store.keys import STAGES, exp_key, stage_key, stage_meta_key
from ajet_runner.store.records import text
from ajet_runner.store.scripts import lua
from ajet_runner.store.store import Store

__all__ = ["STAGE_PATTERN", "StageNameError", "add_to_stage", "check_stage_name", "define_stage", "drop_if_empty",
           "stage_counts", "stage_ids", "stage_meta", "stage_names"]

STAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_STAGE = re.compile(STAGE_PATTERN)
META_FIELDS = ("created_at", "dir", "webhook_url", "reported_members", "reported_task", "report_written",
               "report_error")


class StageNameError(ValueError):
    """A stage name that is not a short word of letters, digits, `.`, `_`, `-`."""


def check_stage_name(name: str) -> str:
    if not _STAGE.match(name or ""):
        raise StageNameError(f"stage name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-', starting "
                             "with a letter or digit")
    return name


def define_stage(store: Store, name: str, *, directory: str = "", webhook_url: str = "") -> None:
    """Create the stage if new; set its dir and webhook URL when given (an existing stage keeps its others)."""
    check_stage_name(name)
    now = time.time()
    pipe = store.r.pipeline(transaction=True)
    pipe.zadd(STAGES, {name: now}, nx=True)
    pipe.hsetnx(stage_meta_key(name), "created_at", now)
    fields: dict[FieldT, EncodableT] = {k: v for k, v in (("dir", directory), ("webhook_url", webhook_url)) if v}
    if fields:
        pipe.hset(stage_meta_key(name), mapping=fields)
    pipe.execute()


def stage_meta(store: Store, name: str) -> dict[str, str]:
    raw = store.r.hgetall(stage_meta_key(name))
    return {text(k): text(v) for k, v in raw.items()}


def stage_names(store: Store) -> list[str]:
    """Every stage, newest first."""
    return [text(n) for n in store.r.zrevrange(STAGES, 0, -1)]


def stage_ids(store: Store, name: str) -> list[str]:
    """The stage's experiments, oldest first (the order they were submitted in)."""
    return [text(i) for i in store.r.zrange(stage_key(name), 0, -1)]


def forget_members(store: Store, name: str, ids: set[str] | list[str]) -> None:
    """Drop ids whose records are gone (expired after the retention time) from the stage's index; a stage
    left with none goes too (drop_if_empty)."""
    if ids:
        store.r.zrem(stage_key(name), *ids)
        drop_if_empty(store, name)


def drop_if_empty(store: Store, name: str) -> bool:
    """Forget a stage with no experiment left (its name, settings, bookkeeping), atomically with member
    writes (store/stage_drop_empty.lua); True when it was dropped."""
    return bool(store.r.eval(lua("stage_drop_empty"), 3, stage_key(name), stage_meta_key(name), STAGES, name))


def add_to_stage(store: Store, name: str, ids: list[str]) -> list[str]:
    """Put existing experiments into stage `name` (leaving any other stage); returns the ids with no record."""
    check_stage_name(name)
    if not ids:
        return []
    missing = store.r.eval(lua("stage_add"), 3, stage_key(name), STAGES, stage_meta_key(name), name, exp_key(""),
                           stage_key(""), time.time(), *ids)
    return [text(m) for m in missing or []]


def stage_counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{"states": {state: n}, "outcomes": {outcome: n}} of a stage's records (fields `state`, `outcome`)."""
    states = Counter(str(r.get("state") or "") for r in records)
    outcomes = Counter(str(r.get("outcome")) for r in records if r.get("state") == FINISHED and r.get("outcome"))
    return {"states": dict(sorted(states.items())), "outcomes": dict(sorted(outcomes.items()))}


def evaluation_events(store: Store, exp_id: str) -> list[dict[str, Any]]:
    """Every `evaluation` event of an experiment (step, dataset, metrics), oldest first: its curve when its
    results.json cannot be read."""
    out: list[dict[str, Any]] = []
    after = "0-0"
    while batch := store.events.read(exp_id, after=after, count=1000):
        out += [e for e in batch if e.get("type") == EventType.evaluation]
        after = batch[-1]["event_id"]
    return out


def note_report(store: Store, name: str, *, written: str = "", error: str = "") -> None:
    """Where the stage report was written (or why it could not be), for GET /v1/stages and the console."""
    fields: dict[FieldT, EncodableT] = {"report_written": written, "report_error": error,
                                              "report_at": time.time()}
    store.r.hset(stage_meta_key(name), mapping=fields)
