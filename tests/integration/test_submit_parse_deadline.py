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
