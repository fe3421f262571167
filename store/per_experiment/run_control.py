"""Who drives a run and what it is asked: the owner's lease on the record (`owner`, `lease_until`) and the
stop requests (`cancel_requested`, `delete_requested`, announced on keys.cancel_channel).

The driver polls both in one round trip (`poll_run`, store/poll_run.lua); every write is a compare-and-set
script on the record, so a lease is only renewed or handed back by its owner and a stop request never
resurrects a deleted record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from ajet_runner.store.keys import cancel_channel, exp_key
from ajet_runner.store.scripts import lua

__all__ = ["RunControl"]


class RunControl:
    """The owner's lease on an experiment and the requests to stop it."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._renew = client.register_script(lua("renew_lease"))
        self._hand_back = client.register_script(lua("hand_back"))
        self._set_if_exists = client.register_script(lua("hset_if_exists"))
        self._poll_run = client.register_script(lua("poll_run"))

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

    def poll_runs(self, asks: Sequence[tuple[str, str, float]], client: Any = None) -> list[tuple[bool, bool]]:
        """`poll_run` for each (experiment, owner, renew seconds), all in one round trip (a pipeline). With
        `client` (a pipeline) the calls are only queued there: its execute() gives their answers, in order."""
        pipe = client if client is not None else self.r.pipeline(transaction=False)
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
        return self.r.hget(exp_key(exp_id), "cancel_requested") == b"1"
