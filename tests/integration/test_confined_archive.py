"""The archive into `previous/` through the confined writer, at the API (the red-team repro: reusing a
result dir whose `previous` entry was a symlink made the API create a directory outside the roots and
move `finish.flag`, the report and data there). Real redis-server, the real app."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import make

pytestmark = [pytest.mark.integration]

TOKEN = "t-archive-0123456789"
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_previous_symlink_out_of_the_roots_is_refused_and_nothing_is_written_outside(
        redis_url: str, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    sc = make("demo", root)
    sc.results.mkdir(parents=True)
    for name, body in (("finish.flag", json.dumps({"id": "old", "outcome": "completed"})),
                       ("experiment_report.md", "the earlier report\n"), ("data.csv", "1,2\n")):
        (sc.results / name).write_text(body)
    outside.mkdir()
    (sc.results / "previous").symlink_to(outside / "made-by-the-api", target_is_directory=True)
    before = _tree(sc.results)
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_roots=f"{root}:{VENV}")
    with TestClient(create_app(settings)) as api:
        resp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text()},
                        headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 422, resp.text
    (problem,) = [p for p in resp.json()["problems"] if p["field"] == "exp_result_dir"]
    assert "previous is a symlink" in problem["message"] and "never follows a link" in problem["message"]
    assert _tree(outside) == [] and _tree(sc.results) == before  # nothing outside, nothing moved, no flag
    store = Store.from_url(redis_url)
    assert store.indexes.count() == 0 and store.r.hlen("ajet:result_dirs") == 0  # withdrawn: the dir is free again
