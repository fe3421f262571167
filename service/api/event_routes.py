"""GET /v1/experiments/{id}/events: a JSON page, or server-sent events to follow live.

Each SSE event carries its Redis stream id as `id:`, so a client that reconnects with
`Last-Event-ID` resumes exactly after the last event it saw. The stream ends after the
`finished` transition (or at once when resuming past it). Reads are async (`XREAD BLOCK` on an
async client without a socket timeout), so a follower holds no worker thread while it waits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, status
from fastapi.responses import JSONResponse, StreamingResponse

from ajet_runner.service.api.backend import Backend, backend
from ajet_runner.service.api.errors import V1_ERRORS, error_body, error_responses
from ajet_runner.service.api.experiments import NOT_FOUND, not_found
from ajet_runner.service.api.schemas import EventPage, StreamId, stream_id_problem
from ajet_runner.statemachine.lifecycle import FINISHED, EventType, State
from ajet_runner.store.per_experiment.event_reader import EventReader
from ajet_runner.store.store import exp_key, stream_key

router = APIRouter(prefix="/v1", tags=["events"], responses=error_responses(*V1_ERRORS))
FINISHED_B = FINISHED.encode()  # as a Redis reply reads
KEEPALIVE_SECONDS = 15.0


def _parse(resp: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _stream, entries in resp or []:
        for entry_id, data in entries:
            try:
                event = json.loads(data[b"data"])
            except (KeyError, ValueError):
                event = {}
            event["event_id"] = entry_id.decode()
            event["type"] = data.get(b"type", EventType.info.value.encode()).decode()
            out.append(event)  # as stored: the models cost ~30-80 µs an event (bench/bench_events.py), a page
            # holds up to 10,000, and the client parses them (store/events.py) anyway
    return out


def is_final(event: dict[str, Any]) -> bool:
    return event.get("type") == EventType.transition and event.get("to") == State.finished.value


def _sse(event: dict[str, Any]) -> str:
    return f"id: {event['event_id']}\nevent: {event['type']}\ndata: {json.dumps(event, default=str)}\n\n"


async def _follow(r: EventReader, exp_id: str, after: str, keepalive: float) -> AsyncIterator[str]:
    yield "retry: 2000\n\n"
    key = stream_key(exp_id)
    finished = await r.hget(exp_key(exp_id), "state") == FINISHED_B
    last = after
    while True:
        resp = await r.xread({key: last}, count=200, block=None if finished else int(keepalive * 1000))
        events = _parse(resp)
        for event in events:
            last = event["event_id"]
            yield _sse(event)
            if is_final(event):
                return
        if events:
            continue
        if finished:
            return
        state = await r.hget(exp_key(exp_id), "state")
        if state is None:
            yield f"event: deleted\ndata: {json.dumps({'id': exp_id, 'type': 'deleted'})}\n\n"
            return
        if state == FINISHED_B:
            finished = True  # drain what is left without blocking, then end
            continue
        yield ": keepalive\n\n"


def _event_stream(r: EventReader, exp_id: str, start: str) -> JSONResponse | StreamingResponse:
    """The live event stream from `start` (Last-Event-ID when resuming); 422 for a malformed resume point."""
    problem = stream_id_problem(start)
    if problem:
        return JSONResponse(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, content=error_body(
            f"invalid request: Last-Event-ID: {problem}",
            [{"level": "error", "field": "Last-Event-ID", "message": problem}]))
    return StreamingResponse(_follow(r, exp_id, start, KEEPALIVE_SECONDS), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/experiments/{exp_id}/events", response_model=EventPage, responses={
    **NOT_FOUND, 200: {"description": "a JSON page, or with `Accept: text/event-stream` a live event stream",
                       "content": {"text/event-stream": {}}}})
async def events(
    exp_id: str,
    request: Request,
    after: Annotated[StreamId, Query(description="stream id: events after it (`<ms>` or `<ms>-<seq>`, each part "
                                                 "at most 2**64-1)")] = "0-0",
    limit: int = Query(1000, ge=1, le=10_000),
    wait_ms: int = Query(0, ge=0, le=30_000, description="long poll: wait this long for a first event"),
    last_event_id: str | None = Header(None, description="SSE resume point (sent by EventSource on reconnect)"),
    be: Backend = Depends(backend),
) -> Any:
    """Transitions, evaluations, progress reports, repairs: everything the experiment published."""
    r = be.aio
    if not await r.exists(exp_key(exp_id)):
        raise not_found(exp_id)
    if "text/event-stream" in request.headers.get("accept", ""):
        return _event_stream(r, exp_id, last_event_id or after)
    state = await r.hget(exp_key(exp_id), "state")
    block = None if state == FINISHED_B or not wait_ms else wait_ms  # nothing more will come once finished
    page = _parse(await r.xread({stream_key(exp_id): after}, count=limit, block=block))
    if block and page:
        state = await r.hget(exp_key(exp_id), "state")
    # EventPage documents the answer (every event type's model); the events are sent as stored, not
    # re-validated (an older writer's odd field stays readable rather than failing the page).
    return JSONResponse({"id": exp_id, "events": page, "next_after": page[-1]["event_id"] if page else after,
                         "finished": state == FINISHED_B and len(page) < limit})
