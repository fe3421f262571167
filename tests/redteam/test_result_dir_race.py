"""Red team: six concurrent submissions naming one result dir, against a real `serve` (the red-team repro
had three accepted runs, one log holding two runs' output, two runs' files moved into previous/ while
they ran, and one finish.flag for three ids).

Fast: exactly one 201 and five 409 naming the winner. Full: the same with a real worker running the
winner to the end: one finish.flag, the winner's id, one run's log, the earlier run alone in previous/.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.integration.scenario import clean_env, make, wait_for
from tests.integration.workers import running_worker, worker_env
from tests.redteam.procs import serving
from tests.redteam.record import full, record

pytestmark = [pytest.mark.integration]

TOKEN = "t-race-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
CLIENTS = 6


def _env(redis_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return clean_env(REDIS_URL=redis_url, AJET_RUNNER_TOKEN=TOKEN, AJET_RUNNER_ALLOWED_ROOTS=f"{tmp_path}:{VENV}",
                     **extra)


def _race(api: str, text: str) -> list[httpx.Response]:
    barrier = threading.Barrier(CLIENTS)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(base_url=api, headers=AUTH, timeout=60) as client:
            barrier.wait()
            resp = client.post("/v1/experiments", json={"blueprint": text})
        with lock:
            answers.append(resp)

    threads = [threading.Thread(target=one) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return answers


def _earlier_run(results: Path) -> None:
    (results / "logs").mkdir(parents=True)
    (results / "logs" / "attempt-1.log").write_text("the earlier run's log\n")
    (results / "finish.flag").write_text(json.dumps({"id": "earlier", "outcome": "completed",
                                                     "finished_at": "2026-01-02T03:04:05Z"}))


def _verdict(answers: list[httpx.Response]) -> tuple[str, list[int]]:
    codes = sorted(r.status_code for r in answers)
    (won,) = [r.json()["id"] for r in answers if r.status_code == 201] or ["none"]
    assert codes == [201] + [409] * (CLIENTS - 1), [r.text for r in answers]
    assert all(won in r.json()["detail"] for r in answers if r.status_code == 409)
    return won, codes


def test_six_concurrent_submissions_one_201_five_409(redis_url: str, tmp_path: Path) -> None:
    sc = make("demo", tmp_path)
    _earlier_run(sc.results)
    with serving(_env(redis_url, tmp_path), tmp_path / "serve.log") as api:
        answers = _race(api, sc.blueprint.read_text())
    codes = sorted(r.status_code for r in answers)
    record("one result dir, one live run", "concurrent same-dir submissions (API)", CLIENTS,
           f"{codes.count(201)}x201, {codes.count(409)}x409", passed=codes == [201] + [409] * (CLIENTS - 1))
    _verdict(answers)
    assert sorted(p.name for p in (sc.results / "previous").iterdir()) == ["2026-01-02T03-04-05Z"]


@full
def test_six_concurrent_submissions_then_the_run_one_flag_with_the_winners_id(
        redis_url: str, tmux_socket: str, tmp_path: Path) -> None:
    sc = make("demo", tmp_path)
    _earlier_run(sc.results)
    with serving(_env(redis_url, tmp_path), tmp_path / "serve.log") as api, \
            running_worker(worker_env(redis_url, tmux_socket), "race", "--gpus", "0", "--slots", "3"):
        wait_for(lambda: httpx.get(f"{api}/v1/nodes", headers=AUTH, timeout=5).json(), 30, "the worker")
        answers = _race(api, sc.blueprint.read_text())
        won, codes = _verdict(answers)
        wait_for(lambda: (sc.results / "finish.flag").exists(), 120, "the winner's finish.flag")
        flag = json.loads((sc.results / "finish.flag").read_text())
        rec = httpx.get(f"{api}/v1/experiments/{won}", headers=AUTH, timeout=10).json()
        total = httpx.get(f"{api}/v1/experiments", headers=AUTH, timeout=10).json()["total"]
    log = (sc.results / "logs" / "attempt-1.log").read_text()
    one_run = log.count("Training Progress: 100%") <= 1 and "the earlier run's log" not in log
    archived = sorted(p.name for p in (sc.results / "previous").iterdir())
    ok = flag["id"] == won and rec["outcome"] == "completed" and total == 1 and one_run and archived == [
        "2026-01-02T03-04-05Z"]
    record("one result dir, one live run", "concurrent same-dir submissions, then the run (API + worker)", CLIENTS,
           f"{codes.count(201)}x201, {codes.count(409)}x409; finish.flag id = winner: {flag['id'] == won}; "
           f"records: {total}; one run's log: {one_run}; previous/: {len(archived)} (the earlier run)", passed=ok)
    assert ok, (flag, won, rec["outcome"], total, archived)
