"""Pure pieces of the CLI's output: table cells, piped tables, node columns, bar fraction, status words."""

from __future__ import annotations

import time

import pytest

from ajet_runner.cli.commands.client_commands import _node_columns, status_word
from ajet_runner.cli.commands.follow import fraction, headline
from ajet_runner.cli.commands.output import cell, print_table
from ajet_runner.service.client.answers import Experiment, Node


def test_cells_are_whole_and_on_one_line() -> None:
    assert cell(None) == cell("") == cell([]) == "-"
    assert cell(True) == "true" and cell(0.5) == "0.5" and cell(["a", "b"]) == "a,b"
    assert cell("two\nlines\there") == "two lines here"
    assert cell({"by": "ops", "why": "upgrade"}) == '{"by":"ops","why":"upgrade"}'
    long_id = "d19419bb1e5a" * 10
    assert cell(long_id) == long_id


def test_piped_table_is_tab_separated_with_a_header(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(("id", "state"), [("d19419bb1e5a", "queued"), ("x", None)])
    assert capsys.readouterr().out == "id\tstate\nd19419bb1e5a\tqueued\nx\t-\n"


def test_node_columns_show_fields_nobody_knew_about() -> None:
    nodes = [Node.model_validate({"name": "a", "alive": True, "gpus": 2}).to_dict(),
             Node.model_validate({"name": "b", "drained_by": "ops", "drain_reason": "upgrade"}).to_dict()]
    columns = _node_columns(nodes)
    assert columns[0] == "name" and {"drained_by", "drain_reason", "alive", "gpus", "running"} <= set(columns)


def test_finished_bars_are_full_and_status_words() -> None:
    now = time.time()
    running = {"state": "running", "started_at": now - 50, "max_seconds": 1000}
    assert 0.04 < fraction(running) < 0.06
    assert fraction({**running, "state": "finished", "finished_at": now - 40}) == 1.0
    assert fraction({"state": "queued"}) == 0.0
    words = {o: status_word(Experiment(id="x", state="finished", outcome=o)) for o in
             ("completed", "early_stopped", "failed", "timed_out", "cancelled")}
    assert words == {"completed": "Succeeded", "early_stopped": "Succeeded", "failed": "Failed",
                     "timed_out": "Failed", "cancelled": "Stopped"}
    assert [status_word({"state": s}) for s in ("queued", "launching", "repairing", "collecting")] == [
        "Queuing", "Running", "Running", "Running"]


def test_terminal_table_folds_only_free_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from ajet_runner.cli.commands import output

    monkeypatch.setattr(output, "is_terminal", lambda: True)
    console = Console(width=50, force_terminal=True, no_color=True, record=True)
    output.print_table(("id", "purpose", "state"), [("d19419bb1e5a", "a long purpose " * 5, "queued (stopping)")],
                       console=console, shrink=("purpose",))
    text = console.export_text()
    assert "d19419bb1e5a" in text and "queued (stopping)" in text
    assert text.split().count("purpose") == 1 + 5 and max(map(len, text.splitlines())) <= 50  # folded, nothing cut


def test_progress_headline_falls_back_to_the_pass_rate() -> None:
    assert headline({"mean_reward": 0.5, "task_pass_rate@1": 0.8}) == "mean_reward 0.5000"
    assert headline({"task_pass_rate@1": 0.8, "pass@1": 0.8}) == "task_pass_rate@1 0.8000"  # a swarm client's
    assert headline({}) == "mean_reward n/a"
