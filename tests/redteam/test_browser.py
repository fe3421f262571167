"""Red team, full: a real headless Chromium against a real `serve` and worker.

Hostile purposes and log lines (script tags, attribute break-outs) on every console page never execute;
a page that frames the console is refused by the browser (CSP frame-ancestors / X-Frame-Options); a
name rebound to 127.0.0.1 (`--host-resolver-rules`, what DNS rebinding achieves) gets the 400, no login
form and no CSRF token.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import FLAGS, chromium_or_skip, page_wait
from tests.integration.scenario import clean_env, wait_for
from tests.integration.test_api import TOKEN
from tests.integration.ui_harness import IMG_LINE, IMG_PURPOSE, SCRIPT_LINE, SCRIPT_PURPOSE, demo, running_console
from tests.redteam.procs import serving
from tests.redteam.record import full, record

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REBOUND = "attacker.test"


@contextmanager
def chromium(*extra: str) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = chromium_or_skip()
    profile = tempfile.mkdtemp(prefix="ajet-redteam-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, *extra, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path, log_output=os.devnull))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _executed(driver: Any) -> bool:
    return not driver.execute_script("return window.__xss === undefined") or bool(driver.execute_script(
        "return document.querySelectorAll('img[src=\"x\"], script:not([src])').length"))


@full
def test_hostile_pages_framing_and_a_rebound_name_in_chromium(redis_url: str, tmux_socket: str,
                                                               tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    scripted = demo(tmp_path, "scripted", SCRIPT_PURPOSE)
    imaged = demo(tmp_path, "imaged", IMG_PURPOSE)
    with running_console(redis_url, tmux_socket, tmp_path) as console, console.server.client() as api, \
            chromium(f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1") as driver:
        wait = page_wait(driver, 60)
        ids = [api.submit(sc.blueprint.read_text())["id"] for sc in (scripted, imaged)]
        for exp_id, sc in zip(ids, (scripted, imaged), strict=True):
            wait_for(lambda e=exp_id: api.get(e)["state"] == "finished", 120, "the run to finish")
            with open(sc.results / "logs" / "attempt-1.log", "a") as fh:
                fh.write(f"{SCRIPT_LINE}\n{IMG_LINE}\n")

        # Rebinding, against the setup it targets (`serve --insecure`: no token, loopback): the attacker's name
        # now reaches the server, which answers 400 and nothing of the console; its own name works.
        env = clean_env(REDIS_URL=redis_url)
        rebound_pages = ["/ui/login", "/ui/submit", "/ui/", "/docs"]
        rebound_refused = 0
        with serving(env, tmp_path / "insecure.log", "--insecure") as open_api:
            port = open_api.rsplit(":", 1)[1]
            for path in rebound_pages:
                driver.get(f"http://{REBOUND}:{port}{path}")
                body = driver.find_element(By.TAG_NAME, "body").text
                rebound_refused += "not one this server answers" in body and not driver.find_elements(
                    By.NAME, "csrf") and not driver.find_elements(By.ID, "token")
            driver.get(f"http://localhost:{port}/ui/submit")
            assert driver.find_elements(By.NAME, "csrf"), "the console under its own name"

        # Hostile text on every console page, logged in.
        driver.get(f"{console.url}/ui/login")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "exp-table")))
        pages = ["/ui/", *(f"/ui/experiments/{i}" for i in ids), "/ui/nodes", "/ui/submit"]
        executed = 0
        for path in pages:
            driver.get(f"{console.url}{path}")
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            if path.startswith("/ui/experiments/"):
                wait.until(lambda d: SCRIPT_LINE in d.find_element(By.ID, "log-pane").text)
            executed += _executed(driver)

        # The API docs under their policy: their own inline start-up script runs (allowed by its hash), so the
        # browser reports no inline-script violation; an injected one would be blocked.
        docs_violations = []
        for path in ("/docs", "/redoc"):
            driver.get_log("browser")
            driver.get(f"{console.url}{path}")
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            docs_violations += [e["message"] for e in driver.get_log("browser")
                                if "inline script" in e.get("message", "")]
            driver.execute_script("var s = document.createElement('script'); s.textContent = 'window.__xss = 9';"
                                  "document.body.appendChild(s);")
            executed += not driver.execute_script("return window.__xss === undefined")  # blocked by the policy

        # A page that frames the console: the browser refuses to show it in the frame.
        frame_page = tmp_path / "framer.html"
        frame_page.write_text(f'<iframe id="f" src="{console.url}/ui/login"></iframe>')
        driver.get_log("browser")  # drop what came before
        driver.get(frame_page.as_uri())

        def refused_in_frame() -> bool:
            logs = " ".join(e.get("message", "") for e in driver.get_log("browser"))
            return "frame-ancestors" in logs or "X-Frame-Options" in logs

        framed_refused = bool(wait_for(refused_in_frame, 20, "the browser to refuse the frame"))
    record("browser: XSS", "hostile purposes and log lines on every console page, an injected inline script on "
           "/docs and /redoc (Chromium)", len(pages) + 2, f"{executed} pages ran a payload", passed=executed == 0)
    record("browser: docs CSP", "/docs and /redoc under their hash-based policy (Chromium)", 2,
           f"{len(docs_violations)} violations by their own inline scripts", passed=not docs_violations)
    record("browser: rebinding", f"a name rebound to 127.0.0.1 ({REBOUND}) loading console pages (Chromium)",
           len(rebound_pages), f"{rebound_refused} answered 400 with no login form or CSRF token",
           passed=rebound_refused == len(rebound_pages))
    record("browser: framing", "a foreign page framing the console (Chromium)", 1,
           "refused by the browser" if framed_refused else "shown", passed=framed_refused)
    assert executed == 0 and rebound_refused == len(rebound_pages) and framed_refused, docs_violations
    assert not docs_violations
