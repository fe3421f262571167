"""A multi-node run's gang in Redis: the all-or-nothing GPU reservation over several nodes, what the
head asks of every rank (launch attempt N / stop / done), and what each rank reports back.

One hash per experiment, `ajet:gang:<id>`: `nodes` (JSON list, index = rank, 0 = head), `gpus`
(JSON node -> indices), `per_node`, `launch` (JSON: attempt, phase, command, MASTER_ADDR/PORT,
nnodes), and per rank r: `r<r>` (JSON state: attempt, state, session, log, handle, exit code),
`r<r>:owner` / `r<r>:lease` (the rank job holding it) and `r<r>:enq` (when a rank job was last
enqueued). Every write is a Lua script, so a gang is never half-reserved, and a rank is driven by
one job at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis

from service.store import PREFIX, gpu_key

RELEASED_TTL = 7 * 86400


def gang_key(exp_id: str) -> str:
    return f"{PREFIX}:gang:{exp_id}"


# KEYS[1] the gang hash; KEYS[2..] the GPU hashes of the head node, then of each candidate node
# ARGV[1] experiment id; ARGV[2] GPUs per node; ARGV[3] nodes wanted;
# ARGV[4..] for each KEYS[i+1]: node name, then its GPU total (0 = GPUs not managed there)
# All or nothing: the head plus nodes-1 candidates that each have per_node free GPUs, taken in one go,
# or nothing at all. Idempotent: an existing gang is returned as it is. Returns {nodes json, gpus json}.
_RESERVE_GANG = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {redis.call('HGET', KEYS[1], 'nodes'), redis.call('HGET', KEYS[1], 'gpus')}
end
local per_node = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local chosen = {}
for i = 2, #KEYS do
  local name = ARGV[2 + 2 * (i - 1)]
  local total = tonumber(ARGV[3 + 2 * (i - 1)])
  local free = {}
  for g = 0, total - 1 do
    if #free < per_node and not redis.call('HGET', KEYS[i], tostring(g)) then free[#free + 1] = g end
  end
  if total == 0 or #free >= per_node then  -- a node that manages no GPUs holds nothing but its place
    chosen[#chosen + 1] = {i, name, free}
  elseif i == 2 then
    return false
  end
  if #chosen == wanted then break end
end
if #chosen < wanted then return false end
local nodes = {}
local gpus = {}
for _, c in ipairs(chosen) do
  for _, g in ipairs(c[3]) do redis.call('HSET', KEYS[c[1]], tostring(g), ARGV[1]) end
  nodes[#nodes + 1] = c[2]
  gpus[c[2]] = c[3]
end
local nodes_json = cjson.encode(nodes)
local gpus_json = cjson.encode(gpus)
redis.call('HSET', KEYS[1], 'nodes', nodes_json, 'gpus', gpus_json, 'per_node', ARGV[2], 'id', ARGV[1])
return {nodes_json, gpus_json}
"""

# KEYS[1] the gang hash; KEYS[2..] the GPU hashes of its nodes; ARGV[1] experiment id
# Frees every GPU the experiment holds on those nodes at once; the gang record expires later.
_RELEASE_GANG = """
local freed = {}
for i = 2, #KEYS do
  local held = redis.call('HGETALL', KEYS[i])
  local mine = {}
  for j = 1, #held, 2 do
    if held[j + 1] == ARGV[1] then mine[#mine + 1] = held[j] end
  end
  if #mine > 0 then redis.call('HDEL', KEYS[i], unpack(mine)) end
  freed[#freed + 1] = cjson.encode(mine)
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'released', '1')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return freed
"""

# KEYS[1] the gang hash; ARGV[1] rank, ARGV[2] owner, ARGV[3] lease seconds
# Take (or keep) a rank: only when nobody else holds it with a live lease. 1 = ours now.
_CLAIM_RANK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local r = 'r' .. ARGV[1]
local owner = redis.call('HGET', KEYS[1], r .. ':owner')
local lease = tonumber(redis.call('HGET', KEYS[1], r .. ':lease') or '0') or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
if owner and owner ~= '' and owner ~= ARGV[2] and lease > now then return 0 end
redis.call('HSET', KEYS[1], r .. ':owner', ARGV[2], r .. ':lease', tostring(now + tonumber(ARGV[3])))
return 1
"""

# KEYS[1] the gang hash; ARGV[1] rank, ARGV[2] owner ('' = the head, which needs no claim), ARGV[3] state json
_SET_RANK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local r = 'r' .. ARGV[1]
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], r .. ':owner') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], r, ARGV[3])
return 1
"""

# KEYS[1] the gang hash; ARGV: field, value pairs. Written only while the gang exists (never recreated).
_SET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# KEYS[1] the gang hash; ARGV[1] phase. Changes the phase of the current launch, nothing else.
_SET_PHASE = """
local raw = redis.call('HGET', KEYS[1], 'launch')
if not raw then return 0 end
local launch = cjson.decode(raw)
launch['phase'] = ARGV[1]
redis.call('HSET', KEYS[1], 'launch', cjson.encode(launch))
return 1
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        data = {_text(k): _text(v) for k, v in raw.items()}
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
        self._reserve = client.register_script(_RESERVE_GANG)
        self._release = client.register_script(_RELEASE_GANG)
        self._claim = client.register_script(_CLAIM_RANK)
        self._set_rank = client.register_script(_SET_RANK)
        self._set_if_exists = client.register_script(_SET_IF_EXISTS)
        self._set_phase = client.register_script(_SET_PHASE)

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
        return self.get(exp_id)

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
        return {n: [int(g) for g in json.loads(_text(f))] for n, f in zip(gang.nodes, freed, strict=True)}

    def set_launch(self, exp_id: str, launch: dict[str, Any]) -> bool:
        return bool(self._set_if_exists(keys=[gang_key(exp_id)], args=["launch", json.dumps(launch)]))

    def set_phase(self, exp_id: str, phase: str) -> bool:
        return bool(self._set_phase(keys=[gang_key(exp_id)], args=[phase]))

    def claim_rank(self, exp_id: str, rank: int, owner: str, lease_seconds: float) -> bool:
        return bool(self._claim(keys=[gang_key(exp_id)], args=[rank, owner, lease_seconds]))

    def set_rank(self, exp_id: str, rank: int, owner: str, state: dict[str, Any]) -> bool:
        return bool(self._set_rank(keys=[gang_key(exp_id)], args=[rank, owner, json.dumps(state, default=str)]))

    def mark_enqueued(self, exp_id: str, rank: int, at: float) -> bool:
        return bool(self._set_if_exists(keys=[gang_key(exp_id)], args=[f"r{rank}:enq", repr(at)]))
