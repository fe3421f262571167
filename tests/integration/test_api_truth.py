"""Errors that tell the truth (the red-team findings): an out-of-range offset or stream id is the client's
mistake (422 naming the field), not "Redis is unreachable"; only a lost connection is 503; any other
Redis error is 500 with what Redis said; an Idempotency-Key repeated with another placement is 409.
Real redis-server, the real app."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.store.keys import INDEX
from ajet_runner.store.settings import Settings
from tests.integration.scenario import make

pytestmark = [pytest.mark.integration]

TOKEN = "t-truth-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))


@pytest.fixture()
def api(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_roots=f"{tmp_path}:{VENV}")
    with TestClient(create_app(settings)) as client:
        yield client


def _fields(resp: object) -> list[str]:
    return [p["field"] for p in resp.json()["problems"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("path", "params", "headers", "field"), [
    ("/v1/experiments", {"offset": "9223372036854775807"}, {}, "offset"),
    ("/v1/experiments", {"offset": "1000000001"}, {}, "offset"),
    ("/v1/experiments", {"limit": "9223372036854775807"}, {}, "limit"),
    ("/v1/experiments/{id}/events", {"after": "99999999999999999999-0"}, {}, "after"),
    ("/v1/experiments/{id}/events", {"after": "1-18446744073709551616"}, {}, "after"),
    ("/v1/experiments/{id}/events", {"after": "1" * 400}, {}, "after"),
    ("/v1/experiments/{id}/events", {}, {"Accept": "text/event-stream", "Last-Event-ID": "99999999999999999999"},
     "Last-Event-ID"),
    ("/v1/experiments/{id}/log", {"since": str(2**63)}, {}, "since"),
])
def test_out_of_range_numbers_are_422_naming_the_field(api: TestClient, tmp_path: Path, path: str, params: dict,
                                                        headers: dict, field: str) -> None:
    sc = make("demo", tmp_path)
    exp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text()}, headers=AUTH).json()
    resp = api.get(path.format(id=exp["id"]), params=params, headers={**AUTH, **headers})
    assert resp.status_code == 422, resp.text
    assert _fields(resp) == [field] and "unreachable" not in resp.text


def test_the_largest_valid_values_are_answered(api: TestClient, tmp_path: Path) -> None:
    sc = make("demo", tmp_path)
    exp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text()}, headers=AUTH).json()
    assert api.get("/v1/experiments", params={"offset": "1000000000"}, headers=AUTH).json()["items"] == []
    page = api.get(f"/v1/experiments/{exp['id']}/events", params={"after": f"{2**64 - 1}-{2**64 - 1}"},
                   headers=AUTH)
    assert page.status_code == 200 and page.json()["events"] == []


def test_only_a_lost_connection_is_503_other_redis_errors_are_500_with_the_reason(
        api: TestClient, redis_url: str) -> None:
    import redis

    redis.Redis.from_url(redis_url).set(INDEX, "not a sorted set")  # Redis will answer WRONGTYPE
    resp = api.get("/v1/experiments", headers=AUTH)
    assert resp.status_code == 500 and "WRONGTYPE" in resp.json()["detail"], resp.text
    assert "unreachable" not in resp.text
    with TestClient(create_app(Settings(redis_url="redis://127.0.0.1:1/0", token=TOKEN))) as down:
        resp = down.get("/v1/experiments", headers=AUTH)
    assert resp.status_code == 503 and resp.json()["detail"].startswith("Redis is unreachable: ConnectionError")


def test_an_idempotency_key_repeated_with_another_placement_is_409_naming_it(api: TestClient, tmp_path: Path) -> None:
    text = make("demo", tmp_path).blueprint.read_text()
    first = {"blueprint": text, "node": "nowhere", "wait_for_node": True}
    key = {**AUTH, "Idempotency-Key": "k-1"}
    made = api.post("/v1/experiments", json=first, headers=key)
    assert made.status_code == 201, made.text
    again = api.post("/v1/experiments", json={**first, "priority": "normal"}, headers=key)  # normal is the default
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"]
    for changed in ({"node": "other"}, {"nodes": ["nowhere", "b"]}, {"priority": "high"},
                    {"blueprint_path": "/x/bp.md"}):
        resp = api.post("/v1/experiments", json={**first, **changed}, headers=key)
        assert resp.status_code == 409, (changed, resp.text)
        assert _fields(resp) == ["Idempotency-Key"] and next(iter(changed)) in resp.json()["detail"]
    assert api.get("/v1/experiments", headers=AUTH).json()["total"] == 1
