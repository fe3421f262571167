"""`ajet-runner up` on a fresh dir with nothing configured: one command serves the console with the demo
experiment in it (an HTTP GET of the console page lists it); Ctrl-C stops it all, the demo with its report."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading

import httpx
import pytest

from tests.integration.scenario import CLI, wait_for
from tests.integration.test_api import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_up_serves_the_console_with_the_demo_in_it(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_") and k != "REDIS_URL"}
    port, workdir = free_port(), tmp_path / "fresh"
    proc = subprocess.Popen([*CLI, "up", "--dir", str(workdir), "--port", str(port)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
    try:
        wait_for(lambda: any(line.startswith("Ctrl-C") for line in lines) or proc.poll() is not None, 90,
                 "up to print its addresses")
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        said = "".join(lines)
        assert f"console:  http://127.0.0.1:{port}/ui/" in said
        token = (workdir / "token").read_text().strip()
        assert f"token:    {token}" in said and oct((workdir / "token").stat().st_mode & 0o777) == "0o600"
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz").status_code == 200  # listening once the addresses are printed
        # The demo is submitted once the worker has joined (its line comes then, after the addresses).
        wait_for(lambda: any(line.startswith("demo:") for line in lines) or proc.poll() is not None, 120,
                 "the demo to be submitted once the worker joined")
        demo_id = re.search(r"demo:     experiment (\w+)", "".join(lines)).group(1)  # type: ignore[union-attr]
        page = httpx.get(f"{base}/ui/", headers={"Authorization": f"Bearer {token}", "Accept": "text/html"})
        assert page.status_code == 200
        assert f'id="row-{demo_id}"' in page.text and "Demonstrate a complete, clean run" in page.text
        assert httpx.get(f"{base}/ui/", headers={"Accept": "text/html"}).status_code == 303  # a login is asked
        wait_for(lambda: httpx.get(f"{base}/v1/experiments/{demo_id}", headers={"Authorization": f"Bearer {token}"})
                 .json()["state"] in ("running", "finished"), 60, "the demo to run")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()  # type: ignore[union-attr]
    assert (workdir / "demo" / "results" / "finish.flag").exists()  # completed, or stopped with its report
    report = (workdir / "demo" / "results" / "experiment_report.md").read_text()
    assert f"tmux -S {workdir / 'tmux.sock'} attach -t " in report  # the socket, as the console shows it
    alive = subprocess.run(["tmux", "-S", str(workdir / "tmux.sock"), "ls"], capture_output=True, check=False)
    assert alive.returncode != 0, "the private tmux server outlived `up`"
