"""The hand-written text of the per-experiment families is byte for byte what prometheus_client
would write for the same families (labels with quotes, newlines and CJK, NaN and inf values)."""

from __future__ import annotations

import math

from prometheus_client.exposition import generate_latest

from service.metrics import Snapshot, _One, experiment_families, experiment_text


def test_fast_text_equals_generate_latest() -> None:
    odd = 'a "quoted"\\ purpose\nwith 中文 `ticks`'
    snap = Snapshot(now=1000.0, states={"running": 2, "finished": 1, "weird": 1}, experiments=[
        {"id": "e1", "node": "n1", "purpose": odd, "state": "running", "started_at": "100", "max_seconds": "3600",
         "attempt": "2", "latest_metrics": {"mean_reward": 0.5, "step": 40, "task_pass_rate@1": 0.25,
                                            "task_pass_rate@4": math.nan, "task_pass_rate@x": 1}},
        {"id": 'e"2', "node": "", "purpose": "", "state": "finished", "started_at": "", "finished_at": "900",
         "max_seconds": "", "attempt": "", "latest_metrics": {"mean_reward": math.inf}},
        {"id": "e3", "node": "n\\2", "purpose": "p", "state": "queued", "latest_metrics": ["not", "a", "dict"]},
    ])
    assert experiment_text(snap) == generate_latest(_One(*experiment_families(snap))).decode()
