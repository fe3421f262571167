"""A real headless Chromium (Debian's chromium + chromium-driver) driven by selenium, for the console tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.load import scaled

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,900")


def chromium_or_skip() -> tuple[str, str]:
    """The browser and driver executables, or skip the test saying what is missing."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    browser = next((p for p in map(shutil.which, CHROMIUM_CANDIDATES) if p), None)
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip("no Chromium: install Debian's chromium and chromium-driver (scripts/ensure-test-deps.sh "
                    "does it as root with apt-get)")
    return browser, driver


# No network but this machine: every other host fails to resolve and would go through a proxy that is not
# there (Chromium sends loopback requests directly). For pages that must work on an offline cluster.
OFFLINE_FLAGS = ("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
                 "--proxy-server=http://127.0.0.1:9")


@contextmanager
def headless_chromium(extra_flags: tuple[str, ...] = ()) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = chromium_or_skip()
    profile = tempfile.mkdtemp(prefix="ajet-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, *extra_flags):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = Service(executable_path=driver_path, log_output=os.devnull)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def page_wait(driver: Any, seconds: float) -> Any:
    """A WebDriverWait for a live page: `seconds` is for a quiet machine, scaled by the load (tests/load.py), and a
    condition that read an element just re-rendered from the event stream (stale) is tried again, not failed —
    at load 8 a `#exp-state` was replaced between finding it and reading its text."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, scaled(seconds), poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,))


def screenshot(driver: Any, path: Path, colours: int = 64, width: int = 1280) -> None:
    """A full-page PNG, quantised to a small palette so the committed files stay small."""
    from PIL import Image

    height = driver.execute_script("return Math.min(document.body.scrollHeight, 2400)")
    driver.set_window_size(width, max(700, int(height) + 20))
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    Image.open(path).convert("RGB").quantize(colors=colours).save(path, optimize=True)
    driver.set_window_size(width, 900)


def requested_urls(driver: Any) -> list[str]:
    """Every URL the page asked for since the last call (Chromium's performance log)."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
