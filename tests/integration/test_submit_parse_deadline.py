"""Bounded work per submission: a parse that overruns its deadline is refused (422, naming the blueprint),
recording nothing, so a hostile text cannot hold one of the API's submission threads."""

from __future__ import annotations

from pathlib import Path

import pytest

from ajet_runner.service import submit as submit_module
from ajet_runner.service.submit import SubmissionRejected, submit
from ajet_runner.store.store import Store
from tests.integration.scenario import make

pytestmark = [pytest.mark.integration]


def test_a_parse_past_the_deadline_is_refused_and_records_nothing(redis_url: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.from_url(redis_url)
    text = make("demo", tmp_path).blueprint.read_text()
    monkeypatch.setattr(submit_module, "PARSE_DEADLINE_SECONDS", -1.0)  # already past when parsing starts
    with pytest.raises(SubmissionRejected) as refused:
        submit(store, text, check_disk=False)
    (problem,) = refused.value.problems
    assert refused.value.status == 422 and problem.field == "blueprint" and "to parse" in problem.message
    assert store.r.dbsize() == 0  # no record, no index, no job
    monkeypatch.setattr(submit_module, "PARSE_DEADLINE_SECONDS", 1.0)
    assert submit(store, text, check_disk=False)["state"] == "queued"


def test_a_stage_past_the_deadline_is_refused_whole_and_records_nothing(redis_url: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from ajet_runner.service import stage_submit
    from ajet_runner.service.stage_submit import StageRejected, submit_stage

    store = Store.from_url(redis_url)
    text = make("demo", tmp_path).blueprint.read_text() + "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n"
    monkeypatch.setattr(stage_submit, "PARSE_DEADLINE_SECONDS", -1.0)  # the blueprint and its sweep part share it
    with pytest.raises(StageRejected) as refused:
        submit_stage(store, "late", [(text, "/bp/late.md")], check_disk=False)
    assert refused.value.status == 422 and "to parse" in refused.value.problems[0].message
    assert store.r.dbsize() == 0  # no stage, no record, no settings
    monkeypatch.setattr(stage_submit, "PARSE_DEADLINE_SECONDS", 1.0)
    assert len(submit_stage(store, "late", [(text, "/bp/late.md")], check_disk=False).accepted) == 2
