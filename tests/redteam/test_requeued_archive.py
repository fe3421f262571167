"""Red team: a run taken again by a new driver never archives its own files into `previous/`.

After a watcher kill or a Redis restart, 3 of 32 re-queued runs archived their own first files: the driver that
first took the run had written `config.original.yaml` (and the reserve, the patched config) and died before its
`start` transition, so the next driver found runner files in the dir and moved them aside as an earlier run's.
Here the dirs are left exactly as that first driver leaves them (its archive with the run's id, then its first
files), and each run is driven by a real driver (real Redis, real files; the attempt itself in memory,
tests/doubles.py): nothing of its own may move. Beside them, dirs holding a finished earlier run (another id's
marker, or none: a dir from before the marker) must still be archived whole.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ajet_runner.resultdir.archive import OWNER_NAME, archive_previous_run, run_owner
from ajet_runner.store.store import Store
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.doubles import InMemoryRunner, Script, seed, settings_for
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]
NODE = NodeInfo(name="test-node", gpus=0, slots=1)
RETAKEN, EARLIER, LEGACY = 16, 12, 4
EARLIER_FLAG = {"id": "earlier0run", "outcome": "completed", "finished_at": "2026-01-02T03:04:05Z"}


def _drive(store: Store, redis_url: str, exp_id: str) -> str:
    runner = InMemoryRunner(Script(["step:1 - val/mean_reward:0.5"], 0))
    return ExperimentDriver(store, exp_id, settings_for(redis_url), NODE, "test/1", runner=runner).run()


def test_a_run_taken_again_keeps_its_own_files_and_an_earlier_run_is_still_archived(redis_url: str,
                                                                                     tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    kept, archived, wrong = 0, 0, []
    for n in range(RETAKEN + EARLIER + LEGACY):
        base, exp_id = tmp_path / f"run{n}", uuid.uuid4().hex[:12]
        base.mkdir()
        seed(store, exp_id, base)
        results = base / "results"
        if n < RETAKEN:  # the first driver's work: the archive for this run, its first files, then it died
            archive_previous_run(results, owner=exp_id)
            (results / "config.original.yaml").write_text("# the first driver's copy\n")
            (results / "config.patched.yaml").write_text("# the first driver's patched copy\n")
        else:  # a finished earlier run, with its marker (or, for a dir from before markers, without)
            results.mkdir()
            (results / "finish.flag").write_text(json.dumps(EARLIER_FLAG))
            (results / "experiment_report.md").write_text("# the earlier run\n")
            if n < RETAKEN + EARLIER:
                (results / OWNER_NAME).write_text("earlier0run\n")
        outcome = _drive(store, redis_url, exp_id)
        previous = sorted(p.name for p in (results / "previous").iterdir()) if (results / "previous").exists() else []
        if n < RETAKEN:
            ok = outcome == "completed" and not previous and run_owner(results) == exp_id
            kept += ok
        else:
            moved = results / "previous" / "2026-01-02T03-04-05Z"
            ok = (outcome == "completed" and previous == ["2026-01-02T03-04-05Z"]
                  and json.loads((moved / "finish.flag").read_text())["id"] == "earlier0run"
                  and json.loads((results / "finish.flag").read_text())["id"] == exp_id
                  and run_owner(results) == exp_id)
            archived += ok
        if not ok:
            wrong.append((n, outcome, previous))
    record("re-queued runs and `previous/`", f"{RETAKEN} runs taken again after their first driver wrote its files "
           f"and died; {EARLIER + LEGACY} beside them in dirs of a finished earlier run ({LEGACY} without a marker)",
           RETAKEN + EARLIER + LEGACY, f"{RETAKEN - kept} of {RETAKEN} archived their own files; {archived} of "
           f"{EARLIER + LEGACY} earlier runs archived", passed=not wrong)
    assert not wrong, wrong
