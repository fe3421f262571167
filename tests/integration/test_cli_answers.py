"""`scan` and `status` print the API's plain JSON (no pydantic import: a third of their start-up), and still name
an answer that is not an ajet-runner server's instead of printing garbage or a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ANSWERS = {
    "/v1/experiments": {"items": [{"id": "abc", "status": "ok"}], "total": 1},  # no state: not our record
    "/v1/experiments/abc": ["not", "a", "record"],
}


class _Other(BaseHTTPRequestHandler):
    """Some other service on the API's port: 200 with JSON that is not ours."""

    def do_GET(self) -> None:  # http.server calls it by this name
        body = json.dumps(ANSWERS.get(self.path.split("?")[0], {})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def cli(url: str, *args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "ajet_runner", *args, "--url", url, "--token", "t"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [("scan",), ("status", "abc")])
def test_an_answer_that_is_not_ours_is_named_with_exit_1(other_server: str, args: tuple[str, ...]) -> None:
    done = cli(other_server, *args)
    assert done.returncode == 1, done.stderr
    assert "answered something unexpected" in done.stderr and "Traceback" not in done.stderr
    assert "expected " in done.stderr  # what was expected, and what came
    assert done.stdout == ""


def test_scan_does_not_import_pydantic(other_server: str) -> None:
    done = cli(other_server, "scan", importtime=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "httpx" in imported  # the import list was read
    assert "pydantic" not in imported and "pydantic_core" not in imported
