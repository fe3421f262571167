"""One vocabulary of metrics (statemachine/metric_vocabulary.py): a new headline metric is a change to that
module plus the parsers that recognise its raw key. No other product module spells a headline metric's name
in a string (docstrings aside: prose may name them), and the dashboard charts each headline gauge."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ajet_runner.statemachine import metric_vocabulary as vocab

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("statemachine", "store", "workers", "service", "cli", "resultdir", "logsetup")
VOCABULARY = Path("statemachine/metric_vocabulary.py")
# The parsers that recognise the trainer's raw keys (`TGC@4`, `pass@1`, `val-core/...`) by patterns that name them.
PARSERS = {Path("statemachine/logs/results.py"), Path("statemachine/logs/steplines.py"),
           Path("statemachine/logs/metrics.py")}
SPELLED = re.compile("|".join(re.escape(h.name.split("@")[0]) for h in vocab.HEADLINE))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def spellings(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string literal (f-string parts too) that names a headline metric, docstrings aside."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and SPELLED.search(node.value)]


def test_the_check_finds_a_spelling_and_passes_prose_in_a_docstring() -> None:
    source = 'def f():\n    """Uses mean_reward."""\n    return x.get("mean_reward"), f"best {y}task_pass_rate@1"\n'
    assert [line for line, _ in spellings(source)] == [3, 3]


def test_no_product_module_but_the_vocabulary_and_the_parsers_spells_a_headline_metric() -> None:
    found = []
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel == VOCABULARY or rel in PARSERS:
                continue
            found += [f"{rel}:{line}: {text[:70]!r}" for line, text in spellings(path.read_text(encoding="utf-8"))]
    assert not found, "spell these with statemachine/metric_vocabulary.py:\n" + "\n".join(found)


def test_the_dashboard_charts_each_headline_gauge() -> None:
    dashboard = json.loads((REPO / "helm/ajet-runner/dashboards/ajet-runner.json").read_text(encoding="utf-8"))
    exprs = " ".join(t.get("expr", "") for p in dashboard["panels"] for t in p.get("targets", []))
    for headline in vocab.HEADLINE:
        assert re.search(rf"\b{headline.gauge}\{{", exprs), f"no dashboard panel charts {headline.gauge}"
    assert re.search(rf"\b{vocab.STAGE_BEST_GAUGE}\{{", exprs)


@pytest.mark.parametrize(("name", "label"), [("mean_reward", "reward"), ("task_pass_rate@4", "pass@4"),
                                             ("total_tasks", "tasks"), ("val-core/x/acc", "val-core/x/acc")])
def test_short_labels(name: str, label: str) -> None:
    assert vocab.short_label(name) == label


def test_direction_and_charted_order() -> None:
    assert vocab.higher_is_better("mean_reward") and vocab.higher_is_better("gsm8k/TGC@4")
    assert not vocab.higher_is_better("std_reward") and not vocab.ranked_metric("num_pass_n_tasks")
    assert vocab.chart_metrics(["task_pass_rate@4", "x", "task_pass_rate@1", "mean_reward",
                                "task_pass_rate@4-all-pass"]) == ["mean_reward", "task_pass_rate@1", "task_pass_rate@4"]
    assert all(vocab.higher_is_better(m) for m in (*vocab.PLATEAU_METRICS, *vocab.DELTA_METRICS))
