"""`ajet-runner up` on a fresh dir with nothing configured: one command serves the console with the demo
experiment in it (an HTTP GET of the console page lists it); Ctrl-C stops it all, the demo with its report."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from tests.integration.scenario import clean_env, wait_for
from tests.integration.up_process import running_up

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_up_serves_the_console_with_the_demo_in_it(tmp_path) -> None:
    workdir = tmp_path / "fresh"
    with running_up(workdir, clean_env()) as up:
        said = up.said()
        assert f"console:  {up.base}/ui/" in said
        token = up.token()
        assert f"token:    {token}" in said and oct((workdir / "token").stat().st_mode & 0o777) == "0o600"
        assert httpx.get(f"{up.base}/healthz").status_code == 200  # listening once the addresses are printed
        # The demo is submitted once the worker has joined (its line comes then, after the addresses).
        line = up.wait_line("demo:", 120, "the demo to be submitted once the worker joined")
        demo_id = re.search(r"demo:     experiment (\w+)", line).group(1)  # type: ignore[union-attr]
        page = httpx.get(f"{up.base}/ui/", headers={"Authorization": f"Bearer {token}", "Accept": "text/html"})
        assert page.status_code == 200
        assert f'id="row-{demo_id}"' in page.text and "Demonstrate a complete, clean run" in page.text
        assert httpx.get(f"{up.base}/ui/", headers={"Accept": "text/html"}).status_code == 303  # a login is asked
        wait_for(lambda: httpx.get(f"{up.base}/v1/experiments/{demo_id}",
                                   headers={"Authorization": f"Bearer {token}"}).json()["state"]
                 in ("running", "finished"), 60, "the demo to run")
    proc = up.proc
    assert proc.returncode == 0, "".join(up.errors)
    assert (workdir / "demo" / "results" / "finish.flag").exists()  # completed, or stopped with its report
    report = (workdir / "demo" / "results" / "experiment_report.md").read_text()
    assert f"tmux -S {workdir / 'tmux.sock'} attach -t " in report  # the socket, as the console shows it
    alive = subprocess.run(["tmux", "-S", str(workdir / "tmux.sock"), "ls"], capture_output=True, check=False)
    assert alive.returncode != 0, "the private tmux server outlived `up`"
