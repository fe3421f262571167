"""The nodes: their heartbeats (keys.NODES, keys.node_key), drains (keys.drain_key), and the slots each
hands out, GPU indices (keys.gpu_key) and swarm ports (keys.swarm_port_key)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import redis

from ajet_runner.store.keys import NODES, drain_key, gpu_key, node_key, swarm_port_key
from ajet_runner.store.records import text
from ajet_runner.store.scripts import lua

__all__ = ["NODE_RECORD_TTL", "Nodes", "Slots", "drain_record", "node_info"]

NODE_RECORD_TTL = 3600


def drain_record(raw: bytes | str | None) -> dict[str, Any] | None:
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


def node_info(name: str, raw: Mapping[bytes, bytes], drain: bytes | None) -> dict[str, Any]:
    """A node's heartbeat hash (JSON values), named, with its drain record."""
    info = {k.decode(): json.loads(v) for k, v in raw.items()}
    info["name"] = name
    info["drain"] = drain_record(drain)
    return info


class Nodes:
    """The listed nodes, their heartbeat records and their drains."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._heartbeat = client.register_script(lua("heartbeat"))

    def heartbeat(self, node: str, info: Mapping[str, Any], ttl: float, *, with_drain: bool = False) -> bool:
        """List the node and write its record (kept NODE_RECORD_TTL: long after node_up says 0, so alerts
        can see how late), in one round trip; returns whether the node is drained, read in the same
        script (`with_drain` also writes it as the record's `draining`): a supervisor needs no drain poll."""
        fields = {**{k: json.dumps(v) for k, v in info.items()}, "last_seen": json.dumps(time.time())}
        args: list[Any] = [node, NODE_RECORD_TTL, "1" if with_drain else "0"]
        for k, v in fields.items():
            args += [k, v]
        return bool(self._heartbeat(keys=[NODES, node_key(node), drain_key(node)], args=args))

    def all(self) -> list[dict[str, Any]]:
        """Every listed node's record (with its drain), by name."""
        names = sorted(text(n) for n in self.r.smembers(NODES))
        pipe = self.r.pipeline(transaction=False)
        for n in names:
            pipe.hgetall(node_key(n))
            pipe.get(drain_key(n))
        replies = pipe.execute()
        return [node_info(name, raw, drain)
                for name, raw, drain in zip(names, replies[0::2], replies[1::2], strict=True) if raw]

    def forget(self, node: str) -> None:
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
        return drain_record(self.r.get(drain_key(node)))

    def undrain_on_start(self, node: str) -> dict[str, Any] | None:
        """A starting worker undoes a non-sticky drain (e.g. its predecessor pod's preStop hook);
        compare-and-set: a drain written meanwhile stays. Returns the drain it undid, if any."""
        key = drain_key(node)
        with self.r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                raw = pipe.get(key)
                record = drain_record(raw)
                if record is None or record["sticky"]:
                    pipe.unwatch()
                    return None
                pipe.multi()
                pipe.delete(key)
                pipe.execute()
            except redis.WatchError:
                return None
        return record


class Slots:
    """What a node hands out to its experiments: GPU indices and swarm ports, each held by one experiment."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._reserve = client.register_script(lua("reserve_gpus"))
        self._release_if_owner = client.register_script(lua("hdel_if_owner"))

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

    def gpu_owners(self, node: str) -> dict[int, str]:
        return {int(k): text(v) for k, v in self.r.hgetall(gpu_key(node)).items()}

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
