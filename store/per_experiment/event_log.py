"""The experiment's event stream (keys.stream_key, mirrored to keys.GLOBAL_STREAM) and its log tail.

An event that comes with a state change is written by the transition (store/per_experiment/record_store.py) in the same
script as the change; `EventLog.publish` writes the others (progress, repair notes, log excerpts). The log
tail (keys.log_tail_key) is the watcher's last lines, capped, so the API can show a log without the node's disk.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.events import EventBase, checked
from ajet_runner.store.keys import GLOBAL_STREAM, exp_key, log_tail_key, published_key, stream_key
from ajet_runner.store.per_experiment.record_store import GLOBAL_STREAM_MAXLEN, STREAM_MAXLEN, decode
from ajet_runner.store.scripts import lua

__all__ = ["LOG_TAIL_CAP", "EventLog", "LogTail"]

LOG_TAIL_CAP = 200  # lines of log kept in Redis, so the API can show a log without the node's disk


class EventLog:
    """Publishing and reading an experiment's events."""

    def __init__(self, client: redis.Redis, replicated: bool) -> None:
        self.r = client
        self.replicated = replicated  # a Sentinel-managed master: every event is sent once-only
        self._publish_once = client.register_script(lua("publish_once"))

    def publish(self, exp_id: str, event: Mapping[str, Any] | EventBase, *,
                once: tuple[str, int] | None = None) -> str:
        """An event that is not a transition (progress, repair note, log excerpt), checked against its
        model (store/events.py: an unknown type raises EventRefused).

        `once=(writer, seq)` makes a retried send harmless: Redis adds the event only if that
        writer's `seq` is new (returns "" otherwise). Under Sentinel every event is sent so, with a writer of
        its own when none is given: the client retries a command across a failover, and a retry of a
        command the old master did run must not publish it twice."""
        event = checked(event)
        if once is None and self.replicated:
            once = (uuid.uuid4().hex, 1)
        payload = json.dumps({"at": time.time(), **event}, default=str)
        kind = str(event.get("type", EventType.info))
        if once is not None:
            got = self._publish_once(
                keys=[stream_key(exp_id), GLOBAL_STREAM, published_key(exp_id)],
                args=[once[0], once[1], STREAM_MAXLEN, GLOBAL_STREAM_MAXLEN, exp_id, kind, payload])
            return got.decode() if isinstance(got, bytes) else str(got)
        entry: dict[FieldT, EncodableT] = {"id": exp_id, "type": kind, "data": payload}
        pipe = self.r.pipeline(transaction=False)
        pipe.xadd(stream_key(exp_id), entry, maxlen=STREAM_MAXLEN, approximate=True)
        pipe.xadd(GLOBAL_STREAM, entry, maxlen=GLOBAL_STREAM_MAXLEN, approximate=True)
        return pipe.execute()[0].decode()

    def read(self, exp_id: str, after: str = "0-0", count: int = 1000, block_ms: int | None = None
             ) -> list[dict[str, Any]]:
        """Events after stream id `after`; with `block_ms`, wait for at least one."""
        resp = self.r.xread({stream_key(exp_id): after}, count=count, block=block_ms)
        assert not isinstance(resp, dict)  # RESP2 (our clients): a list of [stream, entries]
        out: list[dict[str, Any]] = []
        for _stream, entries in resp or []:
            for entry_id, data in entries:
                event = json.loads(data[b"data"])
                event["event_id"] = entry_id.decode()
                event["type"] = data[b"type"].decode()
                out.append(event)
        return out


class LogTail:
    """The last lines of an experiment's log, as its watcher sent them."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._append_tail = client.register_script(lua("append_tail"))

    def append(self, exp_id: str, lines: list[str], log_bytes: int | None = None, *,
               replace: bool = False, cap: int = LOG_TAIL_CAP, client: Any = None) -> int:
        """Add the watcher's new log lines to the capped tail (one round trip); -1 once the record is gone.
        With `client` (a pipeline of this server) the call is only queued there (0 returned)."""
        answer = self._append_tail(keys=[log_tail_key(exp_id), exp_key(exp_id)],
                                   args=[cap, "" if log_bytes is None else str(log_bytes),
                                         "1" if replace else "0", *lines[-cap:]], client=client)
        return 0 if client is not None else int(answer)

    def read(self, exp_id: str, lines: int = LOG_TAIL_CAP) -> list[str]:
        """The last `lines` lines the watcher sent (an older record's JSON `log_tail` field as fallback)."""
        got = [x.decode("utf-8", errors="replace") if isinstance(x, bytes) else x
               for x in self.r.lrange(log_tail_key(exp_id), -max(1, lines), -1)]
        if got:
            return got
        old = decode({"log_tail": self.r.hget(exp_key(exp_id), "log_tail") or b""}).get("log_tail") or []
        return [str(x) for x in old][-lines:]
