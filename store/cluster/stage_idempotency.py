"""Idempotent stage submission: the same `Idempotency-Key` on `POST /v1/stages` always names the same stage.

As for experiments (store/per_experiment/idempotency.py, whose keys these share, so one key never names both an
experiment and a stage): the first request claims the key atomically (`SET NX EX`) with the digest of its
whole body, submits, then records what was submitted (the ids, the stage dir, the refused) under the
same key, keeping its expiry. A repeat with the same body gets that answer, with the experiments as they
are now; with another body (another stage name, another blueprint, sweep, dir, webhook or placement) it
is refused naming the key. A submission refused whole releases the claim, so a corrected retry may use it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ajet_runner.store.per_experiment.idempotency import TTL_SECONDS, IdempotencyConflict, digest, redis_key
from ajet_runner.store.scripts import lua
from ajet_runner.store.store import Store

__all__ = ["StageClaim", "body_digest", "claim_stage", "complete_stage", "first_answer", "release_stage"]

STAGE_KIND = "stage"


@dataclass
class StageClaim:
    fresh: bool  # True: submit now; False: the key's stage was submitted (or is being submitted) already
    value: str  # the claim as stored (released only while it is still ours)
    held: dict[str, Any]


def body_digest(body: Mapping[str, Any]) -> str:
    """The request as sent, canonically: two bodies that mean the same submission digest the same."""
    return digest(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str))


def claim_stage(store: Store, key: str, stage: str, body: Mapping[str, Any], ttl: int = TTL_SECONDS) -> StageClaim:
    """Claim `key` for this stage submission, or return the claim that holds it (same body only: else
    IdempotencyConflict naming what the key was used for)."""
    mine = {"kind": STAGE_KIND, "stage": stage, "digest": body_digest(body)}
    value = json.dumps(mine)
    if store.r.set(redis_key(key), value, nx=True, ex=ttl):
        return StageClaim(True, value, mine)
    raw = store.r.get(redis_key(key))
    if raw is None:  # released between our SET and GET: try once more
        return claim_stage(store, key, stage, body, ttl)
    held = json.loads(raw)
    if held.get("kind") != STAGE_KIND:
        raise IdempotencyConflict(f"this Idempotency-Key was already used for experiment {held.get('id', '?')}, "
                                  "not a stage")
    if held.get("stage") != stage:
        raise IdempotencyConflict(f"this Idempotency-Key was already used for stage {held.get('stage')!r}, not "
                                  f"{stage!r}")
    if held.get("digest") != mine["digest"]:
        raise IdempotencyConflict(f"this Idempotency-Key was already used for stage {stage!r} with another "
                                  "request (other blueprints, sweep, dir, webhook or placement)")
    return StageClaim(False, raw.decode() if isinstance(raw, bytes) else str(raw), held)


def complete_stage(store: Store, key: str, claim: StageClaim, answer: Mapping[str, Any]) -> None:
    """Record what the claimed submission did (`answer`: stage, stage_dir, ids, refused), keeping the key's
    expiry; only while the key still holds our claim."""
    done = json.dumps({**claim.held, "answer": dict(answer)}, default=str)
    store.r.set(redis_key(key), done, xx=True, keepttl=True)


def release_stage(store: Store, key: str, claim: StageClaim) -> None:
    """Give the key up (the submission was refused whole), only if it still names our claim."""
    store.r.eval(lua("del_if_value"), 1, redis_key(key), claim.value)


def first_answer(store: Store, key: str, claim: StageClaim, timeout: float = 30.0) -> dict[str, Any] | None:
    """What the first submission with the key answered; waits while it is still submitting. None when its
    claim was released meanwhile (it was refused whole): the caller claims again."""
    deadline = time.monotonic() + timeout
    held: dict[str, Any] = claim.held
    while True:
        if isinstance(held.get("answer"), dict):
            return dict(held["answer"])
        if time.monotonic() >= deadline:
            raise IdempotencyConflict(f"the stage submitted with this Idempotency-Key ({held.get('stage')}) is still "
                                      "being submitted; retry in a moment")
        time.sleep(0.05)
        raw = store.r.get(redis_key(key))
        if raw is None:
            return None
        held = json.loads(raw)
