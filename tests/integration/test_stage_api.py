"""/v1/stages and the stage field on a real redis-server and the real app: a sweep becomes one experiment per
combination in one stage; a stage that cannot run is refused whole; counts, listing, `stage add`, the
comparison; the Python clients' `wait_stage`."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.service.client.api_client import AjetRunnerClient, AsyncAjetRunnerClient
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import make
from tests.integration.test_api import running_server

pytestmark = [pytest.mark.integration]

TOKEN = "t-stages-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
SWEEP = "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n- ajet.rollout.temperature: 0.7, 1.0\n"


@pytest.fixture()
def api(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_roots=f"{tmp_path}:{VENV}")
    with TestClient(create_app(settings)) as client:
        yield client


def _sweep_blueprint(tmp_path: Path, name: str = "sw") -> tuple[Path, str]:
    sc = make("demo", tmp_path / name)
    return sc.results, sc.blueprint.read_text() + SWEEP


def test_a_sweep_is_one_stage_of_four_experiments(api: TestClient, tmp_path: Path, redis_url: str) -> None:
    results, text = _sweep_blueprint(tmp_path)
    resp = api.post("/v1/stages", json={"stage": "temps", "blueprints": [{"blueprint": text}]}, headers=AUTH)
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["stage_dir"] == str(results) and body["refused"] == []
    exps = body["experiments"]
    assert [e["result_dir"] for e in exps] == [str(results / d) for d in (
        "ajet_sim.seed=1,ajet.rollout.temperature=0.7", "ajet_sim.seed=1,ajet.rollout.temperature=1.0",
        "ajet_sim.seed=2,ajet.rollout.temperature=0.7", "ajet_sim.seed=2,ajet.rollout.temperature=1.0")]
    assert exps[1]["purpose"].startswith("[ajet_sim.seed=1, ajet.rollout.temperature=1.0] ")
    assert all(e["stage"] == "temps" and e["state"] == "queued" for e in exps)
    stored = Store.from_url(redis_url).records.raw(exps[3]["id"])
    assert stored["blueprint_json"]["exp_sweep_values"] == {"ajet_sim.seed": 2, "ajet.rollout.temperature": 1.0}

    listed = api.get("/v1/stages", headers=AUTH).json()
    assert [(s["name"], s["total"], s["states"], s["finished"]) for s in listed] == [("temps", 4, {"queued": 4},
                                                                                     False)]
    one = api.get("/v1/stages/temps", headers=AUTH).json()
    assert [e["id"] for e in one["experiments"]] == [e["id"] for e in exps] and one["dir"] == str(results)
    page = api.get("/v1/experiments", params={"stage": "temps", "limit": 2}, headers=AUTH).json()
    assert page["total"] == 4 and [e["id"] for e in page["items"]] == [exps[3]["id"], exps[2]["id"]]
    assert api.get("/v1/experiments", params={"stage": "temps", "state": "running"}, headers=AUTH).json()["total"] == 0
    comparison = api.get("/v1/stages/temps/comparison", headers=AUTH).json()
    assert [r["state"] for r in comparison["rows"]] == ["queued"] * 4 and comparison["not_succeeded"] == [
        e["id"] for e in exps]
    assert comparison["compared_keys"] == ["ajet.rollout.temperature"] and comparison["seed_keys"] == ["ajet_sim.seed"]
    facts = api.get("/v1/stages/temps/facts", headers=AUTH).json()
    assert [f["source"] for f in facts] == ["record"] * 4


@pytest.mark.parametrize(("sweep", "field", "message"), [
    ("\n## [exp_sweep]\n- ajet_sim.seed: 1, 1\n", "exp_sweep", "repeats a value"),
    ("", "exp_result_dir", "is also the result dir of"),
])
def test_a_stage_that_cannot_run_is_refused_whole(api: TestClient, tmp_path: Path, redis_url: str, sweep: str,
                                                  field: str, message: str) -> None:
    sc = make("demo", tmp_path / "one")
    text = sc.blueprint.read_text() + sweep
    blueprints = [{"blueprint": text, "blueprint_path": "/bp/one.md"}]
    if not sweep:
        blueprints.append({"blueprint": text, "blueprint_path": "/bp/two.md"})  # the same result dir twice
    resp = api.post("/v1/stages", json={"stage": "bad", "blueprints": blueprints}, headers=AUTH)
    assert resp.status_code == 422, resp.text
    problems = resp.json()["problems"]
    assert any(p["field"].endswith(field) and p["field"].startswith("/bp/") and message in p["message"]
               for p in problems), problems
    store = Store.from_url(redis_url)
    assert store.indexes.count() == 0 and api.get("/v1/stages/bad", headers=AUTH).status_code == 404


def test_an_experiment_refused_on_placement_is_listed_while_the_others_run(api: TestClient, tmp_path: Path) -> None:
    busy, text = _sweep_blueprint(tmp_path)
    holder = make("demo", tmp_path / "holder")
    holder_text = holder.blueprint.read_text().replace(str(holder.results),
                                                        str(busy / "ajet_sim.seed=2,ajet.rollout.temperature=1.0"))
    assert api.post("/v1/experiments", json={"blueprint": holder_text}, headers=AUTH).status_code == 201
    resp = api.post("/v1/stages", json={"stage": "part", "blueprints": [{"blueprint": text}]}, headers=AUTH)
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert len(body["experiments"]) == 3 and len(body["refused"]) == 1
    refused = body["refused"][0]
    assert refused["status"] == 409 and "ajet_sim.seed=2, ajet.rollout.temperature=1.0" in refused["label"]
    assert "is taken" in refused["problems"][0]["message"]


def test_the_stage_field_tags_one_experiment_and_a_sweep_must_be_a_stage(api: TestClient, tmp_path: Path) -> None:
    sc = make("demo", tmp_path / "single")
    resp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text(), "stage": "solo"}, headers=AUTH)
    assert resp.status_code == 201 and resp.json()["stage"] == "solo"
    assert api.get("/v1/stages/solo", headers=AUTH).json()["total"] == 1
    _, text = _sweep_blueprint(tmp_path)
    swept = api.post("/v1/experiments", json={"blueprint": text}, headers=AUTH)
    assert swept.status_code == 422 and any(p["field"] == "exp_sweep" and "submit it as a stage" in p["message"]
                                            for p in swept.json()["problems"])
    bad = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text(), "stage": "a b"}, headers=AUTH)
    assert bad.status_code == 422 and "stage" in bad.text


def test_stage_add_by_id_and_by_result_dir(api: TestClient, tmp_path: Path) -> None:
    ids, dirs = [], []
    for name in ("a", "b"):
        sc = make("demo", tmp_path / name)
        ids.append(api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text()}, headers=AUTH).json()["id"])
        dirs.append(str(sc.results))
    resp = api.post("/v1/stages/later/experiments", json={"ids": [ids[0]], "result_dirs": [dirs[1]]}, headers=AUTH)
    assert resp.status_code == 200, resp.text
    assert [e["id"] for e in resp.json()["experiments"]] == ids
    missing = api.post("/v1/stages/later2/experiments", json={"ids": ["nope"], "result_dirs": [str(tmp_path)]},
                       headers=AUTH)
    assert missing.status_code == 422
    assert [p["field"] for p in missing.json()["problems"]] == ["result_dirs", "ids"]
    assert api.get("/v1/stages/later2", headers=AUTH).status_code == 404
    assert api.post("/v1/stages/bad%20name/experiments", json={"ids": ids}, headers=AUTH).status_code == 422
    for path in ("/v1/stages/none", "/v1/stages/none/facts", "/v1/stages/none/comparison"):
        assert api.get(path, headers=AUTH).status_code == 404


def test_wait_stage_in_both_clients(redis_url: str, tmp_path: Path) -> None:
    from ajet_runner.statemachine.lifecycle import Lifecycle
    from ajet_runner.store.cluster.stages import define_stage

    store = Store.from_url(redis_url)
    define_stage(store, "w")
    for exp_id, state in (("done1", "finished"), ("done2", "finished"), ("open", "queued")):
        rec = store.records.create(exp_id, {"state": "queued", "lifecycle": Lifecycle.initial_dict(exp_id),
                                            "stage": "w" if exp_id != "open" else "other"}, {"message": "x"})
        if state == "finished":
            store.records.transition(exp_id, expected_version=int(rec["version"]), event={"type": "transition"},
                                     fields={"state": "finished",
                                             "outcome": "completed" if exp_id == "done1" else "failed"})
    with running_server(redis_url, tmp_path / "serve.log", token=TOKEN) as server:
        seen: list[int] = []
        with AjetRunnerClient(server.url, TOKEN) as client:
            recs = client.wait_stage("w", interval=0.1, on_update=lambda r: seen.append(len(r)))
            assert [r.outcome for r in recs] == ["completed", "failed"] and seen == [2]
            with pytest.raises(TimeoutError, match="open"):
                client.wait_stage(ids=["done1", "open"], timeout=0.5, interval=0.1)
            with pytest.raises(ValueError):
                client.wait_stage()

        async def both() -> None:
            async with AsyncAjetRunnerClient(server.url, TOKEN) as aclient:
                got = await aclient.wait_stage(ids=["done2", "done1"], interval=0.1)
                assert [r.id for r in got] == ["done2", "done1"]
                with pytest.raises(TimeoutError):
                    await aclient.wait_stage("other", timeout=0.5, interval=0.1)
                assert [s.name for s in await aclient.stages()] == ["other", "w"]

        asyncio.run(both())


def test_a_sweep_over_the_cap_is_refused_with_the_way_past_it_and_allowed_when_asked(api: TestClient,
                                                                                   tmp_path: Path) -> None:
    sc = make("demo", tmp_path / "big")
    values = ", ".join(str(v) for v in range(1, 11))
    rewards = ", ".join(f"0.{v:02d}" for v in range(50, 60))
    text = sc.blueprint.read_text() + f"\n## [exp_sweep]\n- ajet_sim.seed: {values}\n- ajet_sim.reward_end: {rewards}\n"
    refused = api.post("/v1/stages", json={"stage": "big", "blueprints": [{"blueprint": text}]}, headers=AUTH)
    assert refused.status_code == 422, refused.text
    assert "more than 64" in refused.text and "--max-experiments 100" in refused.text
    assert api.get("/v1/stages/big", headers=AUTH).status_code == 404 or api.get(
        "/v1/stages/big", headers=AUTH).json()["total"] == 0  # nothing was submitted
    allowed = api.post("/v1/stages", json={"stage": "big", "blueprints": [{"blueprint": text}],
                                           "max_experiments": 100}, headers=AUTH)
    assert allowed.status_code == 201, allowed.text[:2000]
    assert len(allowed.json()["experiments"]) == 100 and allowed.json()["refused"] == []
    assert api.post("/v1/stages", json={"stage": "big2", "blueprints": [{"blueprint": text}],
                                        "max_experiments": 1001}, headers=AUTH).status_code == 422
