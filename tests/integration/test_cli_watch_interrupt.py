"""Ctrl-C in `ajet-runner watch` detaches (as `kubectl logs -f` does): a real `watch` process gets a real
SIGINT and the experiment goes on running; with `--stop-on-interrupt` the same SIGINT stops it."""

from __future__ import annotations

import signal
import subprocess
import threading

import pytest

from tests.integration.scenario import CLI, wait_for
from tests.integration.test_cli_client import cli_env
from tests.integration.ui_harness import demo, running_console

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Watch:
    """`ajet-runner watch ID` in a child process, its output read as it comes."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([*CLI, "watch", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.out: list[str] = []
        self.reader = threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True)  # type: ignore[arg-type]
        self.reader.start()

    def interrupt(self) -> tuple[int, str, str]:
        """SIGINT, as Ctrl-C sends it; then the exit code, stdout and stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(90)  # stdout is the reader thread's alone (communicate() would take lines from it)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.reader.join(10)
        return self.proc.returncode, "".join(self.out), self.proc.stderr.read()  # type: ignore[union-attr]


def test_ctrl_c_detaches_watch_and_stop_on_interrupt_stops(redis_url, tmux_socket, tmp_path) -> None:
    long = demo(tmp_path, "long", "a long run to watch", template="long_run", max_time="10 minutes")
    with running_console(redis_url, tmux_socket, tmp_path) as console, console.server.client() as api:
        exp_id = api.submit(long.blueprint.read_text())["id"]
        wait_for(lambda: api.get(exp_id)["state"] == "running", 60, "the run to start")
        env = cli_env(console.url)

        watch = Watch(env, exp_id)
        wait_for(lambda: any("launching → running" in line for line in watch.out), 30, "watch to show the history")
        code, out, err = watch.interrupt()
        assert code == 130, out + err
        assert f"ajet-runner stop {exp_id}" in err and "goes on running" in err
        rec = api.get(exp_id)
        assert rec["state"] == "running" and not rec["cancel_requested"], rec  # never asked to stop

        stopper = Watch(env, exp_id, "--stop-on-interrupt")
        wait_for(lambda: any("launching → running" in line for line in stopper.out), 30, "watch to show the history")
        code, out, err = stopper.interrupt()
        assert code == 130, out + err  # cancelled, like `run`
        assert "stopping the experiment" in out and "cancelled" in out
        final = api.get(exp_id)
        assert final["state"] == "finished" and final["outcome"] == "cancelled"
        assert (long.results / "finish.flag").exists()  # it waited for the report before exiting
