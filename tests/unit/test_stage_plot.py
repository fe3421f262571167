"""A stage at 4 and at 200 runs: labels, ties, seed groups and their bands, verdicts
(statemachine/comparison/stage_stats.py),
what a chart draws (resultdir/stage_series.py) and stage_plot.png itself, CJK labels included."""

from __future__ import annotations

import io
import subprocess
import warnings
from typing import Any

import pytest

from ajet_runner.resultdir.stage_series import TOP_N, stage_chart
from ajet_runner.statemachine.comparison.compare import ExperimentFacts, compare
from ajet_runner.statemachine.comparison.stage_stats import competition_ranks, seed_noise, short_names, verdicts
from ajet_runner.workers.report.stage_plot import render_stage_png


def run(exp_id: str, values: dict[str, Any], level: float, wiggle: float = 0.0, steps: int = 6) -> ExperimentFacts:
    evals = [{"step": s, "dataset": "val", "metrics": {"mean_reward": round(level * (1 - 0.5 ** (s + 1)) + wiggle, 6),
                                                      "task_pass_rate@1": level / 2}} for s in range(steps)]
    return ExperimentFacts(id=exp_id, purpose="p", outcome="completed", evaluations=evals, config=dict(values),
                           sweep=dict(values), source="results.json")


def grid(lrs: int, temps: int, seeds: int) -> list[ExperimentFacts]:
    out = []
    for a in range(lrs):
        for b in range(temps):
            for s in range(seeds):
                out.append(run(f"{a:02d}{b:02d}{s:02d}", {"ajet.trainer_common.lr": f"{a}e-6",
                                                         "ajet.rollout.temperature": b / 10, "ajet_sim.seed": s},
                               0.3 + 0.02 * a + 0.01 * b, wiggle=0.003 * (s % 3)))
    return out


def test_ranks_share_a_place_on_ties_and_noise_pools_within_groups() -> None:
    assert competition_ranks([0.9, 0.8, 0.8, 0.7, None]) == ([1, 2, 2, 4, None], [False, True, True, False, False])
    assert competition_ranks([0.50001, 0.50004]) == ([1, 1], [True, True])  # equal as shown (4 decimals)
    assert seed_noise([[1.0, 3.0], [10.0], [5.0, 7.0]]) == pytest.approx(2 ** 0.5)
    assert seed_noise([[1.0], [2.0]]) is None
    assert short_names(["a.lr", "b.lr", "x.temperature"]) == {"a.lr": "a.lr", "b.lr": "b.lr",
                                                             "x.temperature": "temperature"}


def test_a_verdict_says_within_noise_or_gives_the_difference_with_its_spread() -> None:
    values = {"a": {"k": "1"}, "b": {"k": "1"}, "c": {"k": "2"}, "d": {"k": "2"}}
    close = verdicts(["k"], values, {"a": 0.50, "b": 0.52, "c": 0.51, "d": 0.53}, 0.014, "mean_reward")[0]
    assert close.within_noise is True and "within seed noise" in close.text and close.best == "2"
    far = verdicts(["k"], values, {"a": 0.50, "b": 0.52, "c": 0.61, "d": 0.63}, 0.014, "mean_reward")[0]
    assert far.within_noise is False and "0.11 ± 0.014" in far.text and "beyond seed noise" in far.text
    unknown = verdicts(["k"], values, {"a": 0.5, "b": 0.5, "c": 0.6, "d": 0.6}, None, "mean_reward")[0]
    assert unknown.within_noise is None and "seed noise unknown" in unknown.text


def test_a_four_run_stage_labels_runs_by_what_differs_and_groups_seeds() -> None:
    c = compare("s", grid(2, 1, 2))
    assert [r.label for r in c.rows] == ["lr=0e-6, seed=0", "lr=0e-6, seed=1", "lr=1e-6, seed=0", "lr=1e-6, seed=1"]
    groups = c.group_curves["mean_reward"]
    assert [g.label for g in groups] == ["lr=1e-6", "lr=0e-6"] and [len(g.members) for g in groups] == [2, 2]
    step, mean, low, high, n = groups[0].points[-1]
    assert low < mean < high and n == 2
    assert c.seed_noise is not None and c.verdicts[0].key == "ajet.trainer_common.lr"
    chart = stage_chart(c, "mean_reward")
    assert chart.grouped and [s.label for s in chart.shown] == ["lr=1e-6", "lr=0e-6"] and not chart.rest


def test_identical_runs_are_ties_drawn_with_different_dashes() -> None:
    c = compare("s", [run("a", {"x.lr": "1"}, 0.5), run("b", {"x.lr": "2"}, 0.5), run("c", {"x.lr": "3"}, 0.4)])
    assert [(r.rank, r.tied) for r in c.ranking_final] == [(1, True), (1, True), (3, False)]
    chart = stage_chart(c, "mean_reward")
    first, second = chart.shown[:2]
    assert first.ties == [second.label] and second.ties == [first.label] and first.dash != second.dash


def test_two_hundred_runs_draw_the_best_groups_and_one_band_for_the_rest() -> None:
    c = compare("big", grid(5, 4, 10))
    assert len(c.rows) == 200 and len(c.group_curves["mean_reward"]) == 20
    chart = stage_chart(c, "mean_reward")
    assert len(chart.shown) == TOP_N and len(chart.rest) == 20 - TOP_N
    assert chart.rest_label == "the other 12 groups (120 runs): range" and chart.rest_band
    assert chart.shown[0].label == "temperature=0.3, lr=4e-6"  # the best level (keys in name order)
    png = render_stage_png(c)
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    assert Image.open(io.BytesIO(png)).size == (1400, 510)  # two panels side by side


def _cjk_fonts() -> bool:
    try:
        return bool(subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, check=False).stdout)
    except OSError:
        return False


@pytest.mark.skipif(not _cjk_fonts(), reason="no CJK font installed (scripts/ensure-test-deps.sh: fonts-noto-cjk)")
def test_chinese_labels_are_drawn_with_a_cjk_font_not_boxes() -> None:
    c = compare("zh", [run("a", {"ajet.prompt.style": "简洁回答"}, 0.5),
                       run("b", {"ajet.prompt.style": "逐步推理"}, 0.6)])
    assert c.rows[0].label == "style=简洁回答"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        png = render_stage_png(c)
    assert png is not None
    missing = [str(w.message) for w in caught if "missing from" in str(w.message) or "Glyph" in str(w.message)]
    assert not missing, missing


def test_a_label_names_four_keys_and_groups_still_tell_every_value_apart() -> None:
    def values(last: int, seed: int) -> dict[str, Any]:
        return {**{f"k{i}.v{i}": 1 for i in range(4)}, "k9.v9": last, "x.seed": seed}

    runs = [run(f"r{last}{seed}", values(last, seed), 0.3 + 0.1 * last) for last in (1, 2) for seed in (1, 2)]
    other = run("z", {**{f"k{i}.v{i}": 2 for i in range(4)}, "k9.v9": 1, "x.seed": 1}, 0.1)
    c = compare("s", [*runs, other])
    assert c.rows[0].label == "v0=1, v1=1, v2=1, v3=1, +2 more"
    groups = c.group_curves["mean_reward"]
    assert sorted(len(g.members) for g in groups) == [1, 2, 2]  # k9.v9=1 and =2 stay apart


def test_a_plot_drawn_from_the_same_comparison_is_kept_and_any_other_is_drawn_again(tmp_path: Any) -> None:
    from ajet_runner.workers.report.stage_plot import digest_of, plot_digest, write_stage_plot

    c = compare("s", grid(2, 1, 2))
    path = tmp_path / "stage_plot.png"
    path.write_bytes(render_stage_png(c) or b"")  # a plot without its digest (an older version's): drawn again
    assert digest_of(path) == ""
    assert write_stage_plot(path, c) and digest_of(path) == plot_digest(c)
    drawn = path.stat().st_ino
    assert write_stage_plot(path, c) and path.stat().st_ino == drawn  # the same comparison: kept as it is
    other = compare("s", grid(2, 1, 3))
    assert write_stage_plot(path, other) and path.stat().st_ino != drawn and digest_of(path) == plot_digest(other)


def test_ties_are_shown_as_ties_on_the_stage_page_its_chart_and_the_stage_report() -> None:
    """Two runs with the same final value share rank =1 (not 1 and 2) in the page's ranking, the chart's legend
    says which curve each hides behind, and the stage report marks both =1."""
    import re
    from types import SimpleNamespace

    from ajet_runner.service.ui.pages import fragment
    from ajet_runner.service.ui.stage_chart import stage_chart_svg
    from ajet_runner.service.ui.stage_pages import shown_purpose
    from ajet_runner.workers.report.stage_report import render_stage_report

    c = compare("s", [run("a", {"x.lr": "1"}, 0.5), run("b", {"x.lr": "2"}, 0.5), run("c", {"x.lr": "3"}, 0.4)])
    svg = stage_chart_svg(stage_chart(c, "mean_reward"))
    assert re.findall(r'class="tie">([^<]*)', str(svg)) == ["= tie with lr=2", "= tie with lr=1"]
    summary = SimpleNamespace(name="s", states={"finished": 3}, outcomes={"completed": 3})
    html = fragment("stage.html", s=summary, c=c, charts=[svg], metric="mean_reward", rows={r.id: r for r in c.rows},
                    short=short_names(c.differing_keys), purposes={r.id: shown_purpose(r.purpose) for r in c.rows},
                    request=None, viewer=None, csrf="")
    ranking = html[html.index('id="ranking"'):].split("</table>", 1)[0]
    assert re.findall(r'<tr data-id="(\w)"( class="tied")?><td data-sort="\d">(=?\d)</td>', ranking) == [
        ("a", ' class="tied"', "=1"), ("b", ' class="tied"', "=1"), ("c", "", "3")], ranking
    report = render_stage_report(c, ".", False, 0.0)
    assert re.findall(r"^\| (=?\d) \| `(\w)` \|", report, flags=re.M)[:3] == [("=1", "a"), ("=1", "b"), ("3", "c")]
