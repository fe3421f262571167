"""/v1/notifications/dead: the webhooks given up on (the outbox's dead letters, newest first).

A notification whose POST failed AJET_RUNNER_WEBHOOK_MAX_ATTEMPTS times (backoff 2 s, doubling, capped), or whose
URL may not be posted to, is kept here with where it was going (no credentials: scheme, host, port and path),
how many attempts it had and the last error, so an operator sees what a receiver missed; the console's
Notifications page shows the same (workers/notify/deliverer.py writes them, store/cluster/outbox.py keeps the newest
DEAD_KEPT)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from ajet_runner.service.api.backend import Backend, backend
from ajet_runner.service.api.errors import V1_ERRORS, error_responses
from ajet_runner.statemachine.blueprint.webhook_url import shown_url
from ajet_runner.store.cluster.outbox import DEAD_KEPT
from ajet_runner.store.store import Store

router = APIRouter(prefix="/v1", tags=["notifications"], responses=error_responses(*V1_ERRORS))


class DeadLetter(BaseModel):
    kind: str = Field(description="experiment_finished or stage_finished")
    delivery: str = Field("", description="the X-Ajet-Runner-Delivery id every attempt carried")
    id: str | None = Field(None, description="the experiment (experiment_finished)")
    stage: str | None = Field(None, description="the stage (stage_finished)")
    url: str = Field("", description="where it was posted: scheme, host, port and path only")
    attempts: int = 0
    error: str = Field("", description="why it was given up: the last attempt's error")
    created_at: float | None = None
    given_up_at: float | None = None


class DeadLetters(BaseModel):
    total: int = Field(description=f"dead letters kept (the newest {DEAD_KEPT})")
    items: list[DeadLetter]


def _number(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def dead_letter(task: dict[str, Any]) -> dict[str, Any]:
    """One stored task as the API and the console show it."""
    return {"kind": str(task.get("kind") or ""), "delivery": str(task.get("delivery") or ""),
            "id": str(task["id"]) if task.get("id") else None,
            "stage": str(task["stage"]) if task.get("stage") else None,
            "url": shown_url(str(task.get("url") or "")) if task.get("url") else "",
            "attempts": int(_number(task.get("attempts")) or 0),
            "error": str(task.get("given_up") or task.get("last_error") or "")[:500],
            "created_at": _number(task.get("created_at")), "given_up_at": _number(task.get("given_up_at"))}


def dead_letters(store: Store, limit: int = 100) -> dict[str, Any]:
    outbox = store.outbox()
    return {"total": outbox.dead_count(), "items": [dead_letter(t) for t in outbox.dead(limit)]}


@router.get("/notifications/dead", response_model=DeadLetters)
def list_dead_letters(limit: int = Query(100, ge=1, le=DEAD_KEPT), be: Backend = Depends(backend)) -> dict[str, Any]:
    """Webhooks given up on, newest first: where each was going, its attempts and its last error."""
    return dead_letters(be.store, limit)
