"""Auth never fails open (issue 18, defect 5): a configured token source that becomes empty or
unreadable at run time means 401 for everything and a loud log line; `--insecure` opens the API
only when no token source is configured at all."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.store.settings import Settings
from tests.integration.scenario import CLI, wait_for
from tests.integration.test_api import free_port
from tests.integration.workers import kill_group

pytestmark = [pytest.mark.integration]

TOKEN = "file-token-abcdef0123"


def _bump(path: Path) -> None:
    later = time.time() + 5
    os.utime(path, (later, later))  # a distinct mtime even on coarse clocks


def test_emptied_or_unreadable_token_file_refuses_everything_even_insecure(
        redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n")
    hdr = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(Settings(redis_url=redis_url, token_file=str(path)), insecure=True)) as api:
        assert api.get("/v1/nodes", headers=hdr).status_code == 200
        assert api.get("/v1/nodes").status_code == 401  # insecure does nothing while a token source exists
        with caplog.at_level(logging.ERROR, logger="ajet_runner.auth"):
            path.write_text("")
            _bump(path)
            for headers in (hdr, {}, {"Authorization": "Bearer "}):
                resp = api.get("/v1/nodes", headers=headers)
                assert resp.status_code == 401, resp.text
                assert "token source is empty or unreadable" in resp.json()["detail"]
        assert any("AUTH:" in r.getMessage() and "holds no token" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="ajet_runner.auth"):
            path.unlink()
            assert api.get("/v1/nodes", headers=hdr).status_code == 401
        assert any("cannot read the token file" in r.getMessage() for r in caplog.records)
        path.write_text(f"{TOKEN}\n")
        _bump(path)
        assert api.get("/v1/nodes", headers=hdr).status_code == 200  # readable again: back to normal


def test_real_server_insecure_with_a_token_file_fails_closed(redis_url: str, tmp_path: Path) -> None:
    """The red-team repro: `serve --insecure` with a token file; emptying the file turned 401 into 200."""
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN}\n")
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
    env.update(REDIS_URL=redis_url, AJET_RUNNER_TOKEN_FILE=str(path))
    with open(log, "wb") as out:
        proc = subprocess.Popen([*CLI, "serve", "--port", str(port), "--insecure"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1/nodes"
    try:
        def status(headers: dict[str, str]) -> int:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(url, headers=headers, timeout=2).status_code
            except httpx.TransportError:
                return 0

        assert wait_for(lambda: status({"Authorization": f"Bearer {TOKEN}"}), 30, "the server") == 200
        assert status({}) == 401
        path.write_text("")
        _bump(path)
        assert status({}) == 401
        assert status({"Authorization": f"Bearer {TOKEN}"}) == 401
        wait_for(lambda: "AUTH:" in log.read_text(), 10, "the loud log line")
    finally:
        kill_group(proc)  # type: ignore[arg-type]


def test_serve_refuses_a_configured_but_empty_token_source_even_insecure(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# nothing yet\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
    env.update(REDIS_URL=redis_url, AJET_RUNNER_TOKEN_FILE=str(path))
    done = subprocess.run([*CLI, "serve", "--port", str(free_port()), "--insecure"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "holds no token" in done.stderr
