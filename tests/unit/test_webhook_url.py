"""Which webhook URLs are accepted (statemachine/blueprint/webhook_url.py): one row per shape."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.blueprint.webhook_url import shown_url, webhook_url_problem


@pytest.mark.parametrize(("url", "why"), [
    ("https://hooks.example.com/a\r\nX-Evil: 1", "control character"),
    ("https://hooks.example.com/a\nb", "control character"),
    ("https://hooks.example.com/a b", "space"),
    ("https://hooks.example.com/\u2028", "control character"),
    ("ftp://hooks.example.com/a", "https://"),
    ("file:///etc/passwd", "https://"),
    ("gopher://127.0.0.1:6379/_FLUSHALL", "https://"),
    ("javascript:alert(1)", "https://"),
    ("hooks.example.com/a", "no scheme"),
    ("https:///path-only", "no host"),
    ("https://hooks.example.com:99999/a", "port"),
    ("http://hooks.example.com/a", "not a loopback"),
    ("http://10.0.0.5:8080/a", "not a loopback"),
    ("https://example.com/" + "a" * 2100, "at most 2048"),
])
def test_a_url_that_may_not_be_posted_to_is_refused_naming_why(url: str, why: str) -> None:
    assert why in webhook_url_problem(url)


@pytest.mark.parametrize("url", ["https://hooks.example.com/a?x=1", "HTTPS://Hooks.Example.com/a", "http://127.0.0.1:9/h",
                                 "http://localhost:8080/h", "http://[::1]:8080/h", "http://127.3.4.5/h"])
def test_https_anywhere_and_plain_http_to_loopback_are_accepted(url: str) -> None:
    assert webhook_url_problem(url) == ""


def test_plain_http_elsewhere_only_when_allowed() -> None:
    assert webhook_url_problem("http://hooks.internal/a", allow_http=True) == ""
    assert webhook_url_problem("http://hooks.internal/a\r\n", allow_http=True) != ""


def test_the_shown_url_carries_no_credentials() -> None:
    assert shown_url("https://user:pw@hooks.example.com:8443/a/b?token=t#f") == "https://hooks.example.com:8443/a/b"
    assert shown_url("https://hooks.example.com:bad/") == "(an unreadable URL)"
