"""Idempotent submission: the same `Idempotency-Key` always names the same experiment.

The first request with a key claims it atomically (`SET key value NX EX ttl`) for a fresh id,
then submits under that id; a rejected submission releases the claim (compare-and-delete), so
a corrected retry may use the key again. A later request with the key gets the first
experiment's record; with a different blueprint text, or another placement (node, nodes,
priority, blueprint path, stage), it is refused naming what differs (the key is not a dedup of
content, it names one submission: answering the first record would tell the client its
different request was done).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ajet_runner.store.keys import idempotency_key
from ajet_runner.store.scripts import lua
from ajet_runner.store.store import Store

TTL_SECONDS = 7 * 24 * 3600
KEY_PATTERN = r"^[\x21-\x7e]{1,200}$"  # printable ASCII, no spaces


class IdempotencyConflict(ValueError):
    """The key was used for another blueprint, or its experiment was deleted meanwhile."""


@dataclass
class Claim:
    exp_id: str
    fresh: bool  # True: submit now under exp_id; False: the key's experiment already exists
    value: str


redis_key = idempotency_key


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


PLACEMENT = ("node", "nodes", "priority", "blueprint_path", "stage")  # what else a repeated key must repeat


def claim(store: Store, key: str, text: str, new_id: Callable[[], str], ttl: int = TTL_SECONDS,
          placement: Mapping[str, Any] | None = None) -> Claim:
    """Claim `key` for a new id, or return the id it already names (same blueprint text and placement
    only: `placement` holds the PLACEMENT fields as sent, None or missing = not given)."""
    r = store.r
    where = {name: _plain((placement or {}).get(name)) for name in PLACEMENT}
    value = json.dumps({"id": new_id(), "digest": digest(text), "placement": where})
    if r.set(redis_key(key), value, nx=True, ex=ttl):
        return Claim(json.loads(value)["id"], True, value)
    raw = r.get(redis_key(key))
    if raw is None:  # released between our SET and GET: try once more
        return claim(store, key, text, new_id, ttl, placement)
    held = json.loads(raw)
    _check_same_request(held, text, where)
    return Claim(str(held["id"]), False, raw.decode() if isinstance(raw, bytes) else str(raw))


def _check_same_request(held: dict[str, Any], text: str, where: dict[str, Any]) -> None:
    """IdempotencyConflict unless the claim `held` is an experiment's for the same blueprint text and placement."""
    if held.get("kind") == "stage":  # store/cluster/stage_idempotency.py shares the keys
        raise IdempotencyConflict(f"this Idempotency-Key was already used for stage {held.get('stage')!r}, not an "
                                  "experiment")
    if held.get("digest") != digest(text):
        raise IdempotencyConflict("this Idempotency-Key was already used for a different blueprint")
    first = held.get("placement")
    if not isinstance(first, dict):  # a claim written before placements were kept has none to compare
        return
    # `stage` is kept since claims bound it; one written before says nothing about it.
    differ = [name for name in PLACEMENT if (name in first or name != "stage") and first.get(name) != where[name]]
    if differ:
        raise IdempotencyConflict("this Idempotency-Key was already used for the same blueprint with another "
                                  + ", ".join(f"{n} ({first.get(n)!r}, now {where[n]!r})" for n in differ))


def _plain(value: Any) -> Any:
    """A placement value as JSON keeps it, so a stored claim compares equal to the same request."""
    if value in (None, "", []):
        return None
    return list(value) if isinstance(value, (list, tuple)) else value


def release(store: Store, key: str, held: Claim) -> None:
    """Give the key up (the submission was refused), only if it still names our claim."""
    store.r.eval(lua("del_if_value"), 1, redis_key(key), held.value)


def first_record(store: Store, key: str, held: Claim, timeout: float = 10.0) -> dict[str, Any] | None:
    """The record the key names; waits while the first request is still creating it.

    None when the claim was released meanwhile (the first submission was refused): the caller
    claims again.
    """
    deadline = time.monotonic() + timeout
    while True:
        rec = store.records.raw(held.exp_id)
        if rec is not None:
            return rec
        if store.r.get(redis_key(key)) is None:
            return None
        if time.monotonic() >= deadline:
            raise IdempotencyConflict(f"the experiment submitted with this Idempotency-Key ({held.exp_id}) "
                                      "no longer exists (deleted), or its submission is still in progress")
        time.sleep(0.05)
