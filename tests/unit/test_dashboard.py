"""The Grafana dashboard and the Prometheus alert rules use only metrics ajet-runner exports, in valid PromQL.

Every expression is parsed with a real PromQL parser (promql-parser), so label names, functions and keywords
never pass for metric names, and a syntax error fails the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from ajet_runner.service import metric_names as metric_names_module
from ajet_runner.service.metric_names import EXPORTED_METRICS

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "ajet-runner"
DASHBOARD = CHART_DIR / "dashboards" / "ajet-runner.json"
RULES = CHART_DIR / "alerts" / "ajet-runner-rules.yaml"
RUNBOOK = CHART_DIR.parents[1] / "docs" / "runbook.md"
RUNBOOK_BASE = "https://github.com/ajet-runner/ajet-runner/blob/main/docs/runbook.md#"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SEVERITIES = {"info", "warning", "critical"}

# Grafana's built-in interval variables become durations; user variables only appear inside label values.
GRAFANA_DURATIONS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")
# metric_names.py marks histograms in a comment ("# histogram ..."); only those have _bucket/_sum/_count series.
HISTOGRAMS = set(re.findall(r'"(\w+)",\s*#\s*histogram', Path(metric_names_module.__file__).read_text()))


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def load_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) for every panel target and every query variable's selector."""
    found = [
        (f"panel {panel['title']!r} {target['refId']}", target["expr"])
        for panel in all_panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            match = LABEL_VALUES.match(var["query"]["query"])
            assert match, f"variable {var['name']}: not a label_values() query"
            found.append((f"variable {var['name']}", match["selector"]))
    return found


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """(metric name, {label: matched value}) of every vector selector in an expression."""
    for variable, duration in GRAFANA_DURATIONS.items():
        expr = expr.replace(variable, duration)
    found: list[tuple[str, dict[str, str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append((node.name, {m.name: m.value for m in node.matchers.matchers}))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def metric_names(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (raises ValueError on a syntax error)."""
    for variable, duration in GRAFANA_DURATIONS.items():
        expr = expr.replace(variable, duration)
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def unknown_metrics(expr: str) -> set[str]:
    unknown = set()
    for name in metric_names(expr):
        base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        plain = name in EXPORTED_METRICS and name not in HISTOGRAMS  # a bare histogram name has no series
        if not plain and base not in HISTOGRAMS:
            unknown.add(name)
    return unknown


def test_the_checker_catches_unknown_names_and_bad_syntax() -> None:
    """The checks below can fail: a misspelt metric is reported; labels and functions are not."""
    assert {
        "ajet_runner_run_duration_seconds",
        "ajet_runner_http_request_duration_seconds",
        "ajet_runner_worker_watch_loop_seconds",
    } == HISTOGRAMS
    expr = "histogram_quantile(0.9, sum by (le, node) (rate(ajet_runner_run_duration_seconds_bucket[5m])))"
    assert unknown_metrics(expr) == set()
    assert unknown_metrics("max by (state) (ajet_runner_experiment) > 0 and on (state) up") == {
        "ajet_runner_experiment",
        "up",
    }
    assert unknown_metrics("ajet_runner_node_up_bucket + ajet_runner_repairs_total_count") == {
        "ajet_runner_node_up_bucket",
        "ajet_runner_repairs_total_count",
    }
    assert unknown_metrics("ajet_runner_http_request_duration_seconds") == {"ajet_runner_http_request_duration_seconds"}
    with pytest.raises(ValueError):
        metric_names("max by (state (ajet_runner_experiments)")


def test_dashboard_uses_only_exported_metrics() -> None:
    exprs = dashboard_exprs(load_dashboard())
    assert len(exprs) >= 30
    problems = {where: sorted(unknown_metrics(expr)) for where, expr in exprs if unknown_metrics(expr)}
    assert not problems


def test_dashboard_covers_the_metrics_that_matter() -> None:
    used = set().union(*(metric_names(expr) for _, expr in dashboard_exprs(load_dashboard())))
    for name in (
        "ajet_runner_experiments",
        "ajet_runner_queue_jobs",
        "ajet_runner_node_up",
        "ajet_runner_node_gpus",
        "ajet_runner_experiment_mean_reward",
        "ajet_runner_experiment_task_pass_rate",
        "ajet_runner_experiment_elapsed_seconds",
        "ajet_runner_experiment_max_seconds",
        "ajet_runner_repairs_total",
        "ajet_runner_transitions_total",
        "ajet_runner_outcomes_total",
        "ajet_runner_run_duration_seconds_bucket",
        "ajet_runner_http_request_duration_seconds_bucket",
        "ajet_runner_worker_watch_loop_seconds_bucket",
        "ajet_runner_worker_last_output_age_seconds",
        "ajet_runner_stage_experiments",
        "ajet_runner_stage_outcomes",
        "ajet_runner_stage_best_mean_reward",
    ):
        assert name in used, name


def test_dashboard_template_variables_and_datasource() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name, label in {"namespace": "namespace", "job": "job", "worker_job": "job", "purpose": "purpose",
                        "experiment": "experiment"}.items():
        var = variables[name]
        assert var["type"] == "query" and var["multi"] and var["includeAll"]
        assert LABEL_VALUES.match(var["query"]["query"])["label"] == label
    assert "$purpose" in variables["experiment"]["query"]["query"]
    for name in ("purpose", "experiment"):  # the info series carries both
        assert "ajet_runner_experiment_info{" in variables[name]["query"]["query"]
    # "All" of a job variable is the jobs it lists, never `.*`: process_* series of other jobs stay out.
    assert "allValue" not in variables["job"] and "allValue" not in variables["worker_job"]
    assert "$namespace" in variables["job"]["query"]["query"]

    panels = [p for p in all_panels(dashboard["panels"]) if p["type"] != "row"]
    assert len({p["id"] for p in all_panels(dashboard["panels"])}) == len(list(all_panels(dashboard["panels"])))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]

    per_experiment = [p for p in panels if p["title"] in {"mean_reward", "task_pass_rate@k"}]
    assert len(per_experiment) == 2
    for panel in per_experiment:
        expr = panel["targets"][0]["expr"]
        assert 'purpose=~"$purpose"' in expr and 'experiment=~"$experiment"' in expr
        assert "* on (experiment) group_left (purpose)" in expr


def test_every_dashboard_query_is_scoped_by_job_and_namespace() -> None:
    """Each selector names the API's job ($job) or the workers' ($worker_job), and $namespace: a shared
    Prometheus with other apps' process_* series, or two releases, never leaks into a panel."""
    worker_metrics = {n for n in EXPORTED_METRICS if n.startswith("ajet_runner_worker_")}
    for where, expr in dashboard_exprs(load_dashboard()):
        if where in ("variable namespace", "variable job", "variable worker_job"):
            continue
        for name, matchers in selectors(expr):
            base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
            want = "$worker_job" if base in worker_metrics else "$job"
            assert matchers.get("job") == want, f"{where}: {name} not scoped by job=~{want!r}"
            assert matchers.get("namespace") == "$namespace", f"{where}: {name} not scoped by namespace"


def test_purpose_is_only_selected_on_the_info_series() -> None:
    rules = [(r["alert"], r["expr"]) for r in load_rules()]
    for where, expr in dashboard_exprs(load_dashboard()) + rules:
        for name, matchers in selectors(expr):
            if "purpose" in matchers:
                assert name == "ajet_runner_experiment_info", f"{where}: purpose matcher on {name}"
        for grouping in re.findall(r"by \(([^)]*)\) \((\w+)", expr):
            if "purpose" in grouping[0]:
                assert grouping[1] == "ajet_runner_experiment_info", f"{where}: by ({grouping[0]}) {grouping[1]}"


def test_quantiles_sum_the_buckets_of_every_series() -> None:
    """histogram_quantile over `sum by (le)` of per-series rates; a `max by (le)` across outcomes (or
    replicas) picks bucket counts from different series and gives wrong quantiles."""
    quantiles = [(w, e) for w, e in dashboard_exprs(load_dashboard()) if "histogram_quantile" in e]
    assert len(quantiles) >= 7
    for where, expr in quantiles:
        assert re.search(r"histogram_quantile\([\d.]+, sum by \(le(, instance)?\) \(rate\(", expr), where


def test_alert_rules_use_only_exported_metrics() -> None:
    rules = load_rules()
    # `up` is Prometheus' own per-target series: only the API-down alert may use it.
    allowed = {"AjetRunnerApiDown": {"up"}}
    problems = {r["alert"]: sorted(unknown_metrics(r["expr"]) - allowed.get(r["alert"], set())) for r in rules}
    assert not {k: v for k, v in problems.items() if v}


def test_alert_rules_are_complete() -> None:
    rules = load_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]
        assert rule["annotations"]["runbook_url"] == RUNBOOK_BASE + rule["alert"].lower(), rule["alert"]

    signals = {
        "AjetRunnerExperimentStalled": "ajet_runner_worker_last_output_age_seconds",
        "AjetRunnerWorkerDown": "ajet_runner_node_up",
        "AjetRunnerWorkerHeartbeatLate": "ajet_runner_node_heartbeat_age_seconds",
        "AjetRunnerRepeatedRepairs": "ajet_runner_repairs_total",
        "AjetRunnerQueueWaitingTooLong": "ajet_runner_queue_oldest_job_age_seconds",
        "AjetRunnerExperimentNearMaxTime": "ajet_runner_experiment_max_seconds",
        "AjetRunnerExperimentOverMaxTime": "ajet_runner_experiment_max_seconds",
        "AjetRunnerApiDown": "up",
    }
    by_name = {r["alert"]: r for r in rules}
    for alert, metric in signals.items():
        assert metric in metric_names(by_name[alert]["expr"]), alert
    assert "increase(ajet_runner_repairs_total[1h])" in by_name["AjetRunnerRepeatedRepairs"]["expr"]
    api_down = by_name["AjetRunnerApiDown"]["expr"]
    assert 'absent(up{job="ajet-runner"})' in api_down
    assert by_name["AjetRunnerApiDown"]["labels"]["severity"] == "critical"


def test_every_alert_has_a_runbook_section() -> None:
    """docs/runbook.md holds one `## <AlertName>` per alert (GitHub's anchor: the name lower-cased),
    saying what it means and what to do; no section for an alert that does not exist."""
    runbook = RUNBOOK.read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", runbook, flags=re.M | re.S))
    assert set(sections) == {r["alert"] for r in load_rules()}
    for alert, body in sections.items():
        assert "**Means**" in body and "**Do**" in body, alert
