"""Red team, fast: DNS rebinding against a real `serve --insecure` (no token, loopback): every foreign Host is
400 before anything runs (the red-team repro: a POST with Host: attacker.example got 201 and its command ran),
and with a token, AJET_RUNNER_ALLOWED_HOSTS is enforced the same way."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from ajet_runner.store.store import Store
from tests.integration.scenario import clean_env, make
from tests.redteam.procs import serving
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]


def _foreign(port: str) -> list[str]:
    return ["attacker.example", f"attacker.example:{port}", f"ATTACKER.example:{port}", f"localhost:{int(port) + 1}",
            f"127.0.0.1:{int(port) + 1}", f"127.0.0.1.attacker.example:{port}", f"localhost.attacker.example:{port}",
            f"[::1]:{int(port) + 1}", f"0.0.0.0:{port}", f"192.168.1.10:{port}", f"evil:{port}", ""]


def test_dns_rebinding_every_foreign_host_is_400(redis_url: str, tmp_path: Path) -> None:
    env = clean_env(REDIS_URL=redis_url)
    text = make("demo", tmp_path).blueprint.read_text()
    refused, tried = 0, 0
    with serving(env, tmp_path / "serve.log", "--insecure") as api:
        port = api.rsplit(":", 1)[1]
        for host in _foreign(port):
            for method, path, body in (("POST", "/v1/experiments", {"blueprint": text}), ("GET", "/ui/submit", None),
                                       ("GET", "/v1/nodes", None), ("GET", "/docs", None)):
                tried += 1
                resp = httpx.request(method, f"{api}{path}", json=body, timeout=30,
                                     headers={"Host": host, "Accept": "text/html"})
                refused += resp.status_code == 400 and 'name="csrf"' not in resp.text
        own = httpx.get(f"{api}/v1/nodes", headers={"Host": f"localhost:{port}"}, timeout=10).status_code
    created = Store.from_url(redis_url).indexes.count()
    record("trusted hosts", "foreign Host headers on serve --insecure (DNS rebinding)", tried,
           f"{refused} answered 400, {created} experiments created; own Host: {own}",
           passed=refused == tried and created == 0 and own == 200)
    assert (refused, created, own) == (tried, 0, 200)
