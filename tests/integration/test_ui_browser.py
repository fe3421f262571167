"""The web console in a real headless Chromium, against a real `serve` and a real worker.

Logs in, watches a running experiment turn finished without a reload, opens it (plot, report, log), follows
another one's log, stops it with the button; hostile purposes and log lines never execute. Screenshots go to
$AJET_RUNNER_SCREENSHOTS when set (the README's are made with AJET_RUNNER_SCREENSHOTS=docs/screenshots).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.browser import headless_chromium, page_wait, screenshot
from tests.integration.scenario import make, wait_for
from tests.integration.test_api import TOKEN
from tests.integration.ui_harness import IMG_LINE, IMG_PURPOSE, SCRIPT_LINE, SCRIPT_PURPOSE, demo, running_console

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _no_xss(driver) -> None:
    """Nothing hostile ran or became an element; the CSP never had to block anything (it is the second line)."""
    assert driver.execute_script("return window.__xss === undefined"), "a payload executed"
    assert not driver.execute_script("return document.querySelectorAll('img[src=\"x\"], script:not([src])').length")
    csp = [e for e in driver.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert not csp, csp


def _click(driver, element_id: str) -> bool:
    """Click the element now in the page; False (try again) when a live re-render replaced it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        driver.find_element(By.ID, element_id).click()
    except StaleElementReferenceException:
        return False
    return True


def _value(driver, element_id: str) -> str | None:
    """The element's value now; None (try again) when a live re-render replaced it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return driver.find_element(By.ID, element_id).get_attribute("value")
    except StaleElementReferenceException:
        return None


def test_console_in_a_real_browser(redis_url, tmux_socket, tmp_path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    shots = Path(os.environ.get("AJET_RUNNER_SCREENSHOTS") or tmp_path / "screenshots")
    quick = demo(tmp_path, "quick", SCRIPT_PURPOSE)
    slow = demo(tmp_path, "slow", IMG_PURPOSE, template="long_run", max_time="10 minutes")
    repaired = make("oom_first_attempt", tmp_path / "oom")
    with headless_chromium() as driver, running_console(redis_url, tmux_socket, tmp_path) as console, \
            console.server.client() as api:
        wait = page_wait(driver, 120)
        slow_id = api.submit(slow.blueprint.read_text())["id"]
        oom_id = api.submit(repaired.blueprint.read_text())["id"]

        driver.get(f"{console.url}/ui/")
        wait.until(ec.url_contains("/ui/login"))
        screenshot(driver, shots / "login.png")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "exp-table")))
        driver.execute_script("window.__sameDocument = true")

        # A run submitted after the page loaded appears, runs and finishes, all without a reload.
        quick_id = api.submit(quick.blueprint.read_text())["id"]
        row = f"#row-{quick_id}"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{row}[data-state=running]"))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{row}[data-state=finished]"))
        assert "completed" in driver.find_element(By.CSS_SELECTOR, row).text
        assert driver.execute_script("return window.__sameDocument === true"), "the page was reloaded"
        assert SCRIPT_PURPOSE in driver.find_element(By.CSS_SELECTOR, f"{row} .purpose").text
        assert IMG_PURPOSE in driver.find_element(By.CSS_SELECTOR, f"#row-{slow_id} .purpose").text
        wait_for(lambda: api.get(oom_id)["state"] == "finished", 120, "the repaired run to finish")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"#row-{oom_id}[data-state=finished]"))
        _no_xss(driver)  # the README pictures of these pages have real purposes: test_ui_chart_browser.py

        # Its page: report with the reward plot, the chart, the whole log.
        driver.find_element(By.CSS_SELECTOR, f"{row} a").click()
        wait.until(ec.presence_of_element_located((By.ID, "report")))
        plot = driver.find_element(By.CSS_SELECTOR, "#report img")
        wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 100", plot))
        assert "Summary" in driver.find_element(By.ID, "report").text
        assert driver.find_elements(By.CSS_SELECTOR, "#chart svg polyline")
        wait.until(lambda d: "Training finished" in d.find_element(By.ID, "log-pane").text)
        assert driver.find_element(By.ID, "exp-outcome").text == "completed"
        _no_xss(driver)

        driver.get(f"{console.url}/ui/experiments/{oom_id}")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#repairs .d-add")))
        driver.execute_script("document.getElementById('part-repairs').scrollIntoView()")
        screenshot(driver, shots / "repairs.png")

        # The long run: its log is followed as it grows, hostile lines are text, search filters.
        driver.get(f"{console.url}/ui/experiments/{slow_id}")
        driver.execute_script("window.__sameDocument = true")
        pane = driver.find_element(By.ID, "log-pane")
        wait.until(lambda d: "step:" in pane.text)
        log_file = slow.results / "logs" / "attempt-1.log"
        with open(log_file, "a") as fh:
            fh.write(f"{SCRIPT_LINE}\n{IMG_LINE}\n")
        wait.until(lambda d: SCRIPT_LINE in pane.text and IMG_LINE in pane.text)
        lines_before = len(pane.find_elements(By.TAG_NAME, "div"))
        wait.until(lambda d: len(pane.find_elements(By.TAG_NAME, "div")) > lines_before)  # still following
        driver.find_element(By.ID, "log-search").send_keys("__xss")
        visible = [e.text for e in pane.find_elements(By.TAG_NAME, "div") if e.is_displayed()]
        assert visible == [SCRIPT_LINE, IMG_LINE]
        driver.find_element(By.ID, "log-search").clear()
        driver.find_element(By.ID, "log-search").send_keys(" ")  # an input event: every line again
        attach = wait.until(lambda d: _value(d, "attach-cmd"))
        assert attach == f"tmux -S {tmux_socket} attach -t {api.get(slow_id)['tmux_session']}"
        _no_xss(driver)

        # Stop it with the button (confirmed), and see it end as cancelled without reloading again. Parts of
        # the page are re-rendered live from the event stream, so the button is looked up until a click lands.
        wait.until(lambda d: _click(d, "stop-button"))
        alert = wait.until(ec.alert_is_present())
        assert slow_id in alert.text
        alert.accept()
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".notice")))
        driver.execute_script("window.__afterStop = true")
        wait.until(lambda d: d.find_element(By.ID, "exp-state").text == "finished")
        assert wait.until(lambda d: d.find_element(By.ID, "exp-outcome").text) == "cancelled"  # read once rendered
        assert driver.execute_script("return window.__afterStop === true")
        assert driver.find_element(By.ID, "stop-button").get_attribute("disabled") is not None
        assert api.get(slow_id)["outcome"] == "cancelled"
        _no_xss(driver)

        # Submit: what check understood and the planned changes; nodes.
        driver.get(f"{console.url}/ui/submit")
        driver.find_element(By.ID, "blueprint").send_keys(make("demo", tmp_path / "again").blueprint.read_text())
        driver.find_element(By.ID, "check-button").click()
        wait.until(ec.presence_of_element_located((By.ID, "check-result")))
        assert driver.find_element(By.ID, "submit-button").is_enabled()
        screenshot(driver, shots / "submit.png")
        driver.get(f"{console.url}/ui/nodes")
        assert "nodeW" in driver.find_element(By.ID, "nodes").text
        screenshot(driver, shots / "nodes.png")
        driver.set_window_size(390, 844)  # a phone
        driver.get(f"{console.url}/ui/")
        driver.save_screenshot(str(shots / "phone.png"))
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        _no_xss(driver)
