"""Redis is the system of record: one hash per experiment, event streams, nodes, GPU slots.

Every state change is a compare-and-set on the experiment's `version` inside one Lua script
that also appends the event to the experiment's stream and the global stream, so a
transition is never persisted without its event, and two workers can never both launch one
experiment (the `start` transition is the claim).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis.client import Pipeline, PubSub
from redis.typing import EncodableT, FieldT
from rq.job import Job
from rq.serializers import JSONSerializer

from ajet_runner.statemachine.lifecycle import ACTIVE_STATE_NAMES, FINISHED, EventType, Outcome, State
from ajet_runner.store.clients import is_replicated, master_address
from ajet_runner.store.events import EventBase, checked
from ajet_runner.store.gangs import GangStore
from ajet_runner.store.keys import (
    EXPIRING,
    EXPIRING_WHERE,
    GLOBAL_STREAM,
    INDEX,
    NODES,
    PREFIX,
    PURPOSES,
    RESULT_DIRS,
    STAGES,
    STATS_NAMES,
    UNFINISHED,
    cancel_channel,
    drain_key,
    duration_bucket_key,
    exp_key,
    gpu_key,
    log_tail_key,
    node_active_key,
    node_index_key,
    node_key,
    node_outcome_key,
    node_state_key,
    outcome_index_key,
    published_key,
    stage_key,
    stage_meta_key,
    state_index_key,
    stats_key,
    stream_key,
    swarm_port_key,
)
from ajet_runner.store.outbox import Outbox
from ajet_runner.store.records import ExperimentRecord, text
from ajet_runner.store.scripts import lua
from ajet_runner.store.snapshot import RowCache, Snapshot, read_snapshot, read_stages
from ajet_runner.store.stats import TransitionStats

if TYPE_CHECKING:
    from ajet_runner.store.clients import RedisTarget

__all__ = ["GLOBAL_STREAM", "INDEX", "NODES", "PREFIX", "REDIS_DOWN", "UNFINISHED", "RedisError", "ResultDirTaken",
           "Store", "TransitionConflict",
           "decode",
           "drain_key", "exp_key", "gpu_key", "new_id", "node_key", "stream_key", "swarm_port_key"]

# What callers above the store catch, without importing redis themselves: any Redis failure, and the ones
# that mean it is unreachable (retry later) rather than a bug.
RedisError = redis.RedisError
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)

log = logging.getLogger(__name__)
STREAM_MAXLEN = 10_000
# Under Sentinel, a transition waits this long for one replica to have it (WAIT 1): replication is asynchronous,
# and a claim the master acknowledged and lost in a failover could otherwise be made a second time.
REPLICA_WAIT_MS = 100
REPLICA_WAIT_CLAIM_MS = 1000  # ... and a claim (or an adoption) longer: a claim lost is a run launched twice
LOG_TAIL_CAP = 200  # lines of log kept in Redis, so the API can show a log without the node's disk
NODE_RECORD_TTL = 3600
NODE_ALIVE_SECONDS = 30.0  # a node whose last heartbeat is older is down (node_up 0, not offered work)
GLOBAL_STREAM_MAXLEN = 100_000
STATE_NAMES = tuple(s.value for s in State)  # the order of the per-state index keys given to the script
OUTCOME_NAMES = tuple(o.value for o in Outcome)  # the duration-bucket keys whose expiry the script refreshes
CLAIM_FIELD = "result_dir_claim"  # the record's claimed result dir (a real path), released when it finishes
HOLD_SECONDS = 60.0  # a claim without a record (while a refusal report is written) lapses after this
DURATION_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, float("inf"))

# JSON-encoded hash fields (everything else is a plain string).
JSON_FIELDS = (
    "lifecycle", "latest_metrics", "handle", "gpus", "blueprint_json", "problems", "config_changes", "ctx",
    "log_tail", "best_metrics",
)


def _drain_record(raw: bytes | str | None) -> dict[str, Any] | None:
    """A drain as stored: JSON now; a bare "1" from older versions is a non-sticky drain by nobody known."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        data = {}
    return {"by": str(data.get("by") or ""), "reason": str(data.get("reason") or ""),
            "sticky": bool(data.get("sticky")), "at": data.get("at")}


def _node_info(name: str, raw: Mapping[bytes, bytes], drain: bytes | None) -> dict[str, Any]:
    """A node's heartbeat hash (JSON values), named, with its drain record."""
    info = {k.decode(): json.loads(v) for k, v in raw.items()}
    info["name"] = name
    info["drain"] = _drain_record(drain)
    return info


def new_id() -> str:
    """12 random hex digits: unique enough, short to type, and its head names the tmux session."""
    return uuid.uuid4().hex[:12]


class TransitionConflict(RuntimeError):
    """Someone else changed the experiment first (version moved, or another live owner)."""


class ResultDirTaken(TransitionConflict):
    """The result dir (or one inside it, or one it is inside) is claimed by a live experiment."""

    def __init__(self, result_dir: str, holder: str, state: str, held_dir: str) -> None:
        self.result_dir, self.holder, self.state, self.held_dir = result_dir, holder, state, held_dir
        super().__init__(f"result dir {result_dir} is taken by experiment {holder} ({state}, dir {held_dir})")


def _encode(fields: Mapping[str, Any]) -> list[str]:
    flat: list[str] = []
    for k, v in fields.items():
        if k in JSON_FIELDS:
            v = json.dumps(v, default=str)
        elif v is None:
            v = ""
        elif isinstance(v, bool):
            v = "1" if v else "0"
        flat += [k, str(v)]
    return flat


_Key = TypeVar("_Key", bound="bytes | str")


def decode(raw: Mapping[_Key, Any]) -> dict[str, Any]:
    """A Redis hash (bytes from the server, or str fields a caller already picked) → a dict with JSON fields decoded."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key = k.decode() if isinstance(k, bytes) else k
        val = v.decode() if isinstance(v, bytes) else v
        if key in JSON_FIELDS:
            try:
                out[key] = json.loads(val) if val else None
            except json.JSONDecodeError:
                out[key] = None
        else:
            out[key] = val
    return out


class Store:
    """The experiment records, their events, node heartbeats and GPU slots."""

    retention_seconds: int = 0  # a finished record expires after this (0: never); set from the settings

    def __init__(self, client: redis.Redis, retention_seconds: float | None = None) -> None:
        self.r = client
        self.replicated = is_replicated(client)  # a Sentinel-managed master: transitions wait for a replica
        if retention_seconds is None:
            from ajet_runner.store.settings import get_settings

            retention_seconds = get_settings().finished_retention_days * 86400
        self.retention_seconds = int(retention_seconds)  # a finished record expires after this (0: never)
        self._transition = client.register_script(lua("transition"))
        self._reserve = client.register_script(lua("reserve_gpus"))
        self._release_if_owner = client.register_script(lua("hdel_if_owner"))
        self._renew = client.register_script(lua("renew_lease"))
        self._hand_back = client.register_script(lua("hand_back"))
        self._set_if_exists = client.register_script(lua("hset_if_exists"))
        self._poll_run = client.register_script(lua("poll_run"))
        self._append_tail = client.register_script(lua("append_tail"))
        self._publish_once = client.register_script(lua("publish_once"))
        self._submit_view = client.register_script(lua("submit_view"))
        self._claim = client.register_script(lua("claim_result_dir"))
        self._heartbeat = client.register_script(lua("heartbeat"))
        from ajet_runner.store.filters import Indexes

        self.indexes = Indexes(client, self.retention_seconds)  # the filtered lists, the expiry sweep, the backfill

    @classmethod
    def from_url(cls, url: RedisTarget | str, retention_seconds: float | None = None, **options: Any) -> Store:
        """A store on its own client for a URL or a target (store/clients.py); `options` are redis-py's
        (socket_timeout, health_check_interval, ...)."""
        from ajet_runner.store.clients import connect

        options.setdefault("health_check_interval", 10)
        return cls(connect(url, **options), retention_seconds)

    def outbox(self) -> Outbox:
        """The outbox of notices to deliver (store/outbox.py), on this store's client."""
        return Outbox(self.r)

    def gangs(self) -> GangStore:
        """The multi-node gangs (store/gangs.py), on this store's client."""
        return GangStore(self.r)

    def pubsub(self, *, confirmations: bool = False) -> PubSub:
        """A pub/sub connection (e.g. to hear a cancel announced on `cancel_channel`): the caller closes it.
        `confirmations`: get_message also returns Redis's (un)subscribe confirmations."""
        return self.r.pubsub(ignore_subscribe_messages=not confirmations)

    def poke(self, channel: str) -> None:
        """Publish on a channel of the caller's own (to wake its listener)."""
        self.r.publish(channel, "1")

    @property
    def server(self) -> tuple[Any, ...]:
        """Which server and account this store's client talks to (equal for two clients of one Redis)."""
        from ajet_runner.store.clients import server_identity

        return server_identity(self.r)

    def twin(self, **options: Any) -> Store:
        """A Store on a client of its own (own pool) with this one's connection settings, auth and TLS
        included; `options` override some (timeouts)."""
        from ajet_runner.store.clients import clone

        return Store(clone(self.r, **options))

    # -- the job queue (RQ, store/queue.py) on this store's client ----------------------------
    def enqueue_drive(self, exp_id: str, queue_name: str, *, at_front: bool = False,
                      max_seconds: float | None = None, job_id: str = "", pipeline: Pipeline | None = None) -> str:
        """The experiment's drive job on `queue_name` (its id noted in the record; with `pipeline`, only the
        job is added to that MULTI: store/queue.py's enqueue_drive); returns the job id."""
        from ajet_runner.store.queue import enqueue_drive

        return enqueue_drive(self.r, self, exp_id, queue_name, at_front=at_front, max_seconds=max_seconds,
                             job_id=job_id, pipeline=pipeline)

    def enqueue_rank(self, exp_id: str, rank: int, node: str, max_seconds: float | None = None) -> str:
        """A multi-node run's rank job on that node's queue, ahead of new work; returns the job id."""
        from ajet_runner.store.queue import enqueue_rank

        return enqueue_rank(self.r, exp_id, rank, node, max_seconds)

    def remove_queued(self, job_id: str, queue_name: str) -> bool:
        """Take a drive job out of its queue (and cancel it); True if it was still waiting there."""
        from ajet_runner.store.queue import remove_queued

        return remove_queued(self.r, job_id, queue_name)

    def fetch_job(self, job_id: str) -> Job:
        """The RQ job (raises rq's NoSuchJobError when it is gone)."""
        return Job.fetch(job_id, connection=self.r, serializer=JSONSerializer)

    def master_address(self) -> tuple[str, int] | None:
        """Under Sentinel, the master this store's client last connected to (a change: a failover); else None."""
        return master_address(self.r)

    def ping(self) -> bool:
        return bool(self.r.ping())

    def close(self) -> None:
        """Close the client's connections (a short-lived process: its pool goes with it)."""
        self.r.close()

    # -- experiments ---------------------------------------------------------------------
    def create(self, exp_id: str, fields: Mapping[str, Any], event: Mapping[str, Any], *,
               result_dir_key: str = "", also: Callable[[Pipeline], object] | None = None,
               stage_settings: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A new record, indexed, with its `submitted` transition; returns the record as stored.

        One MULTI, so nothing is half-written: the record (version 0), its index entries, the transition
        script (sent whole with EVAL: a script-cache miss cannot split the transaction), whatever `also` adds
        to the transaction, and the read-back of the record.

        With `result_dir_key` (a real path) the record is written by the claim script
        (store/claim_result_dir.lua), which first claims that result dir: the claim and the record are one
        compare-and-set, so of concurrent submissions naming one dir exactly one gets a record. The others
        raise ResultDirTaken and write nothing (the transition that follows finds no record). `also` cannot
        be combined with a claim (it would run whatever the claim decided): add the job with `admit`.
        `stage_settings` (the stage's dir, webhook URL) are written with the stage's index, only if the record
        was (store/stage_member.lua)."""
        if result_dir_key and also is not None:
            raise ValueError("a claimed create writes no job: add it with admit() once the claim is won")
        now = time.time()
        record = {"id": exp_id, "version": 0, "created_at": now, **fields}
        if result_dir_key:
            record[CLAIM_FIELD] = result_dir_key
        keys, args = self._transition_call(exp_id, expected_version=0, fields={}, event={"type": EventType.submitted,
                                                                                  **event},
                                           node=str(fields.get("target_node") or ""))
        pipe = self.r.pipeline(transaction=True)
        pipe.multi()  # explicit: what `also` adds (RQ's enqueue with a pipeline) expects a MULTI under way
        if result_dir_key:
            pipe.eval(lua("claim_result_dir"), 3, RESULT_DIRS, exp_key(exp_id), INDEX,
                      result_dir_key, exp_id, exp_key(""), "0", now, *_encode(record))
        else:
            pipe.hset(exp_key(exp_id), mapping=dict(zip(*[iter(_encode(record))] * 2, strict=True)))
            pipe.zadd(INDEX, {exp_id: now})
        pipe.eval(lua("transition"), len(keys), *keys, *args)
        if stage := str(fields.get("stage") or ""):  # the stage's index, only if the record was written
            settings = [x for pair in (stage_settings or {}).items() for x in pair]
            pipe.eval(lua("stage_member"), 4, exp_key(exp_id), stage_key(stage), STAGES, stage_meta_key(stage),
                      stage, now, *settings)
        if also is not None:
            also(pipe)
        pipe.hgetall(exp_key(exp_id))
        replies = pipe.execute()
        if result_dir_key and not int(replies[0][0]):
            _, holder, state, held = (text(x) for x in replies[0])
            raise ResultDirTaken(result_dir_key, holder, state, held)
        ok, detail = replies[1 if result_dir_key else 2]
        if not ok:  # cannot happen for a record written in the same transaction; kept as the script's contract
            raise TransitionConflict(f"experiment {exp_id}: {text(detail)} check failed")
        return decode(replies[-1])

    def admit(self, exp_id: str, fields: Mapping[str, Any], also: Callable[[Pipeline], object]) -> dict[str, Any]:
        """After a claimed `create` (and whatever had to wait for the claim, e.g. archiving the dir's earlier
        run): `fields` and what `also` adds (the RQ job) in one MULTI; returns the record as stored."""
        pipe = self.r.pipeline(transaction=True)
        pipe.multi()
        if fields:
            pipe.hset(exp_key(exp_id), mapping=dict(zip(*[iter(_encode(fields))] * 2, strict=True)))
        also(pipe)
        pipe.hgetall(exp_key(exp_id))
        return decode(pipe.execute()[-1])

    def hold_result_dir(self, result_dir_key: str, holder: str, seconds: float = HOLD_SECONDS) -> None:
        """Claim a result dir for `seconds` without a record (while a refusal report is written there);
        raises ResultDirTaken when a live experiment holds it. Give it back with `release_result_dir`."""
        got = self._claim(keys=[RESULT_DIRS, exp_key(holder), INDEX],
                          args=[result_dir_key, holder, exp_key(""), max(0.001, float(seconds)), 0])
        if not int(got[0]):
            _, other, state, held = (text(x) for x in got)
            raise ResultDirTaken(result_dir_key, other, state, held)

    def release_result_dir(self, result_dir_key: str, holder: str) -> bool:
        """Give a claim back, only while `holder` holds it (a hold, or a record's claim)."""
        raw = self.r.hget(RESULT_DIRS, result_dir_key)
        if raw is None:
            return False
        value = text(raw)
        if value.split(" ", 1)[0] != holder:
            return False
        return bool(self._release_if_owner(keys=[RESULT_DIRS], args=[result_dir_key, value]))

    def withdraw(self, exp_id: str) -> None:
        """Take back a claimed record that was never admitted (its submission was refused after the claim):
        the record, its events and indexes go, and its result dir claim is released (`delete`)."""
        self.delete(exp_id)

    def submission_view(self, result_dir_key: str) -> tuple[tuple[str, str] | None, list[dict[str, Any]]]:
        """What a submission checks, in one round trip: (id, state) of the unfinished experiment last
        submitted to this result dir (a real path), if any, and `nodes()`."""
        flat = self._submit_view(keys=[NODES, RESULT_DIRS], args=[
            result_dir_key, node_key(""), drain_key("").removeprefix(node_key("")), exp_key("")])
        holder, state = flat[0], flat[1]
        rows = sorted((text(flat[k]), flat[k + 1], flat[k + 2]) for k in range(2, len(flat), 3))
        nodes = [_node_info(name, dict(zip(raw[0::2], raw[1::2], strict=True)), drain)
                 for name, raw, drain in rows if raw]
        if holder is None or state is None or state == FINISHED.encode():
            return None, nodes
        return (text(holder), text(state)), nodes

    def get(self, exp_id: str) -> dict[str, Any] | None:
        raw = self.r.hgetall(exp_key(exp_id))
        return decode(raw) if raw else None

    def record(self, exp_id: str) -> ExperimentRecord | None:
        """The experiment's record, typed (None when it does not exist)."""
        raw = self.get(exp_id)
        return ExperimentRecord.from_hash(raw) if raw is not None else None

    def exists(self, exp_id: str) -> bool:
        return bool(self.r.exists(exp_key(exp_id)))

    def ids(self, offset: int = 0, limit: int = 1000, newest_first: bool = True) -> list[str]:
        fn = self.r.zrevrange if newest_first else self.r.zrange
        return [text(i) for i in fn(INDEX, offset, offset + limit - 1)]

    def count(self) -> int:
        return int(self.r.zcard(INDEX))

    def all(self, ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Records for `ids` (default: every experiment), in one round trip."""
        wanted = list(ids) if ids is not None else self.ids(0, 1_000_000)
        pipe = self.r.pipeline(transaction=False)
        for i in wanted:
            pipe.hgetall(exp_key(i))
        return [decode(raw) for raw in pipe.execute() if raw]

    def unfinished(self) -> list[dict[str, Any]]:
        """Records of every experiment not yet finished: what a node scans, without reading the rest."""
        return self.all(sorted(text(i) for i in self.r.smembers(UNFINISHED)))

    def transition(
        self,
        exp_id: str,
        *,
        expected_version: int | None,
        fields: Mapping[str, Any],
        event: Mapping[str, Any],
        owner: str = "",
        stats: TransitionStats | Mapping[str, Any] | None = None,
        node: str = "",
        durable: bool = False,
    ) -> int:
        """Compare-and-set `fields` and publish `event` atomically; returns the new version. `durable` (a claim):
        under Sentinel, wait longer for a replica to have it.

        The script also keeps the indexes: per state, and (given the `node` the caller acts for) the
        node's active set and experiment index; a finished record starts to expire."""
        keys, args = self._transition_call(exp_id, expected_version=expected_version, fields=fields, event=event,
                                           owner=owner, stats=stats, node=node)
        if fields.get("state") == State.finished.value:
            ok, detail = self._finishing(exp_id, keys, args)
        elif self.replicated:
            wait_ms = REPLICA_WAIT_CLAIM_MS if durable else REPLICA_WAIT_MS
            ok, detail = self._replicated_transition(exp_id, keys, args, wait_ms)
        else:
            ok, detail = self._transition(keys=keys, args=args)
        if not ok:
            raise TransitionConflict(f"experiment {exp_id}: {text(detail)} check failed")
        return int(text(detail))

    def _replicated_transition(self, exp_id: str, keys: list[str], args: list[Any], wait_ms: int) -> Any:
        """The transition, then WAIT for one replica on the same connection (one pipeline): once this returns,
        a failover keeps the write (Sentinel promotes the replica that is most up to date). A replica that
        does not answer in `wait_ms` is logged, not waited for: the runs go on with one server.
        The finishing transition is not waited for: its result dir's finish.flag proves it (reconcile)."""
        pipe = self.r.pipeline(transaction=False)
        self._transition(keys=keys, args=args, client=pipe)
        pipe.execute_command("WAIT", 1, wait_ms)
        answer, acked = pipe.execute()
        if not int(acked or 0):
            log.warning("%s: no replica confirmed a transition within %d ms (a failover now could lose it)",
                        exp_id, wait_ms)
        return answer

    def _finishing(self, exp_id: str, keys: list[str], args: list[Any]) -> Any:
        """The finishing transition and its outbox task (store/outbox.py) in one MULTI: the notice that it
        finished is never lost, nor queued for a transition that did not happen."""
        from ajet_runner.store.outbox import queue_finish

        pipe = self.r.pipeline(transaction=True)
        pipe.eval(lua("transition"), len(keys), *keys, *args)
        queue_finish(pipe, exp_id)
        return pipe.execute()[0]

    def _transition_call(self, exp_id: str, *, expected_version: int | None, fields: Mapping[str, Any],
                         event: Mapping[str, Any], owner: str = "",
                         stats: TransitionStats | Mapping[str, Any] | None = None,
                         node: str = "") -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of the transition script (store/transition.lua documents them)."""
        counted = TransitionStats.of(stats)
        packed = counted.packed(["inf" if b == float("inf") else repr(b) for b in DURATION_BUCKETS])
        payload = {"at": time.time(), **checked(event, EventType.transition)}
        keys = [exp_key(exp_id), stream_key(exp_id), GLOBAL_STREAM, UNFINISHED,
                stats_key("transitions"), stats_key("outcomes"), stats_key("duration_sum"),
                stats_key("repairs"), stats_key("advised"), stats_key("result_write_failures"),
                node_active_key(node or "-"), EXPIRING, log_tail_key(exp_id), published_key(exp_id), RESULT_DIRS,
                EXPIRING_WHERE, PURPOSES,
                # then by name, in the order ARGV[7] and ARGV[10] list the names: the script looks them up so
                *(state_index_key(n) for n in STATE_NAMES),
                *(k for o in OUTCOME_NAMES for k in (outcome_index_key(o), duration_bucket_key(o)))]
        node_prefix, node_suffix = node_index_key("\0").split("\0")
        args = [
            "" if expected_version is None else str(expected_version),
            owner,
            json.dumps(payload, default=str),
            json.dumps(packed),
            STREAM_MAXLEN,
            GLOBAL_STREAM_MAXLEN,
            ",".join(STATE_NAMES),
            node,
            self.retention_seconds,
            ",".join(OUTCOME_NAMES),
            node_prefix,
            node_suffix,
            node_state_key("\0", "").split("\0")[1],
            node_outcome_key("\0", "").split("\0")[1],
            *_encode(fields),
        ]
        return keys, args

    def update(self, exp_id: str, fields: Mapping[str, Any]) -> None:
        """Fields that are not state (latest metrics, lease, handle): no version bump, no event."""
        if fields:
            self.r.hset(exp_key(exp_id), mapping=dict(zip(*[iter(_encode(fields))] * 2, strict=True)))

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

    def events(self, exp_id: str, after: str = "0-0", count: int = 1000, block_ms: int | None = None
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

    def append_log_tail(self, exp_id: str, lines: list[str], log_bytes: int | None = None, *,
                        replace: bool = False, cap: int = LOG_TAIL_CAP, client: Any = None) -> int:
        """Add the watcher's new log lines to the capped tail (one round trip); -1 once the record is gone.
        With `client` (a pipeline of this server) the call is only queued there (0 returned)."""
        answer = self._append_tail(keys=[log_tail_key(exp_id), exp_key(exp_id)],
                                   args=[cap, "" if log_bytes is None else str(log_bytes),
                                         "1" if replace else "0", *lines[-cap:]], client=client)
        return 0 if client is not None else int(answer)

    def log_tail(self, exp_id: str, lines: int = LOG_TAIL_CAP) -> list[str]:
        """The last `lines` lines the watcher sent (an older record's JSON `log_tail` field as fallback)."""
        got = [x.decode("utf-8", errors="replace") if isinstance(x, bytes) else x
               for x in self.r.lrange(log_tail_key(exp_id), -max(1, lines), -1)]
        if got:
            return got
        old = decode({"log_tail": self.r.hget(exp_key(exp_id), "log_tail") or b""}).get("log_tail") or []
        return [str(x) for x in old][-lines:]

    def delete(self, exp_id: str) -> None:
        """The record, its events and indexes go; a result dir it still claims is released with them."""
        node, target, claim, stage = self.r.hmget(exp_key(exp_id), "node", "target_node", CLAIM_FIELD, "stage")
        nodes = {text(n) for n in (node, target) if n}
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(exp_key(exp_id), stream_key(exp_id), published_key(exp_id), log_tail_key(exp_id))
        if stage:
            pipe.zrem(stage_key(text(stage)), exp_id)
        self._unindex(pipe, [exp_id], nodes)
        if claim:
            pipe.eval(lua("hdel_if_owner"), 1, RESULT_DIRS, text(claim), exp_id)
        pipe.execute()

    def _unindex(self, pipe: Any, ids: list[str], nodes: Iterable[str] = ()) -> None:
        pipe.zrem(INDEX, *ids)
        pipe.srem(UNFINISHED, *ids)
        pipe.zrem(EXPIRING, *ids)
        pipe.hdel(EXPIRING_WHERE, *ids)
        pipe.hdel(PURPOSES, *ids)
        for name in STATE_NAMES:
            pipe.zrem(state_index_key(name), *ids)
        for name in OUTCOME_NAMES:
            pipe.zrem(outcome_index_key(name), *ids)
        for node in nodes:
            pipe.zrem(node_index_key(node), *ids)
            pipe.srem(node_active_key(node), *ids)
            for name in STATE_NAMES:
                pipe.zrem(node_state_key(node, name), *ids)
            for name in OUTCOME_NAMES:
                pipe.zrem(node_outcome_key(node, name), *ids)

    # -- indexes: what a filtered list or a node's scan reads instead of every record ----------
    def ids_in(self, state: str | None = None, node: str | None = None, offset: int = 0, limit: int = 100,
               *, outcome: str | None = None, stage: str | None = None) -> tuple[list[str], int]:
        """Newest first, one page of the experiments matching every filter given, and how many match
        (store/filters.py: index zsets only, expired records swept out first)."""
        from ajet_runner.store.filters import Query

        return self.indexes.page(Query(state or "", node or "", outcome or "", stage or ""), offset, limit)

    def partial(self, ids: Iterable[str], names: Iterable[str]) -> list[dict[str, Any]]:
        """Only `names` of each record, decoded like `get` (JSON fields parsed, absent fields left out), in
        `ids` order (one pipeline); records that are gone (no `id` field) are left out."""
        return self.partial_and_gone(ids, names)[0]

    def partial_and_gone(self, ids: Iterable[str], names: Iterable[str]) -> tuple[list[dict[str, Any]], list[str]]:
        """`partial`, and the ids whose record is gone (no `id` field: the caller prunes them)."""
        ids, names = list(ids), list(names)
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(exp_key(i), names)
        out, gone = [], []
        for exp_id, values in zip(ids, pipe.execute(), strict=True):
            raw: dict[bytes | str, bytes | str] = {k: v for k, v in zip(names, values, strict=True) if v is not None}
            if raw.get("id"):
                out.append(decode(raw))
            else:
                gone.append(exp_id)
        return out, gone

    def fields_of(self, ids: list[str], names: Iterable[str]) -> list[dict[str, str]]:
        """Only `names` of each record (one pipeline); records that are gone are left out."""
        names = list(names)
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(exp_key(i), names)
        out = []
        for exp_id, values in zip(ids, pipe.execute(), strict=True):
            if all(v is None for v in values):
                continue
            rec = {k: (v.decode() if v is not None else "") for k, v in zip(names, values, strict=True)}
            rec["id"] = exp_id
            out.append(rec)
        return out

    def node_active(self, node: str, names: Iterable[str]) -> list[dict[str, str]]:
        """The node's launched, unfinished experiments with only the fields asked for: the scan reads
        its own node's index, never the cluster's. Entries that moved on (finished, adopted by another
        node, expired) are dropped from the index as they are met."""
        names = list(dict.fromkeys(["state", "node", *names]))
        recs = self._sort_fields(node_active_key(node), names)
        live = [r for r in recs if r["node"] == node and r["state"] in ACTIVE_STATE_NAMES]
        stale = {r["id"] for r in recs} - {r["id"] for r in live}
        if stale:
            self.r.srem(node_active_key(node), *stale)
        return sorted(live, key=lambda r: r["id"])

    def _sort_fields(self, key: str, names: list[str]) -> list[dict[str, str]]:
        """`names` of every record whose id is in the set or zset `key`, in one command (SORT … GET:
        Redis reads the hashes itself), whatever the number of records."""
        flat = self.r.sort(key, by="nosort", get=["#", *(exp_key("*") + "->" + n for n in names)])
        assert isinstance(flat, list)  # no `store=`: SORT returns the elements
        width = len(names) + 1
        out = []
        for k in range(0, len(flat), width):
            exp_id, values = text(flat[k]), flat[k + 1:k + width]
            rec = {n: (text(v) if v is not None else "") for n, v in zip(names, values, strict=True)}
            rec["id"] = exp_id
            out.append(rec)
        return out

    def queued(self, names: Iterable[str]) -> list[dict[str, str]]:
        """Queued experiments (the whole queue, not every record) with only the fields asked for."""
        names = list(dict.fromkeys(["state", *names]))
        recs = self._sort_fields(state_index_key(State.queued.value), names)
        return [r for r in recs if r["state"] == State.queued.value]

    def prune(self, ids: Iterable[str], keys: Iterable[str] = ()) -> int:
        """Drop ids whose record is gone (expired after the retention time, deleted) from the indexes
        (and from the index zsets `keys`, e.g. the node's or stage's a page was read from)."""
        ids = list(ids)
        if not ids:
            return 0
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.exists(exp_key(i))
        gone = [i for i, alive in zip(ids, pipe.execute(), strict=True) if not alive]
        if gone:
            pipe = self.r.pipeline(transaction=False)
            self._unindex(pipe, gone)
            for key in keys:
                pipe.zrem(key, *gone)
            pipe.execute()
        return len(gone)

    def ensure_indexes(self) -> bool:
        """Index records written before the current indexes existed, once per cluster (idempotent; a marker
        key says it was done; store/filters.py). True when it ran now."""
        return self.indexes.backfill()

    # -- ownership -----------------------------------------------------------------------
    def renew_lease(self, exp_id: str, owner: str, seconds: float) -> bool:
        return bool(self._renew(keys=[exp_key(exp_id)], args=[owner, seconds]))

    def hand_back(self, exp_id: str, owner: str) -> bool:
        """End our lease now (only while we own it): the node's supervisor re-adopts the run at its next scan."""
        return bool(self._hand_back(keys=[exp_key(exp_id)], args=[owner]))

    def end_dead_lease(self, exp_id: str, dead_owner: str) -> bool:
        """End the lease of an owner the caller proved dead (workers/identity/owner_identity.owner_dead), so the
        run is re-adopted now: compare-and-set on that exact owner value (hand_back.lua), never another's."""
        return bool(self._hand_back(keys=[exp_key(exp_id)], args=[dead_owner]))

    def poll_run(self, exp_id: str, owner: str, renew_seconds: float = 0.0) -> tuple[bool, bool]:
        """(still ours, stop requested), renewing the lease when `renew_seconds` > 0: one round trip."""
        owned, cancel = self._poll_run(keys=[exp_key(exp_id)], args=[owner, renew_seconds or 0])
        return bool(owned), bool(cancel)

    def pipeline(self) -> Any:
        """A plain (not transactional) pipeline of this server, for the calls that take `client=`."""
        return self.r.pipeline(transaction=False)

    def poll_runs(self, asks: Sequence[tuple[str, str, float]], client: Any = None) -> list[tuple[bool, bool]]:
        """`poll_run` for each (experiment, owner, renew seconds), all in one round trip (a pipeline). With
        `client` (a pipeline) the calls are only queued there: its execute() gives their answers, in order."""
        pipe = client if client is not None else self.pipeline()
        for exp_id, owner, renew in asks:
            self._poll_run(keys=[exp_key(exp_id)], args=[owner, renew or 0], client=pipe)
        if client is not None:
            return []
        return [(bool(owned), bool(cancel)) for owned, cancel in pipe.execute()]

    def request_cancel(self, exp_id: str) -> bool:
        """Set the cancel flag; False (and nothing written) when the record does not exist."""
        return self.request_stop(exp_id)

    def request_stop(self, exp_id: str, *, delete: bool = False) -> bool:
        """Ask the experiment's driver to stop it (and with `delete`, to drop the record once finished):
        the owner carries it out in whatever state it is. Atomic, on an existing record only (never
        resurrects a deleted one); False when there is none. The driver is told at once (pub/sub);
        its periodic look is the fallback."""
        flags = ["cancel_requested", "1", *(["delete_requested", "1"] if delete else [])]
        done = bool(self._set_if_exists(keys=[exp_key(exp_id)], args=flags))
        if done:
            self.announce_cancel(exp_id)
        return done

    def announce_cancel(self, exp_id: str) -> None:
        """Tell the experiment's watcher now (pub/sub) that the cancel flag is set."""
        self.r.publish(cancel_channel(exp_id), "1")

    def cancel_requested(self, exp_id: str) -> bool:
        return self.flag_set(exp_id, "cancel_requested")

    def flag_set(self, exp_id: str, name: str) -> bool:
        """A "1"/"0" field of the record, e.g. cancel_requested or delete_requested."""
        return self.r.hget(exp_key(exp_id), name) == b"1"

    def set_once(self, exp_id: str, name: str, value: Any) -> bool:
        """Set a field of an existing record only if it is not set yet (HSETNX); True if this call set it."""
        key = exp_key(exp_id)
        if not self.r.exists(key):
            return False
        _, encoded = _encode({name: value})
        return bool(self.r.hsetnx(key, name, encoded))

    def server_time(self) -> float:
        sec, usec = self.r.time()
        return float(sec) + usec / 1e6

    # -- nodes and GPUs --------------------------------------------------------------------
    def heartbeat(self, node: str, info: Mapping[str, Any], ttl: float, *, with_drain: bool = False) -> bool:
        """List the node and write its record (kept NODE_RECORD_TTL: long after node_up says 0, so alerts
        can see how late), in one round trip; returns whether the node is drained, read in the same
        script (`with_drain` also writes it as the record's `draining`): a supervisor needs no drain poll."""
        fields = {**{k: json.dumps(v) for k, v in info.items()}, "last_seen": json.dumps(time.time())}
        args: list[Any] = [node, NODE_RECORD_TTL, "1" if with_drain else "0"]
        for k, v in fields.items():
            args += [k, v]
        return bool(self._heartbeat(keys=[NODES, node_key(node), drain_key(node)], args=args))

    def nodes(self) -> list[dict[str, Any]]:
        names = sorted(text(n) for n in self.r.smembers(NODES))
        pipe = self.r.pipeline(transaction=False)
        for n in names:
            pipe.hgetall(node_key(n))
            pipe.get(drain_key(n))
        replies = pipe.execute()
        return [_node_info(name, raw, drain)
                for name, raw, drain in zip(names, replies[0::2], replies[1::2], strict=True) if raw]

    def forget_node(self, node: str) -> None:
        """A node that left on purpose (clean shutdown): no longer listed, so never reported down."""
        pipe = self.r.pipeline(transaction=True)
        pipe.srem(NODES, node)
        pipe.delete(node_key(node))
        pipe.execute()

    def set_drain(self, node: str, drain: bool = True, *, by: str = "", reason: str = "",
                  sticky: bool = False) -> None:
        """Drain (or undrain) a node, remembering who and why. A `sticky` drain is an operator's: a
        worker that starts keeps it; any other is undone by the node's next worker (`undrain_on_start`)."""
        if drain:
            record = {"by": by, "reason": reason, "sticky": sticky, "at": time.time()}
            self.r.set(drain_key(node), json.dumps(record))
        else:
            self.r.delete(drain_key(node))

    def draining(self, node: str) -> bool:
        return bool(self.r.exists(drain_key(node)))

    def drain_info(self, node: str) -> dict[str, Any] | None:
        """{"by", "reason", "sticky", "at"} of the node's drain, or None when it takes work."""
        return _drain_record(self.r.get(drain_key(node)))

    def undrain_on_start(self, node: str) -> dict[str, Any] | None:
        """A starting worker undoes a non-sticky drain (e.g. its predecessor pod's preStop hook);
        compare-and-set: a drain written meanwhile stays. Returns the drain it undid, if any."""
        key = drain_key(node)
        with self.r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                raw = pipe.get(key)
                record = _drain_record(raw)
                if record is None or record["sticky"]:
                    pipe.unwatch()
                    return None
                pipe.multi()
                pipe.delete(key)
                pipe.execute()
            except redis.WatchError:
                return None
        return record

    def reserve_gpus(self, node: str, exp_id: str, count: int, total: int) -> list[int] | None:
        """Take `count` free GPU indices on `node` for `exp_id` (idempotent); None if too few are free."""
        got = self._reserve(keys=[gpu_key(node)], args=[exp_id, count, total])
        return None if got is None else [int(i) for i in got]

    def release_gpus(self, node: str, exp_id: str) -> list[int]:
        held = self.gpu_owners(node)
        mine = [i for i, owner in held.items() if owner == exp_id]
        if mine:
            self.r.hdel(gpu_key(node), *[str(i) for i in mine])
        return mine

    def reserve_swarm_port(self, node: str, exp_id: str, port: int) -> bool:
        """Take swarm `port` on `node` for `exp_id` (compare-and-set, idempotent): one swarm server
        per port per node; False while another experiment holds it."""
        key = swarm_port_key(node)
        if self.r.hsetnx(key, str(port), exp_id):
            return True
        return self.r.hget(key, str(port)) == exp_id.encode()

    def release_swarm_port(self, node: str, exp_id: str, port: int) -> bool:
        """Give the port back, only if `exp_id` still holds it."""
        return bool(self._release_if_owner(keys=[swarm_port_key(node)], args=[str(port), exp_id]))

    def swarm_port_owners(self, node: str) -> dict[int, str]:
        return {int(k): text(v) for k, v in self.r.hgetall(swarm_port_key(node)).items()}

    def gpu_owners(self, node: str) -> dict[int, str]:
        return {int(k): text(v) for k, v in self.r.hgetall(gpu_key(node)).items()}

    # -- counters for /metrics ---------------------------------------------------------------
    @property
    def redis_id(self) -> int:
        """Which Redis client this store reads (two stores over one client share a /metrics answer)."""
        return id(self.r)

    def snapshot(self, finished_ttl: float, now: float, cache: RowCache | None = None) -> Snapshot:
        """Everything one /metrics scrape reads (store/snapshot.py), in three pipelined round trips."""
        return read_snapshot(self, finished_ttl, now, cache)

    def stage_snapshot(self, limit: int, fields: tuple[str, ...]) -> list[tuple[str, list[list[Any]]]]:
        """The newest `limit` stages with `fields` of each member (raw replies: None when absent)."""
        return read_stages(self, limit, fields)

    def stats(self) -> dict[str, dict[str, float]]:
        pipe = self.r.pipeline(transaction=False)
        names = list(STATS_NAMES)
        for n in names:
            pipe.hgetall(stats_key(n))
        out = {n: {k.decode(): float(v) for k, v in raw.items()} for n, raw in zip(names, pipe.execute(),
                                                                                    strict=True)}
        for outcome in out["outcomes"]:
            raw = self.r.hgetall(duration_bucket_key(outcome))
            out[f"duration_bucket:{outcome}"] = {text(k): float(v) for k, v in raw.items()}
        return out
