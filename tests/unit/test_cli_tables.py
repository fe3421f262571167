"""`scan`, `nodes` and `status` on terminals of 80, 120 and 200 columns: every header is visible, every id,
state, node and time is whole, and no line is wider than the terminal (free text folds onto more lines)."""

from __future__ import annotations

import re
import time

import pytest
from rich.console import Console

from ajet_runner.cli.commands.client_commands import show_nodes, show_scan, show_status
from ajet_runner.service.client.answers import Experiment

NOW = time.time()
LONG_PURPOSE = ("Compare GRPO with a longer rollout budget on GSM8K; the learning-rate sweep of the second stage, "
                "the one the research lead asked for after the first stage plateaued at 0.66")
REASON = "mean_reward plateaued: the last 4 evaluations moved less than 0.005, after half of the max time of 5h"
EXPERIMENTS = [
    Experiment(id="d19419bb1e5a", state="running", purpose=LONG_PURPOSE, node="gpu-node-a", elapsed_seconds=3720,
               max_seconds=18000, latest_metrics={"mean_reward": 0.6612}, cancel_requested=True),
    Experiment(id="0a1b2c3d4e5f", state="finished", outcome="early_stopped", purpose="short", node="gpu-node-b",
               elapsed_seconds=15, reason=REASON, result_dir="/mnt/data/experiments/stage_2/grpo_long/results",
               tmux_session="ajet-compare-grpo-with-a-longer-rollout-0a1b2c3d4e5f", max_seconds=300,
               started_at=NOW - 15, history=[{"at": NOW, "from": "running", "to": "collecting", "trigger": "plateau",
                                             "reason": REASON}] * 2),
    Experiment(id="77aa88bb99cc", state="queued", purpose=LONG_PURPOSE.upper(), target_node="gpu-node-c"),
]
NODES = [
    {"name": "gpu-node-a", "alive": True, "heartbeat_age_seconds": 1.2, "gpus": 8, "gpus_busy": 4, "slots": 8,
     "running": ["d19419bb1e5a", "0a1b2c3d4e5f"], "draining": True, "drained_by": "ops@bastion",
     "drain_reason": "kernel upgrade on Friday, after the runs of stage 2 end", "drain_sticky": True,
     "drained_at": NOW, "pid": 41234, "started_at": NOW - 3600, "last_seen": NOW},
    {"name": "gpu-node-b", "alive": False, "heartbeat_age_seconds": 75.0, "gpus": 0, "gpus_busy": 0, "slots": 2,
     "running": [], "draining": False, "pid": 7, "started_at": NOW - 60, "last_seen": NOW - 75},
]
WIDTHS = (80, 120, 200)


def render(show, arg, width: int) -> str:
    console = Console(width=width, force_terminal=True, no_color=True, record=True)
    show(arg, console=console)
    return console.export_text()


def words(text: str) -> set[str]:
    return set(re.findall(r"\S+", text))


def assert_fits(text: str, width: int) -> None:
    widest = max(len(line.rstrip()) for line in text.splitlines())
    assert widest <= width, f"a line of {widest} characters on a {width}-column terminal:\n{text}"


@pytest.mark.parametrize("width", WIDTHS)
def test_scan_fits_and_shows_every_column(width: int) -> None:
    text = render(show_scan, EXPERIMENTS, width)
    assert_fits(text, width)
    assert {"id", "purpose", "state", "node", "elapsed", "mean_reward"} <= words(text)
    for whole in ("d19419bb1e5a", "0a1b2c3d4e5f", "77aa88bb99cc", "early_stopped", "queued", "gpu-node-a",
                  "gpu-node-b", "0.6612", "15s"):
        assert whole in words(text), whole
    assert "running (stopping)" in text and "1h 02m" in text
    assert "Compare" in text and "plateaued at 0.66" in " ".join(text.split())  # folded, never cut


@pytest.mark.parametrize("width", WIDTHS)
def test_nodes_fit_and_show_every_field_with_times_as_times(width: int) -> None:
    text = render(show_nodes, NODES, width)
    assert_fits(text, width)
    for header in ("name", "alive", "heartbeat_age", "gpus", "gpus_busy", "slots", "running", "draining",
                   "drained_by", "drain_reason", "drain_sticky", "drained_at", "pid", "started_at", "last_seen"):
        assert header in words(text), header
    assert time.strftime("%Y-%m-%d", time.localtime(NOW)) in text and "e+09" not in text
    assert "1m 15s" in text and "41234" in words(text)


@pytest.mark.parametrize("width", WIDTHS)
def test_status_fits_and_shows_every_field(width: int) -> None:
    text = render(show_status, EXPERIMENTS[1], width)
    assert_fits(text, width)
    for name in ("id", "purpose", "state", "outcome", "reason", "node", "tmux_session", "result_dir", "started",
                 "elapsed", "at", "transition", "trigger"):
        assert name in words(text), name
    assert "ajet-compare-grpo-with-a-longer-rollout-0a1b2c3d4e5f" in words(text)  # a name to copy stays whole
    assert "/mnt/data/experiments/stage_2/grpo_long/results" in words(text)
    assert "15s of 5m" in text and "running → collecting" in text
