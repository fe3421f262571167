"""The Python client against a real `serve`: typed answers, idempotent submission, wait, async tailing,
and the bounded reconnect."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ajet_runner.service.client.answers import Event, Experiment, Node
from ajet_runner.service.client.api_client import (
    AjetRunnerClient,
    ApiError,
    ApiUnavailable,
    AsyncAjetRunnerClient,
    Reconnect,
)
from ajet_runner.store.store import Store
from tests.integration.scenario import make
from tests.integration.test_api import free_port, running_server

pytestmark = [pytest.mark.integration]


def test_idempotency_key_names_one_experiment(redis_url, tmp_path) -> None:
    demo = make("demo", tmp_path)
    text = demo.blueprint.read_text()
    with running_server(redis_url, tmp_path / "serve.log") as server:
        results: list[Experiment | BaseException] = []

        def submit_once() -> None:
            with server.client() as api:
                try:
                    results.append(api.submit(text, node="nowhere", wait_for_node=True, idempotency_key="bp-1"))
                except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                    results.append(exc)

        threads = [threading.Thread(target=submit_once) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(isinstance(r, Experiment) for r in results), results
        ids = {r.id for r in results if isinstance(r, Experiment)}
        assert len(ids) == 1 and len(results) == 6
        with server.client() as api:
            assert api.list_experiments().total == 1
            again = api.submit(text, node="nowhere", wait_for_node=True, idempotency_key="bp-1")
            assert again.id in ids
            # The same key with another placement is another request: 409 naming what differs, never the
            # first record (its client would believe the different request was done).
            for changed in ({"node": "elsewhere"}, {"priority": "high"}, {"blueprint_path": str(demo.blueprint)}):
                with pytest.raises(ApiError) as info:
                    api.submit(text, **{"node": "nowhere", "wait_for_node": True, **changed},  # type: ignore[arg-type]
                               idempotency_key="bp-1")
                assert info.value.status == 409 and next(iter(changed)) in info.value.problems[0]["message"]
            with pytest.raises(ApiError) as info:
                api.submit(text + "\nanother note\n", node="nowhere", wait_for_node=True, idempotency_key="bp-1")
            assert info.value.status == 409 and info.value.problems[0]["field"] == "Idempotency-Key"

            # A refused submission does not use the key up: the corrected retry gets through.
            with pytest.raises(ApiError) as info:
                api.submit("## [exp_purpose]\nnothing else\n", idempotency_key="bp-2")
            assert info.value.status == 422
            other = text.replace(str(demo.results), f"{demo.results}-2")  # a live run's result dir is its own
            fixed = api.submit(other, node="nowhere", wait_for_node=True, idempotency_key="bp-2")
            assert fixed.id not in ids
            assert api.submit(other, node="nowhere", wait_for_node=True, idempotency_key="bp-2").id == fixed.id
            assert api.list_experiments().total == 2
            with pytest.raises(ApiError) as info:
                api.submit(text, idempotency_key="has spaces")
            assert info.value.status == 422


def test_typed_models_wait_and_async_tailing(redis_url, tmp_path) -> None:
    demo = make("demo", tmp_path)
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as api:
        exp = api.submit_file(demo.blueprint, node="nowhere", wait_for_node=True)
        assert isinstance(exp, Experiment) and exp.state == "queued" and exp["state"] == "queued"
        assert exp.get("no-such-field", 7) == 7 and "purpose" in exp and not exp.finished
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            api.wait(exp.id, 0.5, interval=0.1)
        assert time.monotonic() - start < 5

        async def tail() -> list[Event]:
            async with AsyncAjetRunnerClient(server.url, server.token) as aapi:
                got = []
                async for event in aapi.follow(exp.id):
                    got.append(event)
                    if event.type == "submitted":
                        await aapi.stop(exp.id)  # queued: finished as cancelled at once, so the stream ends
                final = await aapi.wait(exp.id, 10)
                assert final.outcome == "cancelled"
                return got

        events = asyncio.run(asyncio.wait_for(tail(), 60))
        assert isinstance(events[0], Event) and events[0].type == "submitted" and events[0].event_id
        assert events[-1].type == "transition" and events[-1]["to"] == "finished"
        final = api.wait(exp.id, 5)
        assert final.outcome == "cancelled" and final.finished and not final.succeeded
        # Resuming after the last event gives nothing more: Last-Event-ID is honoured.
        assert list(api.follow(exp.id, last_event_id=events[-1].event_id)) == []
        assert [e.event_id for e in api.follow(exp.id, last_event_id=events[0].event_id)] == [
            e.event_id for e in events[1:]]

        store = Store.from_url(redis_url)
        store.r.hset("ajet:node:n1", mapping={"gpus": "2", "slots": "2", "last_seen": str(time.time())})
        store.r.sadd("ajet:nodes", "n1")
        nodes = api.nodes()
        assert nodes and all(isinstance(n, Node) for n in nodes)
        assert Node.model_validate({"name": "x", "drain_reason": "upgrade"}).to_dict()["drain_reason"] == "upgrade"


def test_follow_gives_up_after_the_reconnect_limit() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with AjetRunnerClient(url, "t") as api:
        start = time.monotonic()
        with pytest.raises(ApiUnavailable) as info:
            list(api.follow("abc", reconnect_limit=1.5))
        took = time.monotonic() - start
    assert 1.4 <= took < 5 and "limit 1.5s" in info.value.detail

    backoff = Reconnect(url, limit=1.0, initial=0.1, cap=0.4)
    delays = []
    with pytest.raises(ApiUnavailable):
        while True:
            delays.append(backoff.pause(ApiUnavailable(url, "down")))
            time.sleep(delays[-1])
    assert delays[:3] == [0.1, 0.2, 0.4] and max(delays) <= 0.4 and sum(delays) <= 1.0 + 1e-6
