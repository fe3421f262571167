"""/docs (Swagger UI) and /redoc (ReDoc) render in a real headless Chromium with no network but this machine,
under the console's Content-Security-Policy: every asset comes from the API server itself."""

from __future__ import annotations

import pytest

from tests.integration.browser import OFFLINE_FLAGS, headless_chromium, page_wait, requested_urls
from tests.integration.test_api import running_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _csp_complaints(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e.get("message", "")]


def test_api_docs_render_offline_under_the_csp(redis_url, tmp_path) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    with running_server(redis_url, tmp_path / "serve.log") as server, headless_chromium(OFFLINE_FLAGS) as driver:
        wait = page_wait(driver, 60)
        with pytest.raises(WebDriverException, match="ERR_"):  # the network is really off
            driver.get("https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css")
        requested_urls(driver)

        driver.get(f"{server.url}/docs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path[data-path]"))
        paths = {e.get_attribute("data-path") for e in driver.find_elements(By.CSS_SELECTOR, "[data-path]")}
        assert {"/v1/experiments", "/v1/experiments/{exp_id}/stop", "/healthz"} <= paths, paths
        assert driver.find_element(By.CSS_SELECTOR, ".info .title").text.startswith("ajet-runner")
        assert not _csp_complaints(driver)
        foreign = [u for u in requested_urls(driver) if not u.startswith((server.url, "data:", "blob:"))]
        assert not foreign, foreign

        driver.get(f"{server.url}/redoc")
        wait.until(lambda d: "Submit AgentJet experiment blueprints" in d.find_element(By.TAG_NAME, "body").text)
        wait.until(lambda d: d.find_elements(By.XPATH, "//*[contains(text(), '/v1/experiments/{exp_id}/stop')]"))
        refused = _csp_complaints(driver)  # only ReDoc's footer logo, which it would fetch from its CDN
        assert all("cdn.redoc.ly" in line and "img-src" in line for line in refused), refused
        foreign = {u for u in requested_urls(driver) if not u.startswith((server.url, "data:", "blob:"))}
        assert foreign <= {"https://cdn.redoc.ly/redoc/logo-mini.svg"}, foreign  # that one refused by the CSP
