"""A worker's /metrics and /healthz listen on loopback unless told otherwise (`worker --metrics-host`,
AJET_RUNNER_METRICS_HOST); the chart sets 0.0.0.0 (tests/unit/test_helm_chart.py)."""

from __future__ import annotations

from ajet_runner.store.settings import Settings


def test_a_worker_metrics_listen_on_loopback_unless_told(monkeypatch) -> None:
    monkeypatch.delenv("AJET_RUNNER_METRICS_HOST", raising=False)
    assert Settings().metrics_host == "127.0.0.1"
    monkeypatch.setenv("AJET_RUNNER_METRICS_HOST", "0.0.0.0")
    assert Settings().metrics_host == "0.0.0.0"
