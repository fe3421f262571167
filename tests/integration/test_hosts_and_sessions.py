"""Trusted hosts, security headers on every route, console sessions revoked at logout, Secure cookies behind a
TLS proxy. The DNS-rebinding repro runs against a real `serve --insecure`; the rest on the real app with a
real redis-server."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.service.api.hosts import HostsError, allowed_hosts, host_allowed
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.test_api import free_port
from tests.integration.workers import kill_group

pytestmark = [pytest.mark.integration]

TOKEN = "t-hosts-0123456789"


@pytest.fixture()
def insecure_server(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A real `ajet-runner serve --insecure` (no token, loopback): the setup DNS rebinding attacks."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen([*CLI, "serve", "--port", str(port), "--insecure"], env={**env, "REDIS_URL": redis_url},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 30, "serve --insecure to answer")
        yield url
    finally:
        kill_group(proc)  # type: ignore[arg-type]
        log.close()


def test_dns_rebinding_a_foreign_host_gets_400_before_anything_runs(insecure_server: str, redis_url: str,
                                                                     tmp_path: Path) -> None:
    port = insecure_server.rsplit(":", 1)[1]
    text = make("demo", tmp_path).blueprint.read_text()
    for host in ("attacker.example", f"attacker.example:{port}", f"localhost:{int(port) + 1}", "127.0.0.1.nip.io",
                 ""):
        resp = httpx.post(f"{insecure_server}/v1/experiments", json={"blueprint": text}, headers={"Host": host},
                          timeout=10)
        assert resp.status_code == 400, (host, resp.text)
        assert resp.json()["problems"][0]["field"] == "Host"
        page = httpx.get(f"{insecure_server}/ui/submit", headers={"Host": host, "Accept": "text/html"}, timeout=10)
        assert page.status_code == 400 and 'name="csrf"' not in page.text  # no CSRF token under a foreign Host
        assert httpx.get(f"{insecure_server}/healthz", headers={"Host": host}, timeout=10).status_code == 400
    assert Store.from_url(redis_url).indexes.count() == 0  # nothing ran
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert httpx.get(f"{insecure_server}/v1/nodes", headers={"Host": host}, timeout=10).status_code == 200, host
    made = httpx.post(f"{insecure_server}/v1/experiments", json={"blueprint": text}, timeout=30)
    assert made.status_code == 201, made.text


def test_serve_insecure_refuses_a_foreign_allowed_host(redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
    done = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--insecure"], capture_output=True, text=True,
                          env={**env, "REDIS_URL": redis_url, "AJET_RUNNER_ALLOWED_HOSTS": "evil.example"},
                          timeout=60, check=False)
    assert done.returncode == 2 and "evil.example" in done.stderr and "DNS rebinding" in done.stderr


def test_host_rules() -> None:
    entries = ("api.example.com", "*.corp.example", "localhost:8080", "[::1]:8080")
    assert host_allowed("API.example.com:443", entries) and host_allowed("a.b.corp.example", entries)
    assert host_allowed("localhost:8080", entries) and host_allowed("[::1]:8080", entries)
    for foreign in ("corp.example", "evil-corp.example", "localhost:8081", "localhost", "api.example.com.evil.io",
                    "[::1]", ""):
        assert not host_allowed(foreign, entries), foreign
    assert allowed_hosts("", open_api=False) == ("*",)
    assert allowed_hosts("", open_api=True, port=8080) == ("localhost:8080", "127.0.0.1:8080", "[::1]:8080")
    assert allowed_hosts("localhost:9000", open_api=True) == ("localhost:9000",)  # an SSH tunnel's port
    with pytest.raises(HostsError, match=r"\*"):
        allowed_hosts("*", open_api=True)


def test_configured_hosts_are_enforced_with_a_token_too(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_hosts="runner.example.com")
    with TestClient(create_app(settings), base_url="http://runner.example.com") as api:
        assert api.get("/v1/nodes", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert api.get("/v1/nodes", headers={"Authorization": f"Bearer {TOKEN}", "Host": "other.example"}
                       ).status_code == 400


def test_every_route_has_the_security_headers_and_the_docs_pages_run_no_inline_script(redis_url: str) -> None:
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN))) as api:
        for path in ("/healthz", "/v1/nodes", "/openapi.json", "/ui/login", "/nope", "/docs", "/redoc"):
            resp = api.get(path)
            assert resp.headers["x-frame-options"] == "DENY", path
            assert resp.headers["x-content-type-options"] == "nosniff", path
            csp = resp.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, path
            assert len(resp.headers.get_list("content-security-policy")) == 1, path
        for path in ("/docs", "/redoc"):  # bundled assets, started by files of ours: no inline script at all
            page = api.get(path)
            assert page.status_code == 200, path
            assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", page.text, re.S) == [], path
            script_src = page.headers["content-security-policy"].split("script-src", 1)[1].split(";", 1)[0]
            assert script_src.split() == ["'self'"], (path, script_src)


def _login(api: TestClient, **headers: str) -> httpx.Response:
    return api.post("/ui/login", data={"token": TOKEN, "next": "/ui/nodes"}, headers=headers,
                    follow_redirects=False)


def test_logout_revokes_the_session_server_side(redis_url: str) -> None:
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN)), base_url="http://127.0.0.1") as api:
        resp = _login(api)
        assert resp.status_code == 303
        stolen = resp.cookies["ajet_session"]
        page = api.get("/ui/nodes", headers={"Accept": "text/html"}, follow_redirects=False)
        assert page.status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        out = api.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
        assert out.status_code == 303
        api.cookies.clear()
        api.cookies.set("ajet_session", stolen, path="/ui")  # a copy taken before the logout
        again = api.get("/ui/nodes", follow_redirects=False)
        assert again.status_code == 401 and "logged out" in again.json()["detail"]
        ttl = Store.from_url(redis_url).r.ttl(f"ajet:ui:revoked:{stolen.split('.')[1]}")
        assert 43000 < ttl <= 43201  # kept as long as the cookie would have lived, then forgotten
        assert _login(api).status_code == 303  # a new login works


def test_cookies_are_secure_behind_a_trusted_tls_proxy_only(redis_url: str) -> None:
    proxied = {"X-Forwarded-Proto": "https"}
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN, trust_proxy="*"))) as api:
        assert "secure" in _login(api, **proxied).headers["set-cookie"].lower()
        assert "secure" not in _login(api).headers["set-cookie"].lower()  # plain http, no proxy said https
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN))) as api:
        assert "secure" not in _login(api, **proxied).headers["set-cookie"].lower()  # not trusted: not believed
