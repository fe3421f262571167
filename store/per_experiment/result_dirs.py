"""Result dir claims (keys.RESULT_DIRS): one live experiment per result dir.

A record's claim is written with the record itself (`Records.create`, store/claim_result_dir.lua) and
released when it finishes (store/transition.lua) or is deleted; here are the claims without a record (a
hold while a refusal report is written), their release, and what a submission checks before it claims.
"""

from __future__ import annotations

from typing import Any

import redis

from ajet_runner.statemachine.lifecycle import FINISHED
from ajet_runner.store.cluster.nodes import node_info
from ajet_runner.store.keys import INDEX, NODES, RESULT_DIRS, drain_key, exp_key, node_key
from ajet_runner.store.per_experiment.record_store import ResultDirTaken
from ajet_runner.store.records import text
from ajet_runner.store.scripts import lua

__all__ = ["HOLD_SECONDS", "ResultDirs"]

HOLD_SECONDS = 60.0  # a claim without a record (while a refusal report is written) lapses after this


class ResultDirs:
    """The claims on result dirs, by real path."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._claim = client.register_script(lua("claim_result_dir"))
        self._release_if_owner = client.register_script(lua("hdel_if_owner"))
        self._submit_view = client.register_script(lua("submit_view"))

    def hold(self, result_dir_key: str, holder: str, seconds: float = HOLD_SECONDS) -> None:
        """Claim a result dir for `seconds` without a record (while a refusal report is written there);
        raises ResultDirTaken when a live experiment holds it. Give it back with `release`."""
        got = self._claim(keys=[RESULT_DIRS, exp_key(holder), INDEX],
                          args=[result_dir_key, holder, exp_key(""), max(0.001, float(seconds)), 0])
        if not int(got[0]):
            _, other, state, held = (text(x) for x in got)
            raise ResultDirTaken(result_dir_key, other, state, held)

    def release(self, result_dir_key: str, holder: str) -> bool:
        """Give a claim back, only while `holder` holds it (a hold, or a record's claim)."""
        raw = self.r.hget(RESULT_DIRS, result_dir_key)
        if raw is None:
            return False
        value = text(raw)
        if value.split(" ", 1)[0] != holder:
            return False
        return bool(self._release_if_owner(keys=[RESULT_DIRS], args=[result_dir_key, value]))

    def submission_view(self, result_dir_key: str) -> tuple[tuple[str, str] | None, list[dict[str, Any]]]:
        """What a submission checks, in one round trip: (id, state) of the unfinished experiment last
        submitted to this result dir (a real path), if any, and every node (as `Nodes.all`)."""
        flat = self._submit_view(keys=[NODES, RESULT_DIRS], args=[
            result_dir_key, node_key(""), drain_key("").removeprefix(node_key("")), exp_key("")])
        holder, state = flat[0], flat[1]
        rows = sorted((text(flat[k]), flat[k + 1], flat[k + 2]) for k in range(2, len(flat), 3))
        nodes = [node_info(name, dict(zip(raw[0::2], raw[1::2], strict=True)), drain)
                 for name, raw, drain in rows if raw]
        if holder is None or state is None or state == FINISHED.encode():
            return None, nodes
        return (text(holder), text(state)), nodes
