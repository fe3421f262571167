"""The console's evaluations chart and attach box in a real headless Chromium, on real runs: the legend's
swatches have distinct computed colours, the ones of reward_plot.png, and sit below the plotted lines; step
ticks are whole numbers; the attach box shows underscores. With $AJET_RUNNER_SCREENSHOTS set it also takes the
README's pictures of experiments with real purposes (AJET_RUNNER_SCREENSHOTS=docs/screenshots)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.integration.browser import headless_chromium, page_wait, screenshot
from tests.integration.scenario import make, wait_for
from tests.integration.test_api import TOKEN
from tests.integration.ui_harness import demo, running_console

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PURPOSE = ("GSM8K GRPO baseline on Qwen2.5-7B: does a validation every 2 steps show mean_reward rising "
           "from the step-0 baseline?")
OOM_PURPOSE = "Longer rollouts (response_length 4096) on 4 GPUs: find the micro-batch that fits after an OOM"


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def test_chart_legend_colours_and_attach_box_in_a_real_browser(redis_url, tmux_socket, tmp_path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    from ajet_runner.resultdir.palette import PALETTE

    shots = Path(os.environ.get("AJET_RUNNER_SCREENSHOTS") or tmp_path / "screenshots")
    clean = demo(tmp_path, "clean", PURPOSE)
    repaired = make("oom_first_attempt", tmp_path / "oom")  # its purpose line, in English for the picture
    repaired.blueprint.write_text(re.sub(r"^1\. \[exp_purpose\].*$", f"1. [exp_purpose] {OOM_PURPOSE}",
                                         repaired.blueprint.read_text(), count=1, flags=re.M))
    with headless_chromium() as driver, running_console(redis_url, tmux_socket, tmp_path) as console, \
            console.server.client() as api:
        ids = [api.submit(sc.blueprint.read_text())["id"] for sc in (clean, repaired)]
        for exp_id in ids:
            wait_for(lambda i=exp_id: api.get(i)["state"] == "finished", 180, "the runs to finish")
        wait = page_wait(driver, 60)
        driver.get(f"{console.url}/ui/login")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "exp-table")))
        screenshot(driver, shots / "experiments.png")

        driver.get(f"{console.url}/ui/experiments/{ids[0]}")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#chart svg .swatch")))
        swatches = driver.find_elements(By.CSS_SELECTOR, "#chart svg .swatch")
        colours = [driver.execute_script("return getComputedStyle(arguments[0]).stroke", s) for s in swatches]
        assert len(colours) >= 2 and len(set(colours)) == len(colours), colours  # distinct
        assert colours == [_rgb(c) for c in PALETTE[:len(colours)]], colours  # reward_plot.png's, in order
        lines = driver.find_elements(By.CSS_SELECTOR, "#chart svg polyline")
        line_colours = [driver.execute_script("return getComputedStyle(arguments[0]).stroke", p) for p in lines]
        assert line_colours == colours  # each legend entry is the colour of its line
        lowest_line = max(p.rect["y"] + p.rect["height"] for p in lines)
        assert all(s.rect["y"] > lowest_line for s in swatches), "the legend sits on the lines"
        ticks = [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#chart svg text.tick")]
        assert ticks and all(t.isdigit() for t in ticks), ticks

        attach = driver.find_element(By.ID, "attach-cmd")
        assert "_" in attach.get_attribute("value")
        room = driver.execute_script(
            "const s = getComputedStyle(arguments[0]); return [parseFloat(s.lineHeight), parseFloat(s.fontSize)]",
            attach)
        assert room[0] >= 1.4 * room[1], room  # the underscores' row is inside the box
        assert "Mono" in driver.execute_script("return getComputedStyle(arguments[0]).fontFamily", attach)
        driver.execute_script("document.getElementById('chart').scrollIntoView()")
        driver.find_element(By.ID, "chart").screenshot(str(tmp_path / "chart.png"))
        driver.execute_script("window.scrollTo(0, 0)")
        attach.screenshot(str(tmp_path / "attach.png"))
        screenshot(driver, shots / "experiment.png", colours=128)

        # The repaired run (a CUDA OOM at step 3, relaunched from its step-2 checkpoint): every evaluation row
        # names its attempt, and the chart draws each attempt's piece with a mark where the relaunch starts.
        driver.get(f"{console.url}/ui/experiments/{ids[1]}")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "table.evals tbody tr")))
        head = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "table.evals thead th")]
        assert head[:3] == ["step", "attempt", "dataset"], head
        rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")][:2]
                for tr in driver.find_elements(By.CSS_SELECTOR, "table.evals tbody tr")]
        assert {attempt for _, attempt in rows} == {"1", "2"}, rows
        assert [attempt for _, attempt in rows] == sorted(attempt for _, attempt in rows), rows  # attempt order
        pieces = {p.get_attribute("data-attempt") for p in
                  driver.find_elements(By.CSS_SELECTOR, "#chart svg polyline.segment")}
        assert pieces == {"1", "2"}, pieces
        assert [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#chart svg text.attempt-label")] == [
            "attempt 2"]
