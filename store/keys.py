"""Every Redis key name the project writes (RQ's own `rq:*` keys aside), in one place.

The Lua scripts take each key they touch as KEYS from these functions; none spells a key itself.
"""

from __future__ import annotations

import hashlib

PREFIX = "ajet"
GLOBAL_STREAM = f"{PREFIX}:events"  # every event of every experiment
INDEX = f"{PREFIX}:experiments"  # zset id -> created_at
NODES = f"{PREFIX}:nodes"  # set of node names
UNFINISHED = f"{PREFIX}:unfinished"  # set of ids not yet finished, kept by the transition script
RESULT_DIRS = f"{PREFIX}:result_dirs"  # hash: real path of a result dir -> the last experiment submitted to it

# Counters behind /metrics, kept by the transition script (hashes: label -> count).
STATS_NAMES = ("transitions", "outcomes", "repairs", "advised", "duration_sum", "result_write_failures")


def exp_key(exp_id: str) -> str:
    """The experiment's record (a hash)."""
    return f"{PREFIX}:exp:{exp_id}"


def stream_key(exp_id: str) -> str:
    """The experiment's own event stream."""
    return f"{PREFIX}:exp:{exp_id}:events"


def state_index_key(state: str) -> str:
    """Experiments in one lifecycle state (zset id -> created_at), kept by the transition script."""
    return f"{PREFIX}:state:{state}"


def outcome_index_key(outcome: str) -> str:
    """Finished experiments with one outcome (zset id -> created_at), kept by the transition script."""
    return f"{PREFIX}:outcome:{outcome}"


EXPIRING = f"{PREFIX}:expiring"  # zset id -> when its finished record expires (the indexes' clean-up reads it)
EXPIRING_WHERE = f"{PREFIX}:expiring:where"  # hash id -> "<node>\n<stage>": the index keys it leaves then
PURPOSES = f"{PREFIX}:purposes"  # hash id -> its purpose lower-cased: what a search reads (one HMGET a window)
INDEX_TMP = f"{PREFIX}:tmp:filter"  # scratch zset of a combined filter, written and deleted in one script


def node_active_key(node: str) -> str:
    """A node's launched, unfinished experiments (a set, kept by the transition script): what its
    supervisor scans, without reading the rest of the cluster."""
    return f"{PREFIX}:node:{node}:active"


def node_index_key(node: str) -> str:
    """Every experiment on (or submitted to) a node (zset id -> created_at): `?node=` lists."""
    return f"{PREFIX}:node:{node}:experiments"


def node_state_key(node: str, state: str) -> str:
    """A node's experiments (as node_index_key) in one state: `?node=&state=` reads only this zset."""
    return f"{PREFIX}:node:{node}:state:{state}"


def node_outcome_key(node: str, outcome: str) -> str:
    """A node's finished experiments with one outcome: `?node=&outcome=` reads only this zset."""
    return f"{PREFIX}:node:{node}:outcome:{outcome}"


def log_tail_key(exp_id: str) -> str:
    """The experiment's last log lines (a capped list, appended by its watcher)."""
    return f"{PREFIX}:exp:{exp_id}:tail"


def cancel_channel(exp_id: str) -> str:
    """Pub/sub channel on which a stop request is announced to the experiment's watcher."""
    return f"{PREFIX}:exp:{exp_id}:cancel"


def published_key(exp_id: str) -> str:
    """Per writer, the sequence number of the last event it published (a hash; see publish_once.lua)."""
    return f"{PREFIX}:exp:{exp_id}:published"


def node_key(node: str) -> str:
    """A node's heartbeat record (a hash with a TTL)."""
    return f"{PREFIX}:node:{node}"


def drain_key(node: str) -> str:
    """A node's drain (JSON string; absent = takes work)."""
    return f"{node_key(node)}:drain"


def gpu_key(node: str) -> str:
    """GPU index -> experiment id holding it, on one node (a hash)."""
    return f"{PREFIX}:node:{node}:gpus"


GANGS = f"{PREFIX}:gangs"  # ids of multi-node runs that hold a gang (store/cluster/gangs.py keeps it)


def gang_key(exp_id: str) -> str:
    """A multi-node run's gang: its nodes, GPUs, launch and per-rank state (a hash; see store/cluster/gangs.py)."""
    return f"{PREFIX}:gang:{exp_id}"


def node_ranks_key(node: str) -> str:
    """The multi-node ranks started on a node ("<exp id>:<rank>"; a set): what its supervisor sweeps."""
    return f"{PREFIX}:node:{node}:ranks"


def swarm_port_key(node: str) -> str:
    """Swarm server port -> experiment id holding it, on one node (a hash)."""
    return f"{PREFIX}:swarm_ports:{node}"


def stats_key(name: str) -> str:
    """One counter hash of STATS_NAMES."""
    return f"{PREFIX}:stats:{name}"


def duration_bucket_key(outcome: str) -> str:
    """Histogram buckets of run durations for one outcome (bucket bound -> count)."""
    return f"{PREFIX}:stats:duration_bucket:{outcome}"


def idempotency_key(key: str) -> str:
    """A remembered POST for one Idempotency-Key (hashed: the client's key is arbitrary text)."""
    return f"{PREFIX}:idempotency:{hashlib.sha256(key.encode()).hexdigest()}"


def ui_session_revoked_key(nonce: str) -> str:
    """A console session logged out before its cookie expired (a string with a TTL: the cookie's rest)."""
    return f"{PREFIX}:ui:revoked:{nonce}"


def watch_metrics_key(node: str) -> str:
    """A node's watch-loop counters, published for its /metrics."""
    return f"{PREFIX}:wm:{node}:watch"


def watch_exps_key(node: str) -> str:
    """The experiments a node's watch loops report on."""
    return f"{PREFIX}:wm:{node}:exps"


def watch_exp_key(node: str, exp_id: str) -> str:
    """One experiment's watch-loop numbers on one node."""
    return f"{PREFIX}:wm:{node}:exp:{exp_id}"


STAGES = f"{PREFIX}:stages"  # zset stage name -> when it was first used


def stage_key(name: str) -> str:
    """A stage's experiments (zset id -> created_at), written with each record (store/stage_member.lua)."""
    return f"{PREFIX}:stage:{name}"


def stage_meta_key(name: str) -> str:
    """A stage's settings and bookkeeping (a hash: dir, webhook_url, created_at, reported_members, ...)."""
    return f"{PREFIX}:stagemeta:{name}"


OUTBOX = f"{PREFIX}:outbox"  # zset task id -> when it is due (store/cluster/outbox.py)
OUTBOX_TASKS = f"{PREFIX}:outbox:tasks"  # hash task id -> the task's JSON
OUTBOX_DEAD = f"{PREFIX}:outbox:dead"  # list of tasks given up on (JSON, newest first, capped)


def lease_key(name: str) -> str:
    """A cluster-wide lease: the id of the one process doing a once-per-cluster job (store/lease.py)."""
    return f"{PREFIX}:lease:{name}"
