"""A multi-node run's gang in Redis: the all-or-nothing GPU reservation over several nodes, what the
head asks of every rank (launch attempt N / stop / done), and what each rank reports back.

One hash per experiment (`keys.gang_key`): `nodes` (JSON list, index = rank, 0 = head), `gpus`
(JSON node -> indices), `per_node`, `launch` (JSON: id, attempt, phase, command, MASTER_ADDR/PORT,
nnodes), and per rank r: `r<r>` (JSON state: launch id, attempt, state, session, log, handle, exit
code), `r<r>:owner` / `r<r>:lease` (the rank job holding it) and `r<r>:enq` (when a rank job was last
enqueued). Every write is a Lua script (store/*.lua), so a gang is never half-reserved, and a rank is
driven by one job at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis

from ajet_runner.store.keys import GANGS, gang_key, gpu_key, node_ranks_key
from ajet_runner.store.records import text
from ajet_runner.store.scripts import lua

RELEASED_TTL = 7 * 86400


@dataclass
class Gang:
    """One gang as stored."""

    id: str
    nodes: list[str]
    gpus: dict[str, list[int]]
    per_node: int = 0
    launch: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)
    released: bool = False

    @classmethod
    def decode(cls, exp_id: str, raw: dict[Any, Any]) -> Gang:
        data = {text(k): text(v) for k, v in raw.items()}
        return cls(id=exp_id, nodes=list(json.loads(data.get("nodes") or "[]")),
                   gpus={k: [int(g) for g in v] for k, v in json.loads(data.get("gpus") or "{}").items()},
                   per_node=int(data.get("per_node") or 0), launch=json.loads(data.get("launch") or "{}"),
                   raw=data, released=data.get("released") == "1")

    def rank_state(self, rank: int) -> dict[str, Any]:
        raw = self.raw.get(f"r{rank}")
        return json.loads(raw) if raw else {}

    def rank_lease(self, rank: int) -> float:
        return float(self.raw.get(f"r{rank}:lease") or 0)

    def rank_owner(self, rank: int) -> str:
        return self.raw.get(f"r{rank}:owner") or ""

    def rank_enqueued_at(self, rank: int) -> float:
        return float(self.raw.get(f"r{rank}:enq") or 0)


class GangStore:
    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._reserve = client.register_script(lua("reserve_gang"))
        self._release = client.register_script(lua("release_gang"))
        self._claim = client.register_script(lua("claim_rank"))
        self._hand_back = client.register_script(lua("hand_back_rank"))
        self._set_rank = client.register_script(lua("set_rank"))
        self._set_if_exists = client.register_script(lua("hset_if_exists"))
        self._set_phase = client.register_script(lua("set_launch_phase"))
        self._replace = client.register_script(lua("replace_gang_members"))

    def reserve(self, exp_id: str, head: tuple[str, int], candidates: list[tuple[str, int]], nodes: int,
                per_node: int) -> Gang | None:
        """`per_node` GPUs on the head and on nodes-1 of the candidates, atomically; None (nothing held) when
        they do not fit now. Idempotent: an experiment's existing gang is returned unchanged."""
        members = [head, *[c for c in candidates if c[0] != head[0]]]
        args: list[Any] = [exp_id, per_node, nodes]
        for name, total in members:
            args += [name, total]
        got = self._reserve(keys=[gang_key(exp_id), *[gpu_key(name) for name, _ in members]], args=args)
        if not got:
            return None
        self.r.sadd(GANGS, exp_id)  # listed for member nodes' re-adoption (again on an idempotent retry)
        return self.get(exp_id)

    def ids(self) -> list[str]:
        """Every listed gang (a multi-node run between its reservation and its release)."""
        return sorted(i.decode() if isinstance(i, bytes) else str(i) for i in self.r.smembers(GANGS))

    def forget(self, exp_id: str) -> None:
        self.r.srem(GANGS, exp_id)

    def get(self, exp_id: str) -> Gang | None:
        raw = self.r.hgetall(gang_key(exp_id))
        return Gang.decode(exp_id, raw) if raw else None

    def release(self, exp_id: str) -> dict[str, list[int]]:
        """Every GPU of the gang, on every node, at once; returns what was freed per node."""
        gang = self.get(exp_id)
        if gang is None:
            return {}
        freed = self._release(keys=[gang_key(exp_id), *[gpu_key(n) for n in gang.nodes]],
                              args=[exp_id, RELEASED_TTL])
        self.forget(exp_id)
        return {n: [int(g) for g in json.loads(text(f))] for n, f in zip(gang.nodes, freed, strict=True)}

    def set_launch(self, exp_id: str, launch: dict[str, Any]) -> bool:
        return bool(self._set_if_exists(keys=[gang_key(exp_id)], args=["launch", json.dumps(launch)]))

    def set_phase(self, exp_id: str, phase: str) -> bool:
        return bool(self._set_phase(keys=[gang_key(exp_id)], args=[phase]))

    def claim_rank(self, exp_id: str, rank: int, owner: str, lease_seconds: float, node: str) -> bool:
        """Hold rank `rank` (placed on `node`) for the rank job `owner`; False while another job holds it,
        or when the rank is no longer on that node."""
        return bool(self._claim(keys=[gang_key(exp_id)], args=[rank, owner, lease_seconds, node]))

    def replace_members(self, exp_id: str, lost: list[str], candidates: list[tuple[str, int]]) -> Gang | None:
        """Move the ranks of the `lost` nodes to other candidates, all or nothing: their GPUs there are freed,
        `per_node` GPUs taken on each replacement, the ranks' states reset. None when they do not fit now."""
        gang = self.get(exp_id)
        if gang is None:
            return None
        fresh = [c for c in candidates if c[0] not in gang.nodes]
        args: list[Any] = [exp_id, len(lost), *lost]
        for name, total in fresh:
            args += [name, total]
        keys = [gang_key(exp_id), *[gpu_key(n) for n in lost], *[gpu_key(n) for n, _ in fresh]]
        if not self._replace(keys=keys, args=args):
            return None
        return self.get(exp_id)

    def hand_back_rank(self, exp_id: str, rank: int, owner: str) -> bool:
        """End `owner`'s hold on the rank now, for a new rank job to take it at the next scan."""
        return bool(self._hand_back(keys=[gang_key(exp_id)], args=[rank, owner]))

    def set_rank(self, exp_id: str, rank: int, owner: str, state: dict[str, Any]) -> bool:
        return bool(self._set_rank(keys=[gang_key(exp_id)], args=[rank, owner, json.dumps(state, default=str)]))

    def mark_enqueued(self, exp_id: str, rank: int, at: float) -> bool:
        return bool(self._set_if_exists(keys=[gang_key(exp_id)], args=[f"r{rank}:enq", repr(at)]))

    # -- what ran where (for the sweep of a node whose rank moved away while it was gone) ---------
    def note_rank_here(self, node: str, exp_id: str, rank: int) -> None:
        self.r.sadd(node_ranks_key(node), f"{exp_id}:{rank}")

    def forget_rank_here(self, node: str, exp_id: str, rank: int) -> None:
        self.r.srem(node_ranks_key(node), f"{exp_id}:{rank}")

    def ranks_here(self, node: str) -> list[tuple[str, int]]:
        out = []
        for raw in self.r.smembers(node_ranks_key(node)):
            exp_id, _, rank = text(raw).rpartition(":")
            if exp_id and rank.isdigit():
                out.append((exp_id, int(rank)))
        return sorted(out)
