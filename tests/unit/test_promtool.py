"""The alert rules and every dashboard panel query, evaluated by Prometheus' own engine (`promtool test rules`)
against synthetic series: each alert fires when it should and not before; each panel query returns the
expected series and values, scoped to its job and namespace (decoy series of another namespace and another
job must not show). Includes the run-duration median across two outcomes, which `max by (le)` got wrong.

promtool comes with Debian's `prometheus` package (scripts/ensure-test-deps.sh installs it for
`make install-test`); without it the test skips and says why.

promtool compares alert annotations exactly, and ours are templated prose; the alert tests therefore run on
a copy of the rules file whose annotations are only `runbook_url` (expr, for and labels untouched), and the
real file is checked as is by `promtool check rules` (which also parses the annotation templates).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "ajet-runner"
DASHBOARD = CHART_DIR / "dashboards" / "ajet-runner.json"
RULES = CHART_DIR / "alerts" / "ajet-runner-rules.yaml"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not on PATH (Debian package `prometheus`; "
                                "scripts/ensure-test-deps.sh installs it as root)")

# Grafana variables as a user would pick them: one namespace, the chart's API and worker jobs.
API = 'job="ajet-runner", namespace="ml", instance="10.0.0.1:8080"'
API2 = 'job="ajet-runner", namespace="ml", instance="10.0.0.2:8080"'  # a second replica: same cluster metrics
WORKER = 'job="ml/ajet-runner-worker", namespace="ml", instance="10.0.1.1:9101"'
VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$worker_job": "ml/ajet-runner-worker",
             "$job": "ajet-runner", "$namespace": "ml", "$purpose": ".*", "$experiment": ".*", "$stage": ".*"}
PURPOSE = "对比 GRPO 与 `ppo`"
EVAL = "6h10m"  # every counter below has more than 6 h of samples: the 6 h windows are full
RUNBOOK = "https://github.com/ajet-runner/ajet-runner/blob/main/docs/runbook.md#"


def s(series: str, values: str) -> dict[str, str]:
    return {"series": series, "values": values}


def buckets(name: str, labels: str, per_minute: dict[str, float]) -> list[dict[str, str]]:
    """Cumulative bucket counters growing by `per_minute[le]` every minute."""
    return [s(f'{name}_bucket{{{labels}, le="{le}"}}', f"0+{n:g}x400") for le, n in per_minute.items()]


# Runs that finished: 3 completed in (900, 1800] s, 2 failed in (60, 300] s (per minute, so rates are in proportion).
COMPLETED = {"60": 0, "300": 0, "900": 0, "1800": 3, "3600": 3, "+Inf": 3}
FAILED = {"60": 0, "300": 2, "900": 2, "1800": 2, "3600": 2, "+Inf": 2}
DURATION = "ajet_runner_run_duration_seconds"

PANEL_SERIES: list[dict[str, str]] = [
    s(f'ajet_runner_experiments{{{API}, state="running"}}', "2x400"),
    s(f'ajet_runner_experiments{{{API}, state="queued"}}', "1x400"),
    s('ajet_runner_experiments{job="ajet-runner", namespace="other", instance="x", state="running"}', "9x400"),
    s(f'ajet_runner_queue_jobs{{{API}, queue="default"}}', "3x400"),
    s(f'ajet_runner_queue_oldest_job_age_seconds{{{API}, queue="default"}}', "120x400"),
    s(f'ajet_runner_queued_oldest_age_seconds{{{API}, node=""}}', "90x400"),
    s(f'ajet_runner_queued_oldest_age_seconds{{{API2}, node=""}}', "90x400"),
    s(f'ajet_runner_node_up{{{API}, node="n1"}}', "1x400"),
    s(f'ajet_runner_node_up{{{API}, node="n2"}}', "0x400"),
    s(f'ajet_runner_node_heartbeat_age_seconds{{{API}, node="n1"}}', "5x400"),
    s(f'ajet_runner_node_gpus{{{API}, node="n1", state="total"}}', "8x400"),
    s(f'ajet_runner_node_gpus{{{API}, node="n1", state="busy"}}', "6x400"),
    s(f'ajet_runner_node_gpus{{{API}, node="n1", state="free"}}', "2x400"),
    s(f'ajet_runner_node_gpus{{{API}, node="n2", state="total"}}', "4x400"),
    s(f'ajet_runner_node_gpus{{{API}, node="n2", state="busy"}}', "0x400"),
    s(f'ajet_runner_node_gpus{{{API}, node="n2", state="free"}}', "4x400"),
    s(f'ajet_runner_experiment_info{{{API}, experiment="e1", purpose="{PURPOSE}", node="n1"}}', "1x400"),
    s(f'ajet_runner_experiment_info{{{API}, experiment="e2", purpose="baseline", node="n1"}}', "1x400"),
    s(f'ajet_runner_experiment_mean_reward{{{API}, experiment="e1", node="n1"}}', "0.5x400"),
    s(f'ajet_runner_experiment_mean_reward{{{API}, experiment="e2", node="n1"}}', "0.25x400"),
    s(f'ajet_runner_experiment_task_pass_rate{{{API}, experiment="e1", node="n1", k="1"}}', "0.4x400"),
    s(f'ajet_runner_experiment_elapsed_seconds{{{API}, experiment="e1", node="n1"}}', "1800x400"),
    s(f'ajet_runner_experiment_elapsed_seconds{{{API}, experiment="e2", node="n1"}}', "100x400"),
    s(f'ajet_runner_experiment_max_seconds{{{API}, experiment="e1", node="n1"}}', "3600x400"),
    s(f'ajet_runner_experiment_max_seconds{{{API}, experiment="e2", node="n1"}}', "0x400"),
    s(f'ajet_runner_experiment_state{{{API}, experiment="e1", node="n1", state="running"}}', "1x400"),
    s(f'ajet_runner_experiment_state{{{API}, experiment="e2", node="n1", state="running"}}', "1x400"),
    s(f'ajet_runner_experiment_attempt{{{API}, experiment="e1", node="n1"}}', "2x400"),
    s(f'ajet_runner_experiment_val_step{{{API}, experiment="e1", node="n1"}}', "20x400"),
    s(f'ajet_runner_repairs_total{{{API}, signature="cuda_oom", result="applied"}}', "0+1x400"),
    s(f'ajet_runner_transitions_total{{{API}, from_state="running", to_state="failing"}}', "0+2x400"),
    s(f'ajet_runner_outcomes_total{{{API}, outcome="completed"}}', "0+1x400"),
    *buckets(DURATION, f'{API}, outcome="completed"', COMPLETED),
    *buckets(DURATION, f'{API}, outcome="failed"', FAILED),
    *buckets(DURATION, f'{API2}, outcome="completed"', COMPLETED),
    *buckets(DURATION, f'{API2}, outcome="failed"', FAILED),
    s(f'{DURATION}_sum{{{API}, outcome="completed"}}', "0+3600x400"),
    s(f'{DURATION}_count{{{API}, outcome="completed"}}', "0+3x400"),
    s(f'{DURATION}_sum{{{API}, outcome="failed"}}', "0+300x400"),
    s(f'{DURATION}_count{{{API}, outcome="failed"}}', "0+2x400"),
    *buckets("ajet_runner_http_request_duration_seconds", f'{API}, method="GET", route="/v1/experiments", status="200"',
             {"0.01": 0, "0.025": 60, "+Inf": 60}),
    s(f'ajet_runner_http_request_duration_seconds_count{{{API}, method="GET", route="/v1/experiments", status="200"}}',
      "0+60x400"),
    *buckets("ajet_runner_worker_watch_loop_seconds", WORKER, {"0.005": 0, "0.01": 6, "+Inf": 6}),
    s(f'ajet_runner_worker_running_experiments{{{WORKER}, node="n1"}}', "2x400"),
    s(f'ajet_runner_worker_last_output_age_seconds{{{WORKER}, experiment="e1"}}', "30x400"),
    s(f'ajet_runner_worker_log_bytes_total{{{WORKER}, experiment="e1"}}', "0+600x400"),
    s(f"process_cpu_seconds_total{{{API}}}", "0+30x400"),
    s(f"process_resident_memory_bytes{{{API}}}", "100000000x400"),
    s('process_cpu_seconds_total{job="node-exporter", namespace="ml", instance="decoy"}', "0+600x400"),
    s('process_resident_memory_bytes{job="node-exporter", namespace="ml", instance="decoy"}', "7x400"),
    s(f'ajet_runner_stage_experiments{{{API}, stage="sweep", state="finished"}}', "3x400"),
    s(f'ajet_runner_stage_experiments{{{API}, stage="sweep", state="running"}}', "1x400"),
    s(f'ajet_runner_stage_experiments{{{API2}, stage="sweep", state="running"}}', "1x400"),  # the other replica
    s('ajet_runner_stage_experiments{job="ajet-runner", namespace="other", instance="x", stage="sweep", '
      'state="running"}', "9x400"),
    s(f'ajet_runner_stage_outcomes{{{API}, stage="sweep", outcome="completed"}}', "2x400"),
    s(f'ajet_runner_stage_outcomes{{{API}, stage="sweep", outcome="failed"}}', "1x400"),
    s(f'ajet_runner_stage_best_mean_reward{{{API}, stage="sweep"}}', "0.75x400"),
    s(f'ajet_runner_stage_best_mean_reward{{{API}, stage="base"}}', "0.5x400"),
    s(f"ajet_runner_worker_tree_cpu_seconds_total{{{WORKER}}}", "0+90x400"),
    s(f"ajet_runner_worker_tree_resident_memory_bytes{{{WORKER}}}", "500000000x400"),
]

E1 = f'experiment="e1", purpose="{PURPOSE}"'
E2 = 'experiment="e2", purpose="baseline"'
API_INSTANCE = 'instance="10.0.0.1:8080"'
WORKER_INSTANCE = 'instance="10.0.1.1:9101"'
STATES = [('{state="queued"}', 1), ('{state="running"}', 2)]
# (panel id, refId) -> expected [(labels, value)] at EVAL. Worked out by hand from the series above.
EXPECTED: dict[tuple[int, str], list[tuple[str, float]]] = {
    (2, "A"): STATES,
    (3, "A"): [('{queue="default"}', 3)],
    (4, "A"): [("{}", 1)],
    (4, "B"): [("{}", 1)],
    (5, "A"): [('{state="busy"}', 6), ('{state="free"}', 6), ('{state="total"}', 12)],
    (6, "A"): STATES,
    (7, "A"): [('{queue="default"}', 120)],
    (7, "B"): [("{}", 90)],  # node="" (any node may take them): Prometheus drops an empty label
    (8, "A"): [('{node="n1"}', 6), ('{node="n2"}', 0)],
    (8, "B"): [('{node="n1"}', 8), ('{node="n2"}', 4)],
    (9, "A"): [('{node="n1"}', 5)],
    (10, "A"): [('{node="n1"}', 2)],
    (12, "A"): [(f"{{{E1}}}", 0.5), (f"{{{E2}}}", 0.25)],
    (13, "A"): [(f'{{{E1}, k="1"}}', 0.4)],
    (14, "A"): [('{experiment="e1"}', 0.5)],
    (15, "A"): [('{experiment="e1"}', 1800), ('{experiment="e2"}', 100)],
    (15, "B"): [('{experiment="e1"}', 3600), ('{experiment="e2"}', 0)],
    (16, "A"): [(f'{{{E1}, node="n1", state="running"}}', 1), (f'{{{E2}, node="n1", state="running"}}', 1)],
    (16, "B"): [('{experiment="e1"}', 2)],
    (16, "C"): [('{experiment="e1"}', 20)],
    (18, "A"): [('{signature="cuda_oom", result="applied"}', 60)],  # one a minute
    (19, "A"): [('{from_state="running"}', 120)],
    (20, "A"): [('{outcome="completed"}', 60)],
    (21, "A"): [('{signature="cuda_oom"}', 60)],
    # 5 runs: 2 in (60, 300], 3 in (900, 1800]. Median: rank 2.5, half a run into the 3 of (900, 1800]:
    # 900 + 900 * 0.5/3 = 1050 s. (max by (le) across the outcomes says 240 s; see the test below.)
    (22, "A"): [("{}", 1050)],
    (22, "B"): [("{}", 1650)],  # rank 4.5: 900 + 900 * 2.5/3
    (22, "C"): [("{}", 1785)],  # rank 4.95: 900 + 900 * 2.95/3
    (22, "D"): [('{outcome="completed"}', 1200), ('{outcome="failed"}', 150)],
    (24, "A"): [("{}", 0.0175)],  # every request in (0.01, 0.025]: 0.01 + 0.015 * q
    (24, "B"): [("{}", 0.02425)],
    (24, "C"): [("{}", 0.02485)],
    (25, "A"): [('{route="/v1/experiments", status="200"}', 1)],
    (26, "A"): [(f"{{{WORKER_INSTANCE}}}", 0.00995)],
    (27, "A"): [('{experiment="e1"}', 30)],
    (28, "A"): [('{experiment="e1"}', 10)],
    (29, "A"): [(f"{{{API_INSTANCE}}}", 0.5)],
    (29, "B"): [(f"{{{WORKER_INSTANCE}}}", 1.5)],
    (30, "A"): [(f"{{{API_INSTANCE}}}", 100_000_000)],
    (30, "B"): [(f"{{{WORKER_INSTANCE}}}", 500_000_000)],
    (32, "A"): [('{stage="sweep", state="finished"}', 3), ('{stage="sweep", state="running"}', 1)],
    (32, "B"): [('{stage="sweep", outcome="completed"}', 2), ('{stage="sweep", outcome="failed"}', 1)],
    (33, "A"): [('{stage="sweep"}', 0.75), ('{stage="base"}', 0.5)],
}


def panel_queries() -> dict[tuple[int, str], str]:
    def walk(panels: list[dict[str, Any]]) -> Any:
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))

    queries = {}
    for panel in walk(json.loads(DASHBOARD.read_text())["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var in sorted(VARIABLES, key=len, reverse=True):
                expr = expr.replace(var, VARIABLES[var])
            assert "$" not in expr, f"panel {panel['title']}: unknown variable in {expr}"
            queries[(panel["id"], target["refId"])] = expr
    return queries


def samples(expected: list[tuple[str, float]]) -> list[dict[str, Any]]:
    return [{"labels": labels, "value": value} for labels, value in expected]


def run_promtool(tmp_path: Path, tests: list[dict[str, Any]], rules: Path | None = None) -> None:
    spec = {"rule_files": [str(rules)] if rules else [], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "promtool-test.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_panel_query_returns_the_expected_series(tmp_path: Path) -> None:
    queries = panel_queries()
    assert set(queries) == set(EXPECTED), "a panel query without an expectation here (or the reverse)"
    tests = [{"expr": queries[key], "eval_time": EVAL, "exp_samples": samples(EXPECTED[key])} for key in queries]
    run_promtool(tmp_path, [{"interval": "1m", "input_series": PANEL_SERIES, "promql_expr_test": tests}])


def test_the_median_is_wrong_with_max_by_le_and_the_check_notices(tmp_path: Path) -> None:
    """The old query's answer on the same series (240 s, not 1050 s): the panel test above can fail."""
    old = f'histogram_quantile(0.5, max by (le) (rate({DURATION}_bucket{{job="ajet-runner"}}[6h])))'
    run_promtool(tmp_path, [{"interval": "1m", "input_series": PANEL_SERIES,
                             "promql_expr_test": [{"expr": old, "eval_time": EVAL, "exp_samples": [
                                 {"labels": "{}", "value": 240}]}]}])
    with pytest.raises(AssertionError, match="1050|exp"):
        run_promtool(tmp_path, [{"interval": "1m", "input_series": PANEL_SERIES,
                                 "promql_expr_test": [{"expr": old, "eval_time": EVAL, "exp_samples": [
                                     {"labels": "{}", "value": 1050}]}]}])


def test_the_rules_file_passes_promtool_check() -> None:
    done = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def alert(name: str, series: list[dict[str, str]], quiet_at: str, fires_at: str,
          labels: list[dict[str, str]]) -> dict[str, Any]:
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": quiet_at, "alertname": name, "exp_alerts": []},
        {"eval_time": fires_at, "alertname": name, "exp_alerts": [
            {"exp_labels": lab, "exp_annotations": {"runbook_url": RUNBOOK + name.lower()}} for lab in labels]},
    ]}


def test_every_alert_fires_on_its_signal_and_not_before(tmp_path: Path) -> None:
    raw = yaml.safe_load(RULES.read_text())
    names = set()
    for group in raw["groups"]:
        for rule in group["rules"]:
            names.add(rule["alert"])
            rule["annotations"] = {"runbook_url": rule["annotations"]["runbook_url"]}
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(raw, allow_unicode=True, sort_keys=False))

    info = s(f'ajet_runner_experiment_info{{{API}, experiment="e1", purpose="{PURPOSE}", node="n1"}}', "1x60")
    running = s(f'ajet_runner_experiment_state{{{API}, experiment="e1", node="n1", state="running"}}', "1x60")
    cases = [
        # Silent since minute 0, growing 60 s a minute: > 900 s from minute 16, firing after 10 more.
        alert("AjetRunnerExperimentStalled",
              [s(f'ajet_runner_worker_last_output_age_seconds{{{WORKER}, experiment="e1"}}', "0+60x60"), running],
              "20m", "30m", [{"experiment": "e1", "severity": "warning"}]),
        # 1200 s limit, 60 s a minute: > 90% from minute 19 (pending 5 min), > 105% from minute 22 (10 min).
        alert("AjetRunnerExperimentNearMaxTime",
              [s(f'ajet_runner_experiment_elapsed_seconds{{{API}, experiment="e1", node="n1"}}', "0+60x60"),
               s(f'ajet_runner_experiment_max_seconds{{{API}, experiment="e1", node="n1"}}', "1200x60"), info, running],
              "22m", "25m", [{"experiment": "e1", "purpose": PURPOSE, "severity": "info"}]),
        alert("AjetRunnerExperimentOverMaxTime",
              [s(f'ajet_runner_experiment_elapsed_seconds{{{API}, experiment="e1", node="n1"}}', "0+60x60"),
               s(f'ajet_runner_experiment_max_seconds{{{API}, experiment="e1", node="n1"}}', "1200x60"), info, running],
              "30m", "35m", [{"experiment": "e1", "purpose": PURPOSE, "severity": "warning"}]),
        # 6 repairs an hour, exported by two replicas: still one alert per signature.
        alert("AjetRunnerRepeatedRepairs",
              [s(f'ajet_runner_repairs_total{{{API}, signature="cuda_oom", result="applied"}}', "0+0.1x120"),
               s(f'ajet_runner_repairs_total{{{API2}, signature="cuda_oom", result="applied"}}', "0+0.1x120")],
              "10m", "70m", [{"signature": "cuda_oom", "severity": "warning"}]),
        alert("AjetRunnerFailuresHigh",
              [s(f'ajet_runner_outcomes_total{{{API}, outcome="failed"}}', "0+0.1x120")],
              "10m", "70m", [{"severity": "warning"}]),
        alert("AjetRunnerWorkerDown",
              [s(f'ajet_runner_node_up{{{API}, node="n1"}}', "1x30"),
               s(f'ajet_runner_node_up{{{API}, node="n2"}}', "1x5 0x25")],
              "7m", "10m", [{"node": "n2", "severity": "critical"}]),
        alert("AjetRunnerWorkerHeartbeatLate",
              [s(f'ajet_runner_node_heartbeat_age_seconds{{{API}, node="n1"}}', "0+30x20")],
              "8m", "12m", [{"node": "n1", "severity": "warning"}]),
        alert("AjetRunnerQueueWaitingTooLong",
              [s(f'ajet_runner_queue_oldest_job_age_seconds{{{API}, queue="default"}}', "3500+60x20")],
              "5m", "10m", [{"queue": "default", "severity": "warning"}]),
        # Both replicas down from minute 6 (one of them down from minute 2: not the API down).
        alert("AjetRunnerApiDown",
              [s(f"up{{{API}}}", "1x5 0x20"), s(f"up{{{API2}}}", "1x1 0x25")],
              "8m", "10m", [{"job": "ajet-runner", "namespace": "ml", "severity": "critical"}]),
        # Two experiments wait for a node no worker has served for a while (the API's gauge from minute 4).
        alert("AjetRunnerQueuedForAbsentNode",
              [s(f'ajet_runner_queued_for_absent_node{{{API}, node="gone"}}', "0x3 2x20")],
              "3m", "8m", [{"node": "gone", "severity": "warning"}]),
        # One finish.flag not written at minute 11 (full disk): an alert while it is in the 15-minute window.
        alert("AjetRunnerResultWriteFailures",
              [s(f'ajet_runner_result_write_failures_total{{{API}, errno="ENOSPC"}}', "0x10 1x20")],
              "5m", "15m", [{"errno": "ENOSPC", "severity": "warning"}]),
        # No API target at all (another job is scraped fine).
        alert("AjetRunnerApiDown", [s('up{job="node-exporter", instance="n1"}', "1x20")],
              "2m", "5m", [{"job": "ajet-runner", "severity": "critical"}]),
    ]
    assert {c["alert_rule_test"][0]["alertname"] for c in cases} == names
    run_promtool(tmp_path, cases, rules)
