"""Bad input in the launching environment (issue 36): a variable whose name or value is not UTF-8, or whose
value is too large to exec with. The run goes on, each such variable gets a clear line in the report, and
nothing is dropped silently (real Redis, the driver, the stub executor)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ajet_runner.store.store import Store
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.executors.wrapper import ENV_VALUE_MAX, env_file_bytes
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.doubles import InMemoryRunner, Script, seed, settings_for

BAD_NAME = "BAD\udcffNAME"  # the raw byte 0xff in a name (os.environ decodes it with surrogateescape)
BAD_NAME_SHOWN = "BAD\ufffdNAME"


def test_the_env_file_passes_non_utf8_values_as_bytes_and_names_each_variable_left_out() -> None:
    data, notes = env_file_bytes({"OK": "1", "RAW": "caf\udce9", BAD_NAME: "v", "HUGE": "x" * (ENV_VALUE_MAX + 1)})
    assert data.split(b"\0")[:2] == [b"OK=1", b"RAW=caf\xe9"]
    assert b"HUGE" not in data and b"BAD" not in data
    assert f"{BAD_NAME_SHOWN}: not passed (not a name a shell can export)" in notes
    assert f"HUGE: not passed ({ENV_VALUE_MAX + 1:,} bytes; a process cannot start with a variable over " \
           f"{ENV_VALUE_MAX:,} bytes)" in notes
    assert "RAW: passed as its bytes (the value is not UTF-8)" in notes  # passed, and said
    json.dumps(notes).encode("utf-8")  # every line can be stored and shown


def test_a_run_whose_shell_holds_bad_variables_completes_and_the_report_names_each_one(
        redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BAD_NAME, "value")
    monkeypatch.setenv("RAW_VALUE", "caf\udce9")
    monkeypatch.setenv("HUGE_VALUE", "x" * (ENV_VALUE_MAX + 1))
    store = Store.from_url(redis_url)
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path)
    runner = InMemoryRunner(Script(["Training Progress: 100%"], exit_code=0))
    outcome = ExperimentDriver(store, exp_id, settings_for(redis_url), NodeInfo(name="test-node", gpus=0, slots=1),
                               "test/1", runner=runner).run()
    assert outcome == "completed"
    [attempt] = json.loads((tmp_path / "results" / "results.json").read_text())["attempts"]
    assert "RAW_VALUE" in attempt["env_names"]
    assert "HUGE_VALUE" not in attempt["env_names"] and BAD_NAME_SHOWN not in attempt["env_names"]
    notes = attempt["env_notes"]
    assert any(n.startswith("HUGE_VALUE: not passed (") for n in notes), notes
    assert f"{BAD_NAME_SHOWN}: not passed (not a name a shell can export)" in notes
    assert "RAW_VALUE: passed as its bytes (the value is not UTF-8)" in notes
    report = (tmp_path / "results" / "experiment_report.md").read_text()
    for line in notes:
        assert f"  - {line}" in report
