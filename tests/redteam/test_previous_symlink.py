"""Red team, fast: a reused result dir whose archive target is a symlink out of the allowed roots, against a
real `serve` (the red-team repro: the API created a directory outside the roots and moved finish.flag, the
report and data there). Each variant is refused with the reason; nothing is written outside."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.scenario import clean_env, make
from tests.redteam.procs import serving
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]

TOKEN = "t-symlink-0123456789"
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _plant(results: Path, outside: Path, variant: str) -> None:
    results.mkdir(parents=True, exist_ok=True)
    (results / "finish.flag").write_text(json.dumps({"id": "old", "outcome": "completed",
                                                     "finished_at": "2026-01-02T03:04:05Z"}))
    (results / "experiment_report.md").write_text("the earlier report\n")
    (results / "data.csv").write_text("1,2\n")
    if variant == "previous -> outside":
        (results / "previous").symlink_to(outside, target_is_directory=True)
    elif variant == "previous -> missing dir outside":
        (results / "previous").symlink_to(outside / "made-by-the-api", target_is_directory=True)
    elif variant == "previous -> relative ../../outside":
        (results / "previous").symlink_to(os.path.relpath(outside, results), target_is_directory=True)


@pytest.mark.parametrize("variant", ["previous -> outside", "previous -> missing dir outside",
                                     "previous -> relative ../../outside"])
def test_a_previous_symlink_is_refused_and_nothing_is_written_outside(redis_url: str, tmp_path: Path,
                                                                      variant: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    sc = make("demo", root)
    _plant(sc.results, outside, variant)
    before = _tree(sc.results)
    env = clean_env(REDIS_URL=redis_url, AJET_RUNNER_TOKEN=TOKEN, AJET_RUNNER_ALLOWED_ROOTS=f"{root}:{VENV}")
    with serving(env, tmp_path / "serve.log") as api:
        resp = httpx.post(f"{api}/v1/experiments", json={"blueprint": sc.blueprint.read_text()},
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    reason = " ".join(p["message"] for p in resp.json().get("problems", []))
    ok = resp.status_code == 422 and "previous is a symlink" in reason and _tree(outside) == [] \
        and _tree(sc.results) == before
    record("confined writes", f"reused result dir, {variant}", 1,
           f"HTTP {resp.status_code}; files outside the roots: {len(_tree(outside))}", passed=ok)
    assert ok, (resp.status_code, reason, _tree(outside), _tree(sc.results))
