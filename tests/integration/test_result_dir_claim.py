"""One result dir, one live experiment, decided by one compare-and-set (store/claim_result_dir.lua).

The red-team repro: six concurrent submissions naming one `exp_result_dir` were three accepted runs
(the holder was read, then the record written in a MULTI without WATCH). Here: real redis-server, real
threads racing the real `submit`, and the claim's life: released by the finishing transition, by a
withdrawn submission, by `delete`; refused for a dir inside or around a live one; a refusal report
written only under a claim of its own.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ajet_runner.service.submit import SubmissionRejected, submit
from ajet_runner.store.keys import INDEX, RESULT_DIRS, stats_key
from ajet_runner.store.store import ResultDirTaken, Store
from tests.integration.scenario import make

pytestmark = pytest.mark.integration


def _race(url: str, texts: list[str]) -> tuple[list[dict], list[SubmissionRejected]]:
    """Every text submitted at once (a barrier releases the threads together)."""
    barrier = threading.Barrier(len(texts))
    won: list[dict] = []
    lost: list[SubmissionRejected] = []
    lock = threading.Lock()

    def one(text: str) -> None:
        own = Store.from_url(url)  # a client each, as separate API processes would have
        barrier.wait()
        try:
            rec = submit(own, text)
            with lock:
                won.append(rec)
        except SubmissionRejected as exc:
            with lock:
                lost.append(exc)

    threads = [threading.Thread(target=one, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return won, lost


def test_six_concurrent_submissions_of_one_dir_one_wins_five_get_409_naming_it(redis_url: str,
                                                                                tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    sc = make("demo", tmp_path)
    (sc.results / "finish.flag").parent.mkdir(parents=True, exist_ok=True)
    (sc.results / "finish.flag").write_text('{"id": "earlier", "outcome": "completed"}')  # an earlier run's
    won, lost = _race(redis_url, [sc.blueprint.read_text()] * 6)
    assert len(won) == 1 and len(lost) == 5, (won, [str(e) for e in lost])
    winner = won[0]["id"]
    assert all(e.status == 409 and winner in str(e) for e in lost), [str(e) for e in lost]
    assert store.r.zcard(INDEX) == 1 and store.r.llen("rq:queue:default") == 1
    assert store.r.hgetall(RESULT_DIRS) == {os.path.realpath(sc.results).encode(): winner.encode()}
    # The earlier run was archived once, by the winner, after its claim: one previous/ entry, no flag left.
    assert not (sc.results / "finish.flag").exists()
    assert [p.name for p in (sc.results / "previous").iterdir()] == [won[0]["previous_run"].split("/")[-1]]


def test_a_dir_inside_or_around_a_live_ones_is_refused_and_the_finish_releases_the_claim(
        redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    outer = make("demo", tmp_path / "outer")
    first = submit(store, outer.blueprint.read_text())
    real = os.path.realpath(outer.results)
    inner = make("demo", tmp_path / "inner")
    text = inner.blueprint.read_text().replace(str(inner.results), str(outer.results / "sub"))
    with pytest.raises(SubmissionRejected) as refused:
        submit(store, text)
    assert refused.value.status == 409 and first["id"] in str(refused.value) and "is inside" in str(refused.value)
    around = inner.blueprint.read_text().replace(str(inner.results), str(outer.workdir))
    with pytest.raises(SubmissionRejected, match="contains") as refused:
        submit(store, around)
    assert first["id"] in str(refused.value)

    # The finishing transition gives the dir back, atomically with the state change.
    store.records.transition(first["id"], expected_version=1, fields={"state": "finished", "outcome": "cancelled"},
                             event={"type": "transition", "to": "finished"})
    assert store.r.hget(RESULT_DIRS, real) is None
    second = submit(store, text)
    assert store.r.hget(RESULT_DIRS, os.path.realpath(outer.results / "sub")) == second["id"].encode()
    store.records.delete(second["id"])  # a deleted record releases its claim too
    assert store.r.hlen(RESULT_DIRS) == 0


def test_stale_claims_are_dropped_as_they_are_met(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    store.r.hset(RESULT_DIRS, mapping={"/gone/a": "nosuchrecord", "/gone/b": "someone 1.0"})  # vanished, lapsed
    rec = submit(store, make("demo", tmp_path).blueprint.read_text())
    assert store.r.hgetall(RESULT_DIRS) == {os.path.realpath(rec["result_dir"]).encode(): rec["id"].encode()}


def test_a_hold_without_a_record_blocks_the_dir_until_released_or_lapsed(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    sc = make("demo", tmp_path)
    real = os.path.realpath(sc.results)
    store.result_dirs.hold(real, "refusing1", seconds=30)
    with pytest.raises(SubmissionRejected, match="refusal report") as refused:
        submit(store, sc.blueprint.read_text())
    assert refused.value.status == 409
    with pytest.raises(ResultDirTaken):
        store.result_dirs.hold(real, "refusing2")
    assert store.result_dirs.release(real, "someone-else") is False
    assert store.result_dirs.release(real, "refusing1") is True
    store.result_dirs.hold(real, "refusing3", seconds=0.001)  # lapses at once
    assert submit(store, sc.blueprint.read_text())["state"] == "queued"


def test_a_refusal_never_writes_its_report_into_a_dir_a_live_run_holds(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    sc = make("demo", tmp_path)
    live = submit(store, sc.blueprint.read_text())
    (sc.results / "logs").mkdir(parents=True)
    (sc.results / "logs" / "attempt-1.log").write_text("the live run's log\n")
    broken = sc.blueprint.read_text().replace(str(sc.codebase), str(tmp_path / "no-such-code"))
    with pytest.raises(SubmissionRejected) as refused:
        submit(store, broken)
    assert refused.value.status == 422 and refused.value.report_dir == ""
    assert any(p.level.value == "warning" and live["id"] in p.message for p in refused.value.problems)
    assert sorted(p.name for p in sc.results.iterdir()) == ["logs"]  # nothing archived, no flag written
    assert store.r.hgetall(RESULT_DIRS) == {os.path.realpath(sc.results).encode(): live["id"].encode()}


def test_a_submission_refused_after_its_claim_is_withdrawn_and_frees_the_dir(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    sc = make("demo", tmp_path)
    sc.results.mkdir(parents=True, exist_ok=True)
    (sc.results / "finish.flag").write_text("{}")
    (sc.results / "previous").write_text("a file where the archive dir goes\n")  # the archive must fail
    with pytest.raises(SubmissionRejected, match="could not be moved to previous/"):
        submit(store, sc.blueprint.read_text())
    assert store.r.zcard(INDEX) == 0 and store.r.hlen(RESULT_DIRS) == 0 and store.r.llen("rq:queue:default") == 0
    (sc.results / "previous").unlink()
    assert submit(store, sc.blueprint.read_text())["state"] == "queued"


def test_counters_take_the_retention_of_the_records_they_count(redis_url: str) -> None:
    import redis

    store = Store(redis.Redis.from_url(redis_url), retention_seconds=3600)
    store.records.create("e1", {"state": "queued"}, {})
    store.records.transition("e1", expected_version=1, fields={"state": "finished", "outcome": "completed"},
                             event={"type": "transition"}, stats={"transition": ("queued", "finished"),
                                                                  "outcome": "completed", "duration": 3.0})
    for name in ("transitions", "outcomes", "duration_sum"):
        assert 3500 < store.r.ttl(stats_key(name)) <= 3600, name
    assert 3500 < store.r.ttl("ajet:stats:duration_bucket:completed") <= 3600
    forever = Store(redis.Redis.from_url(redis_url), retention_seconds=0)
    forever.records.create("e2", {"state": "queued"}, {})
    forever.records.transition("e2", expected_version=1, fields={"state": "running"}, event={"type": "transition"},
                               stats={"transition": ("queued", "running")})
    assert forever.r.ttl(stats_key("transitions")) > 3500  # retention 0 never shortens what is set
