"""Stages that tell the truth (issue 37 item 4, issue 41 item 2), on a real redis-server and the real app: a
refused submission records nothing and rewrites no settings; an Idempotency-Key names one stage (and an
experiment's key its stage); result dirs added to a stage lie in the allowed roots; a stage goes when its
last record expires; `wait --stage` and `wait_stage` on an unknown or empty stage answer at once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.service.client.api_client import AjetRunnerClient, AsyncAjetRunnerClient, EmptyStage, StageNotFound
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.cluster.stages import stage_meta, stage_names
from ajet_runner.store.keys import STAGES, stage_meta_key
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.test_api import running_server

pytestmark = [pytest.mark.integration]

TOKEN = "t-stage-truth-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
SWEEP = "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n"


@pytest.fixture()
def api(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_roots=f"{tmp_path}:{VENV}")
    with TestClient(create_app(settings)) as client:
        yield client


def _keys(redis_url: str) -> set[bytes]:
    return set(Store.from_url(redis_url).r.keys("*"))


def _sweep(tmp_path: Path, name: str) -> tuple[Path, str]:
    sc = make("demo", tmp_path / name)
    return sc.results, sc.blueprint.read_text() + SWEEP


def test_a_stage_refused_on_placement_records_nothing_and_rewrites_no_settings(api: TestClient, tmp_path: Path,
                                                                               redis_url: str) -> None:
    results, text = _sweep(tmp_path, "s")
    first = api.post("/v1/stages", json={"stage": "keep", "blueprints": [{"blueprint": text}],
                                         "webhook_url": "https://hooks.example/first"}, headers=AUTH)
    assert first.status_code == 201, first.text
    before = stage_meta(Store.from_url(redis_url), "keep")
    assert before["dir"] == str(results) and before["webhook_url"] == "https://hooks.example/first"
    keys = _keys(redis_url)
    # The same sweep again: every result dir is held by the first run's experiments -> 409, nothing written.
    again = api.post("/v1/stages", json={"stage": "keep", "blueprints": [{"blueprint": text}],
                                         "stage_dir": str(tmp_path / "elsewhere"),
                                         "webhook_url": "https://hooks.example/second"}, headers=AUTH)
    assert again.status_code == 409, again.text
    assert again.headers["content-type"] == "application/json" and "is taken" in again.json()["detail"]
    assert stage_meta(Store.from_url(redis_url), "keep") == before
    assert _keys(redis_url) == keys
    # A new stage refused whole leaves no stage at all: not listed, 404, no key of it.
    new = api.post("/v1/stages", json={"stage": "ghost", "blueprints": [{"blueprint": text}],
                                       "webhook_url": "https://hooks.example/ghost"}, headers=AUTH)
    assert new.status_code == 409, new.text
    assert api.get("/v1/stages/ghost", headers=AUTH).status_code == 404
    assert [s["name"] for s in api.get("/v1/stages", headers=AUTH).json()] == ["keep"]
    assert _keys(redis_url) == keys


def test_an_idempotency_key_names_one_stage(api: TestClient, tmp_path: Path, redis_url: str) -> None:
    _, text = _sweep(tmp_path, "idem")
    body = {"stage": "idem", "blueprints": [{"blueprint": text}]}
    key = {**AUTH, "Idempotency-Key": "stage-k1"}
    first = api.post("/v1/stages", json=body, headers=key)
    assert first.status_code == 201, first.text
    ids = [e["id"] for e in first.json()["experiments"]]
    store = Store.from_url(redis_url)
    for exp_id in ids:  # the runs finish: their result dirs are free again
        rec = store.records.raw(exp_id)
        store.records.transition(exp_id, expected_version=int(rec["version"]), event={"type": "transition"},
                                 fields={"state": "finished", "outcome": "completed"})
    repeat = api.post("/v1/stages", json=body, headers=key)
    assert repeat.status_code == 200, repeat.text
    assert [e["id"] for e in repeat.json()["experiments"]] == ids and repeat.json()["stage"] == "idem"
    assert all(e["state"] == "finished" for e in repeat.json()["experiments"])
    assert store.indexes.count() == len(ids)  # not run again
    other = api.post("/v1/stages", json={**body, "sweep": ["ajet.rollout.temperature=0.5,0.6"]}, headers=key)
    assert other.status_code == 409 and other.json()["problems"][0]["field"] == "Idempotency-Key"
    renamed = api.post("/v1/stages", json={**body, "stage": "idem2"}, headers=key)
    assert renamed.status_code == 409 and "stage 'idem'" in renamed.json()["detail"]
    as_experiment = api.post("/v1/experiments", json={"blueprint": text}, headers=key)
    assert as_experiment.status_code == 409 and "stage 'idem'" in as_experiment.json()["detail"]
    assert store.indexes.count() == len(ids)
    # A submission refused whole gives the key back: a corrected retry may use it.
    bad = api.post("/v1/stages", json={"stage": "later", "blueprints": [{"blueprint": text + "- x: 1, 1\n"}]},
                   headers={**AUTH, "Idempotency-Key": "stage-k2"})
    assert bad.status_code == 422
    fixed = api.post("/v1/stages", json={"stage": "later", "blueprints": [{"blueprint": make(
        "demo", tmp_path / "later").blueprint.read_text()}]}, headers={**AUTH, "Idempotency-Key": "stage-k2"})
    assert fixed.status_code == 201, fixed.text


def test_an_experiments_idempotency_key_is_bound_to_its_stage(api: TestClient, tmp_path: Path,
                                                              redis_url: str) -> None:
    text = make("demo", tmp_path / "one").blueprint.read_text()
    key = {**AUTH, "Idempotency-Key": "exp-k1"}
    first = api.post("/v1/experiments", json={"blueprint": text, "stage": "a"}, headers=key)
    assert first.status_code == 201, first.text
    same = api.post("/v1/experiments", json={"blueprint": text, "stage": "a"}, headers=key)
    assert same.status_code == 200 and same.json()["id"] == first.json()["id"]
    moved = api.post("/v1/experiments", json={"blueprint": text, "stage": "b"}, headers=key)
    assert moved.status_code == 409, moved.text
    assert "stage ('a', now 'b')" in moved.json()["detail"]
    unstaged = api.post("/v1/experiments", json={"blueprint": text}, headers=key)
    assert unstaged.status_code == 409
    as_stage = api.post("/v1/stages", json={"stage": "a", "blueprints": [{"blueprint": text}]}, headers=key)
    assert as_stage.status_code == 409 and "experiment" in as_stage.json()["detail"]
    assert Store.from_url(redis_url).indexes.count() == 1 and stage_names(Store.from_url(redis_url)) == ["a"]


@pytest.mark.parametrize(("result_dir", "message"), [
    ("/etc", "outside the allowed roots"),
    ("relative/dir", "must be an absolute path"),
])
def test_result_dirs_added_to_a_stage_lie_in_the_allowed_roots(api: TestClient, result_dir: str,
                                                                message: str) -> None:
    resp = api.post("/v1/stages/s/experiments", json={"result_dirs": [result_dir]}, headers=AUTH)
    assert resp.status_code == 422, resp.text
    (problem,) = resp.json()["problems"]
    assert problem["field"] == "result_dirs" and message in problem["message"]
    assert api.get("/v1/stages/s", headers=AUTH).status_code == 404


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/stages/s/experiments", {"result_dirs": ["/tmp/a\x00b"]}),
    ("/v1/stages/s/experiments", {"ids": ["ab\x00"]}),
    ("/v1/stages", {"stage": "s", "blueprints": [{"blueprint": "x"}], "stage_dir": "/tmp/\x00"}),
    ("/v1/stages", {"stage": "s", "blueprints": [{"blueprint": "x", "blueprint_path": "/a\nb"}]}),
    ("/v1/stages", {"stage": "s", "blueprints": [{"blueprint": "x"}], "sweep": ["ajet.x=1,\x002"]}),
    ("/v1/experiments", {"blueprint": "x", "blueprint_path": "/a\x1bb"}),
])
def test_nul_and_control_characters_are_a_json_422_naming_the_field(api: TestClient, path: str,
                                                                    body: dict) -> None:
    resp = api.post(path, json=body, headers=AUTH)
    assert resp.status_code == 422 and resp.headers["content-type"] == "application/json", resp.text
    assert any("control characters are refused" in p["message"] for p in resp.json()["problems"]), resp.text


@pytest.mark.parametrize("field", ["exp_result_dir", "exp_codebase_dir", "exp_venv_exe"])
def test_a_nul_in_a_blueprint_path_field_is_a_422_naming_it(api: TestClient, tmp_path: Path, field: str) -> None:
    sc = make("demo", tmp_path / "nul")
    text = sc.blueprint.read_text()
    value = {"exp_result_dir": str(sc.results), "exp_codebase_dir": str(sc.workdir / "codebase"),
             "exp_venv_exe": sys.executable}[field]
    assert value in text
    text = text.replace(value, value + "\x00x", 1)
    for path, body in (("/v1/experiments", {"blueprint": text}),
                       ("/v1/stages", {"stage": "nul", "blueprints": [{"blueprint": text}]})):
        resp = api.post(path, json=body, headers=AUTH)
        assert resp.status_code == 422 and resp.headers["content-type"] == "application/json", resp.text
        assert any(p["field"].endswith(field) and "a NUL byte" in p["message"]
                   for p in resp.json()["problems"]), resp.text


def test_a_stage_goes_when_its_last_record_expires(redis_url: str) -> None:
    store = Store.from_url(redis_url, retention_seconds=1)
    for exp_id in ("x1", "x2"):
        rec = store.records.create(exp_id, {"state": "queued", "lifecycle": Lifecycle.initial_dict(exp_id),
                                            "stage": "old"},
                                   {"message": "x"}, stage_settings={"dir": "/tmp/old", "webhook_url": "https://h.example/"})
        store.records.transition(exp_id, expected_version=int(rec["version"]), event={"type": "transition"},
                                 fields={"state": "finished", "outcome": "completed"})
    assert stage_names(store) == ["old"] and stage_meta(store, "old")["dir"] == "/tmp/old"

    def gone() -> bool:
        store.indexes.sweep()  # what every filtered list runs first
        return not store.r.exists(stage_meta_key("old")) and store.r.zscore(STAGES, "old") is None

    wait_for(gone, 15, "the stage to expire with its records")
    assert stage_names(store) == []


def test_wait_on_an_unknown_or_empty_stage_answers_at_once(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    store.r.zadd(STAGES, {"empty": time.time()})  # an empty stage as older versions left them
    store.r.hset(stage_meta_key("empty"), mapping={"created_at": time.time()})
    with running_server(redis_url, tmp_path / "serve.log", token=TOKEN) as server:
        env = {**os.environ, "AJET_RUNNER_URL": server.url, "AJET_RUNNER_TOKEN": TOKEN}
        with AjetRunnerClient(server.url, TOKEN) as client:
            started = time.monotonic()
            with pytest.raises(StageNotFound, match="no stage named 'nothing'"):
                client.wait_stage("nothing", interval=0.1)
            with pytest.raises(StageNotFound):  # the empty one is forgotten when it is looked at
                client.wait_stage("empty", interval=0.1)
            assert time.monotonic() - started < 10  # at once: no waiting for a timeout that was never given

        async def in_async() -> None:
            async with AsyncAjetRunnerClient(server.url, TOKEN) as aclient:
                with pytest.raises(StageNotFound):
                    await aclient.wait_stage("nothing", interval=0.1)

        asyncio.run(in_async())
        unknown = subprocess.run([*CLI, "wait", "--stage", "nothing"], env=env, capture_output=True, text=True,
                                 timeout=60)
        assert unknown.returncode == 2 and "no stage named 'nothing'" in unknown.stderr, unknown
        assert "Traceback" not in unknown.stderr
        # `submit --stage --idempotency-key`: a retry prints the same experiments, never a second stage run.
        sweep = tmp_path / "sweep.md"
        sweep.write_text(make("demo", tmp_path / "cli").blueprint.read_text() + SWEEP)
        runs = [subprocess.run([*CLI, "submit", "--stage", "cli-s", "--idempotency-key", "cli-k", str(sweep)],
                               env=env, capture_output=True, text=True, timeout=60) for _ in range(2)]
        assert [r.returncode for r in runs] == [0, 0], runs
        assert runs[0].stdout == runs[1].stdout and runs[0].stdout.count("Job submitted: ") == 2
        assert store.indexes.count() == 2
        # The case end to end: a stage refused whole (its result dirs are cli-s's) leaves no stage, and
        # `wait --stage` on it says so at once (it once waited 9 min 51 s for experiments that never existed).
        refused = subprocess.run([*CLI, "submit", "--stage", "ghost", str(sweep)], env=env, capture_output=True,
                                 text=True, timeout=60)
        assert refused.returncode != 0 and "Job submitted" not in refused.stdout, refused
        assert "ghost" not in stage_names(store) and store.indexes.count() == 2
        ghost = subprocess.run([*CLI, "wait", "--stage", "ghost"], env=env, capture_output=True, text=True,
                               timeout=60)
        assert ghost.returncode == 2 and "no stage named 'ghost'" in ghost.stderr, ghost


def test_wait_stage_raises_empty_stage_for_a_stage_without_experiments() -> None:
    from ajet_runner.service.client import api_client
    from ajet_runner.service.client.answers import Stage

    empty = Stage.model_validate({"name": "e", "experiments": []})
    with pytest.raises(EmptyStage, match="stage e has no experiments"):
        api_client._stage_experiments("e", lambda: empty)


def test_dead_outbox_tasks_expire_after_the_retention_time(redis_url: str) -> None:
    from ajet_runner.store.cluster.outbox import Outbox
    from ajet_runner.store.keys import OUTBOX_DEAD

    store = Store.from_url(redis_url, retention_seconds=1)
    outbox = Outbox(store.r)
    outbox.give_up("t-old", {"kind": "experiment_finished", "id": "gone"}, "receiver refused")
    store.r.rpush(OUTBOX_DEAD, "not json")  # unreadable: nothing could show it, it goes too
    time.sleep(1.2)
    outbox.give_up("t-new", {"kind": "experiment_finished", "id": "x"}, "receiver refused")
    store.indexes.sweep()  # what every filtered list runs first
    assert [t["id"] for t in outbox.dead()] == ["x"]
    kept = Store.from_url(redis_url, retention_seconds=0)  # retention 0: kept for ever, as records are
    time.sleep(1.2)
    kept.indexes.sweep()
    assert len(outbox.dead()) == 1


def test_concurrent_retries_with_one_key_make_one_stage(redis_url: str, tmp_path: Path) -> None:
    import threading

    import httpx

    text = make("demo", tmp_path / "conc").blueprint.read_text() + SWEEP
    body = {"stage": "conc", "blueprints": [{"blueprint": text}]}
    answers: list[httpx.Response] = []
    with running_server(redis_url, tmp_path / "serve.log", token=TOKEN,
                        AJET_RUNNER_ALLOWED_ROOTS=f"{tmp_path}:{VENV}") as server:
        def post() -> None:
            answers.append(httpx.post(f"{server.url}/v1/stages", json=body, timeout=60,
                                      headers={**AUTH, "Idempotency-Key": "conc-k"}))

        threads = [threading.Thread(target=post) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201], [a.text[:200] for a in answers]
    assert len({tuple(e["id"] for e in a.json()["experiments"]) for a in answers}) == 1
    assert Store.from_url(redis_url).indexes.count() == 2


def test_a_claim_written_before_stages_were_bound_still_answers_its_retry(api: TestClient, tmp_path: Path,
                                                                           redis_url: str) -> None:
    import json

    from ajet_runner.store.per_experiment.idempotency import digest, redis_key

    text = make("demo", tmp_path / "old").blueprint.read_text()
    first = api.post("/v1/experiments", json={"blueprint": text, "stage": "a"}, headers=AUTH).json()
    store = Store.from_url(redis_url)
    old = {"node": None, "nodes": None, "priority": "normal", "blueprint_path": None}  # no `stage` in it
    store.r.set(redis_key("old-k"), json.dumps({"id": first["id"], "digest": digest(text), "placement": old}))
    again = api.post("/v1/experiments", json={"blueprint": text, "stage": "a"},
                     headers={**AUTH, "Idempotency-Key": "old-k"})
    assert again.status_code == 200 and again.json()["id"] == first["id"]
