"""Red team, fast: stages that cannot be turned against users (issue 37 item 4), through the real app on a
real Redis — a refused stage changes nothing, a retried stage submission is the same stage, a key cannot
be replayed for another stage, result dirs outside the allowed roots are not read; and the adviser cannot
unset a map or a key the preflight checks (item 6)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.statemachine.fixes.advice import AdviceChange, AdviceRules, validate_changes
from ajet_runner.store.cluster.stages import stage_meta
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import make
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]

TOKEN = "t-stage-red-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))


@pytest.fixture()
def api(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_roots=f"{tmp_path}:{VENV}")
    with TestClient(create_app(settings)) as client:
        yield client


def test_refused_stages_change_nothing(api: TestClient, tmp_path: Path, redis_url: str) -> None:
    store = Store.from_url(redis_url)
    text = make("demo", tmp_path / "a").blueprint.read_text() + "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n"
    assert api.post("/v1/stages", json={"stage": "victim", "blueprints": [{"blueprint": text}],
                                        "webhook_url": "https://hooks.example/victim"}, headers=AUTH).status_code == 201
    meta, keys = stage_meta(store, "victim"), set(store.r.keys("*"))
    attempts = [  # each is refused whole: the victim's settings must stay, no empty stage may appear
        {"stage": "victim", "blueprints": [{"blueprint": text}], "webhook_url": "https://attacker.example/x",
         "stage_dir": str(tmp_path / "elsewhere")},  # 409: every result dir is taken
        {"stage": "victim", "blueprints": [{"blueprint": text + "- ajet.x: 1, 1\n"}],
         "webhook_url": "https://attacker.example/y"},  # 422: a malformed sweep
        {"stage": "empty-1", "blueprints": [{"blueprint": text}]},  # 409 for a new name
        {"stage": "empty-2", "blueprints": [{"blueprint": "no parts at all"}]},  # 422 for a new name
    ]
    statuses = [api.post("/v1/stages", json=body, headers=AUTH).status_code for body in attempts]
    unchanged = stage_meta(store, "victim") == meta and set(store.r.keys("*")) == keys
    names = [s["name"] for s in api.get("/v1/stages", headers=AUTH).json()]
    record("stages: a refused submission", "409/422 submissions naming an existing stage (other webhook and dir) "
           "and new names", len(attempts), f"statuses {statuses}; settings and keys unchanged: {unchanged}; "
           f"stages listed: {names}", passed=unchanged and names == ["victim"] and all(s in (409, 422)
                                                                                      for s in statuses))
    assert statuses == [409, 422, 409, 422] and unchanged and names == ["victim"]


def test_a_retried_stage_submission_is_the_same_stage(api: TestClient, tmp_path: Path, redis_url: str) -> None:
    store = Store.from_url(redis_url)
    text = make("demo", tmp_path / "r").blueprint.read_text() + "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n"
    body = {"stage": "retry", "blueprints": [{"blueprint": text}]}
    key = {**AUTH, "Idempotency-Key": "retry-1"}
    first = api.post("/v1/stages", json=body, headers=key).json()
    for exp in first["experiments"]:  # finished: a plain retry would run the whole stage again
        rec = store.records.raw(exp["id"])
        store.records.transition(exp["id"], expected_version=int(rec["version"]), event={"type": "transition"},
                                 fields={"state": "finished", "outcome": "completed"})
    retries = [api.post("/v1/stages", json=body, headers=key) for _ in range(3)]
    replayed = api.post("/v1/stages", json={**body, "stage": "other"}, headers=key)
    same = all(r.status_code == 200 and [e["id"] for e in r.json()["experiments"]] == [
        e["id"] for e in first["experiments"]] for r in retries)
    record("stages: Idempotency-Key", "the same stage submission retried after its runs finished; the key "
           "replayed for another stage", len(retries) + 1, f"same stage: {same}, records {store.indexes.count()}, "
           f"replay {replayed.status_code}", passed=same and store.indexes.count() == 2 and replayed.status_code == 409)
    assert same and store.indexes.count() == 2 and replayed.status_code == 409


def test_result_dirs_outside_the_roots_are_not_read(api: TestClient, tmp_path: Path) -> None:
    outside = ["/etc", "/root", "/proc/self", str(tmp_path / ".." / ".."), "relative"]
    answers = [api.post("/v1/stages/s/experiments", json={"result_dirs": [d]}, headers=AUTH) for d in outside]
    ok = all(a.status_code == 422 and ("allowed roots" in a.text or "absolute" in a.text) for a in answers)
    record("stages: stage add", "result dirs outside the allowed roots (results.json read by the server)",
           len(outside), f"{sum(a.status_code == 422 for a in answers)} refused with the root rule named", passed=ok)
    assert ok, [a.text for a in answers]


YAML = {"ajet": {"model": {"path": "Qwen/Qwen2.5-7B-Instruct"},
                 "rollout": {"max_model_len": 16000, "temperature": 0.9, "user_workflow": "a.b->C"},
                 "data": {"train_batch_size": 32},
                 "trainer_common": {"val_before_train": True, "test_freq": 2, "logger": "tensorboard",
                                    "n_gpus_per_node": 8, "nnodes": 1, "total_epochs": 5,
                                    "val_print_to_markdown_file_path": "saved_val_result/val.md"},
                 "execute_test": False, "task_judge": {"judge_protocol": "x->Y"}}}
HOSTILE_UNSETS = ["ajet.model", "ajet.rollout", "ajet.trainer_common", "ajet.data", "ajet.task_judge",
                  "ajet.model.path", "ajet.execute_test", "ajet.trainer_common.val_before_train",
                  "ajet.trainer_common.val_print_to_markdown_file_path", "ajet.trainer_common.test_freq",
                  "ajet.trainer_common.logger", "ajet.trainer_common.n_gpus_per_node", "ajet.trainer_common.nnodes",
                  "ajet.trainer_common.total_epochs", "ajet.rollout.user_workflow", "ajet.rollout.temperature",
                  "ajet.data.train_batch_size"]


def test_the_adviser_cannot_unset_a_map_or_a_guarded_key() -> None:
    rules = AdviceRules(yaml_data=YAML)
    refused = [k for k in HOSTILE_UNSETS if validate_changes([AdviceChange(kind="yaml_unset", key=k)], rules)]
    fine = validate_changes([AdviceChange(kind="yaml_unset", key="ajet.rollout.max_model_len")], rules)
    record("adviser: yaml_unset", "unset a whole section (ajet.model, ajet.trainer_common, …), a key the preflight "
           "checks, or one that defines the experiment", len(HOSTILE_UNSETS),
           f"{len(refused)} refused; an allow-listed leaf (max_model_len) still passes: {not fine}",
           passed=len(refused) == len(HOSTILE_UNSETS) and not fine)
    assert refused == HOSTILE_UNSETS and fine == []
