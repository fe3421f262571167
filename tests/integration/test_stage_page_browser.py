"""The console's stage page in a real headless Chromium at 1366 px, against a real `serve` on finished runs
planted in Redis and on disk (bench/bench_stage.py's grid: results.json, config.original.yaml, records).

A 4-run stage (2 lr x 2 seeds, a Chinese purpose): a readable run column naming what differs, the purpose one
line with the whole on hover, curves scaled to the data with the seed groups' bands, a verdict per compared
key, and tables that sort by a click. The purpose is drawn with a CJK font (Chromium's own record of the fonts
it used for that text). A 200-run stage: the same page stays readable (at most TOP_N + 1 legend entries per
chart) and a human-sized page. Screenshots go to $AJET_RUNNER_SCREENSHOTS when set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ajet_runner.resultdir.stage_series import TOP_N
from ajet_runner.store.store import Store
from bench.bench_stage import plant
from tests.integration.browser import headless_chromium, page_wait, screenshot
from tests.integration.test_api import TOKEN, running_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PURPOSE = "比较两个学习率在 GSM8K 上的效果，每个学习率两个随机种子（研究负责人第二阶段的计划）"
CELLS = [{"ajet.trainer_common.lr": lr, "ajet_sim.seed": seed} for lr in ("1e-6", "2e-5") for seed in (1, 2)]


def _cjk_fonts() -> bool:
    if not shutil.which("fc-list"):
        return False
    return bool(subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, check=False).stdout.strip())


def server_icon(url: str) -> str:
    import httpx

    got = httpx.get(f"{url}/favicon.ico", timeout=10)
    assert got.status_code == 200, got.status_code
    return got.headers["content-type"]


def _fonts_used(driver, selector: str) -> list[str]:
    """The platform fonts Chromium drew the element's text with (DevTools CSS.getPlatformFontsForNode)."""
    root = driver.execute_cdp_cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    node = driver.execute_cdp_cmd("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    driver.execute_cdp_cmd("CSS.enable", {})
    fonts = driver.execute_cdp_cmd("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return [f["familyName"] for f in fonts if f.get("glyphCount")]


def test_the_stage_page_at_1366_px_small_and_at_200_runs(redis_url, tmp_path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    shots = Path(os.environ.get("AJET_RUNNER_SCREENSHOTS") or tmp_path / "screenshots")
    store = Store.from_url(redis_url)
    plant(store, tmp_path / "runs", "grid200", 200, 41)
    small = plant(store, tmp_path / "runs", "lr-study", 4, 21, cells=CELLS, purpose=PURPOSE)  # the newest
    with running_server(redis_url, tmp_path / "serve.log") as server, headless_chromium() as driver:
        driver.set_window_size(1366, 900)
        wait = page_wait(driver, 60)
        driver.get(f"{server.url}/ui/login")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "exp-table")))
        cell = driver.find_element(By.CSS_SELECTOR, f"#row-{small[3]} .purpose")  # the list cuts it to a line
        assert PURPOSE in cell.text and cell.size["height"] < 40 and cell.find_element(
            By.CSS_SELECTOR, ".cut").get_attribute("title").endswith(PURPOSE)

        driver.get(f"{server.url}/ui/stages/lr-study")
        wait.until(ec.presence_of_element_located((By.ID, "stage-table")))
        rows = driver.find_elements(By.CSS_SELECTOR, "#stage-table tbody tr")
        assert len(rows) == 4
        run = rows[0].find_element(By.CSS_SELECTOR, "td.run")
        assert run.find_element(By.CSS_SELECTOR, ".run-label").text == "lr=1e-6, seed=1"
        assert run.find_element(By.CSS_SELECTOR, "a.run-id").text == small[0]
        assert run.size["width"] >= 150, run.size  # readable, not squeezed to a few characters
        cut = rows[0].find_element(By.CSS_SELECTOR, "td.purpose .cut")
        assert cut.get_attribute("title").endswith(PURPOSE) and cut.size["height"] < 30  # one line, whole on hover
        assert driver.execute_script("return document.body.scrollHeight") < 3000

        # Curves scaled to the data (the planted values are 0.2-0.5: not a 0-1 axis), one mean per lr with its
        # band across the two seeds; the legend names what differs.
        chart = driver.find_element(By.CSS_SELECTOR, "#stage-charts svg.stage-chart[data-metric=mean_reward]")
        assert float(chart.get_attribute("data-y-min")) > 0.1 and float(chart.get_attribute("data-y-max")) < 0.6
        assert len(chart.find_elements(By.CSS_SELECTOR, "polyline.series")) == 2
        assert len(chart.find_elements(By.CSS_SELECTOR, "polygon.seed-band")) == 2
        legend = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "ol.legend[data-metric=mean_reward] li")]
        assert legend[0].startswith("lr=2e-5") and legend[0].endswith("· 2 runs"), legend
        verdict = driver.find_element(By.CSS_SELECTOR, "#verdicts li[data-key='ajet.trainer_common.lr']").text
        assert verdict.startswith("ajet.trainer_common.lr: 2e-5 best") and "seed noise" in verdict, verdict

        # Sorting: by the final value, both ways; by the run column.
        header = driver.find_element(By.XPATH, "//table[@id='stage-table']//th[normalize-space()='mean_reward final']")

        def finals() -> list[float]:
            return [float(td.get_attribute("data-sort")) for td in
                    driver.find_elements(By.CSS_SELECTOR, "#stage-table tbody td.metric-final")]

        header.click()
        assert finals() == sorted(finals())
        header.click()
        assert finals() == sorted(finals(), reverse=True)
        assert header.get_attribute("aria-sort") == "descending"
        driver.find_element(By.XPATH, "//table[@id='ranking']//th[normalize-space()='rank']").click()
        ranks = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#ranking tbody tr td:first-child")]
        assert ranks == ["1", "2", "3", "4"], ranks

        if _cjk_fonts():  # the Chinese purpose in a CJK font, not boxes
            used = _fonts_used(driver, f"#stage-row-{small[0]} td.purpose .cut")
            assert any("CJK" in f or "Hei" in f or "Han" in f for f in used), used
        driver.execute_script("window.scrollTo(0, 0)")
        screenshot(driver, shots / "stage.png", colours=128, width=1366)
        logged = [e.get("message", "") for e in driver.get_log("browser")]
        assert not [m for m in logged if "404" in m], logged  # the favicon too
        assert not [m for m in logged if "Content Security Policy" in m], logged  # no inline style or script
        assert server_icon(server.url) == "image/svg+xml"

        # Dark mode follows the system's scheme.
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": "dark"}]})
        assert driver.execute_script("return getComputedStyle(document.body).backgroundColor") == "rgb(15, 20, 25)"
        screenshot(driver, shots / "stage-dark.png", colours=128, width=1366)
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": "light"}]})

        # 200 runs: grouped by what differs (20 groups of 10 seeds), the best TOP_N in colour, the rest one band.
        driver.get(f"{server.url}/ui/stages/grid200")
        wait.until(ec.presence_of_element_located((By.ID, "stage-table")))
        assert len(driver.find_elements(By.CSS_SELECTOR, "#stage-table tbody tr")) == 200
        for box in driver.find_elements(By.CSS_SELECTOR, "ol.legend"):
            items = box.find_elements(By.TAG_NAME, "li")
            assert len(items) == TOP_N + 1 and items[-1].text.startswith("the other 12 groups (120 runs)")
        chart = driver.find_element(By.CSS_SELECTOR, "#stage-charts svg.stage-chart")
        assert len(chart.find_elements(By.CSS_SELECTOR, "polyline.series")) == TOP_N
        assert len(chart.find_elements(By.CSS_SELECTOR, "polygon.rest-band")) == 1
        assert len(driver.page_source) < 1_500_000
        screenshot(driver, shots / "stage-200.png", colours=128, width=1366)
