"""Server-sent events for the console: the global event stream (experiments table) and one experiment's stream.

Unnamed SSE messages (so the browser's `onmessage` sees every kind) carrying only what a page needs to decide
what to refresh: the experiment id, the event type and, for transitions, the new state. One experiment's
stream ends with an `end` message after its `finished` transition, so the page closes it instead of
reconnecting forever.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ajet_runner.service.api.event_routes import is_final
from ajet_runner.statemachine.lifecycle import FINISHED, EventType
from ajet_runner.store.events import TransitionEvent, parse_event
from ajet_runner.store.per_experiment.event_reader import EventReader
from ajet_runner.store.records import text as reply_text
from ajet_runner.store.store import GLOBAL_STREAM, exp_key, stream_key

FINISHED_B = FINISHED.encode()  # as a Redis reply reads
KEEPALIVE_MS = 15_000


async def last_id(r: EventReader, key: str) -> str:
    """The newest entry id of a stream ("0-0" when empty): a page follows from what it rendered."""
    newest = await r.xrevrange(key, count=1)
    return reply_text(newest[0][0]) if newest else "0-0"


def _message(entry_id: bytes, data: dict[bytes, bytes]) -> tuple[str, dict[str, Any]]:
    try:
        event = json.loads(data.get(b"data", b"{}"))
    except ValueError:
        event = {}
    event["type"] = data.get(b"type", EventType.info.value.encode()).decode()
    typed = parse_event(event)
    slim = {"id": data.get(b"id", b"").decode(), "type": event["type"],
            "to": typed.to if isinstance(typed, TransitionEvent) else None}
    return f"id: {entry_id.decode()}\ndata: {json.dumps(slim)}\n\n", event


async def follow(r: EventReader, after: str, exp_id: str | None = None) -> AsyncIterator[str]:
    """Events after stream id `after`: all experiments' (exp_id None) or one experiment's, until it is finished."""
    yield "retry: 3000\n\n"
    key = stream_key(exp_id) if exp_id else GLOBAL_STREAM
    last = after
    while True:
        entries = _entries(await r.xread({key: last}, count=200, block=KEEPALIVE_MS))
        for entry_id, data in entries:
            last = entry_id.decode()
            text, event = _message(entry_id, data)
            yield text
            if exp_id and is_final(event):
                yield 'data: {"type": "end"}\n\n'
                return
        if entries:
            continue
        if exp_id and await _finished(r, exp_id):
            yield 'data: {"type": "end"}\n\n'
            return
        yield ": keepalive\n\n"


def _entries(resp: Any) -> list[Any]:
    """The entries of an XREAD answer, in order (RESP2, our clients: a list of [stream, entries])."""
    assert not isinstance(resp, dict)
    return [entry for _stream, entries in resp or [] for entry in entries]


async def _finished(r: EventReader, exp_id: str) -> bool:
    """The experiment is finished, or gone: nothing more will come."""
    state = await r.hget(exp_key(exp_id), "state")
    return state is None or state == FINISHED_B
