"""The console's renderers and session cookies: untrusted text never becomes markup, cookies expire and die
with their token."""

from __future__ import annotations

import time
from typing import Any

from ajet_runner.service.api.auth import TokenSet
from ajet_runner.service.ui import html as render
from ajet_runner.service.ui.session import Sessions, safe_next
from ajet_runner.statemachine.models import Evaluation


def test_markdown_keeps_no_raw_html_and_no_script_links() -> None:
    html = str(render.markdown(
        "# T\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n"
        "[bad](javascript:alert(3)) [ok](https://example.org) [log](logs/attempt-1.log) "
        "[secret](../../etc/passwd)\n\n![plot](reward_plot.png)\n\n```diff\n-a: 1\n+a: <b>2</b>\n```\n", "abc"))
    assert "<script>" not in html and "<img src=x" not in html and "<b>2</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;2&lt;/b&gt;" in html
    assert 'href="javascript' not in html and "<a>secret</a>" in html  # refused or dropped, never linked
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">ok</a>' in html
    assert '<a href="#log">log</a>' in html
    assert '<img src="/ui/experiments/abc/files/reward_plot.png" alt="plot" />' in html
    assert '<span class="d-add">+a: &lt;b&gt;2&lt;/b&gt;</span>' in html and '<span class="d-del">-a: 1</span>' in html


def _stored(rows: list[dict[str, Any]]) -> list[Evaluation]:
    """Evaluations read from their stored form, as the console reads them from the evaluation events."""
    return [e for row in rows if (e := Evaluation.from_json(row)) is not None]


def test_chart_escapes_names_and_keeps_the_latest_value_per_step() -> None:
    evals = _stored([{"step": 0, "dataset": "<x>", "metrics": {"mean_reward": 0.2}},
                     {"step": 0, "dataset": "<x>", "metrics": {"mean_reward": 0.3}},
                     {"step": 2, "dataset": "y",
                      "metrics": {"mean_reward": "nan", "task_pass_rate@1": 0.5, "other": 9}}])
    svg = str(render.chart(evals))
    assert "<x>" not in svg and "&lt;x&gt;: mean_reward step 0: 0.3000" in svg and "0.2000" not in svg
    assert "other" not in svg and "y: task_pass_rate@1" in svg
    assert "No evaluation yet" in str(render.chart([]))


def test_session_cookie_expires_and_dies_with_its_token() -> None:
    tokens = TokenSet(env_value="old,new")
    s = Sessions(tokens, insecure=False, max_age=60)
    cookie = s.issue("old")
    assert s._from_cookie(cookie, time.time()) is not None
    assert s._from_cookie(cookie, time.time() + 61) is None  # expired
    expires, nonce, sig = cookie.split(".")
    assert s._from_cookie(f"{int(expires) + 1000}.{nonce}.{sig}", time.time()) is None  # tampered expiry
    tokens.env_value = "new"  # rotation: the old token is dropped
    assert s._from_cookie(cookie, time.time()) is None
    assert s._from_cookie(s.issue("new"), time.time()) is not None


def test_next_is_never_an_open_redirect() -> None:
    assert safe_next("/ui/experiments/x") == "/ui/experiments/x"
    for bad in ("https://evil.example/", "//evil.example/ui/", "/v1/experiments", "/ui/\\evil", None, ""):
        assert safe_next(bad) == "/ui/"


def test_chart_has_whole_step_ticks_a_legend_below_and_the_plot_colours() -> None:
    import re

    from ajet_runner.resultdir.palette import PALETTE

    metrics = {"mean_reward": 1 / 300, "task_pass_rate@1": 1 / 250, "task_pass_rate@4": 1 / 210}
    evals = _stored([{"step": s, "dataset": "main", "metrics": {**{k: s * v for k, v in metrics.items()},
                                                                "num_all_success_tasks": 67,
                                                                "task_pass_rate@4-all-pass": 0.5}}
                     for s in (0, 41, 82, 123, 164, 205)])
    svg = str(render.chart(evals))
    ticks = [t for t in re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', svg)]
    assert ticks == ["0", "50", "100", "150", "200"]  # never 102.5
    assert render.step_ticks(0, 3) == [0, 1, 2, 3] and render.step_ticks(7, 7) == [7]
    swatches = re.findall(r'<line class="swatch"[^>]*y1="([\d.]+)"[^>]*stroke="(#[0-9a-f]{6})"', svg)
    assert [c for _, c in swatches] == list(PALETTE[:3])  # mean_reward, @1, @4: the plot's colours, in order
    lowest_point = max(float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', svg))
    assert all(float(y) > lowest_point + 20 for y, _ in swatches), "the legend sits on the lines"
    assert render.number(67) == render.number(67.0) == "67" and render.number(0.5) == "0.5000"


def test_a_relaunched_runs_evaluations_show_their_attempt_in_the_table_and_the_chart() -> None:
    import re

    from ajet_runner.service.ui.pages import fragment
    # attempt 1 evaluated 0, 2, 4; attempt 2 (resumed at 2) evaluated 2, 4, 6: the same steps twice
    evals = _stored([{"step": s, "dataset": "gsm8k", "metrics": {"mean_reward": r}, "attempt": a}
                     for a, s, r in ((1, 0, 0.1), (1, 2, 0.2), (1, 4, 0.3), (2, 2, 0.25), (2, 4, 0.35), (2, 6, 0.4))])
    svg = str(render.chart(evals))
    assert re.findall(r'class="segment" data-attempt="(\d)"', svg) == ["1", "2"]  # one piece per attempt
    assert "attempt 2</text>" in svg and "mean_reward (attempt 2) step 2: 0.2500" in svg
    assert "mean_reward (attempt 1) step 2: 0.2000" in svg  # attempt 1's point is kept, not overwritten
    html = fragment("_evals.html", evals=evals, chart=svg, metric_keys=["mean_reward"])
    head = html.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert "<th>step</th><th>attempt</th><th>dataset</th>" in head
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>gsm8k</td>", html)
    assert rows == [("0", "1"), ("2", "1"), ("4", "1"), ("2", "2"), ("4", "2"), ("6", "2")]
    one = fragment("_evals.html", evals=evals[:3], chart="", metric_keys=["mean_reward"])
    assert "<th>attempt</th>" not in one  # a single attempt needs no column
    relaunched = fragment("_evals.html", evals=evals[3:], chart="", metric_keys=["mean_reward"])
    assert "<th>attempt</th>" in relaunched  # all from attempt 2 (attempt 1 evaluated nothing): still named
    assert re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td>", relaunched) == [("2", "2"), ("4", "2"), ("6", "2")]
    unknown = _stored([{"step": 0, "dataset": "d", "metrics": {"mean_reward": 0.1}}])
    assert "<th>attempt</th>" not in fragment("_evals.html", evals=unknown, chart="", metric_keys=["mean_reward"])
