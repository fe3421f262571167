"""Red team: an experiment cannot read the control plane's keys from its processes' environment.

Experiments run as the worker's Unix user, and a process may read /proc/<pid>/environ of every process of its
own user: the worker's (REDIS_URL with its password, the webhook secret), its watcher's, the API's (the token).
A cleaned job environment does not help when the job can read its worker's. Here a worker and `serve` run as a
second local user (created for the test; root would read everything anyway) holding no capability but
CAP_DAC_READ_SEARCH (to reach the test's interpreter) with a Redis password,
an API token and a webhook secret in their environment, and a process of that same user, as an experiment
would, reads the environment of every process of the user. An ordinary process of that user started beside
them must stay readable (the probe works).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest

from ajet_runner.service.embedded import free_port
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, wait_for
from tests.integration.workers import kill_group
from tests.redteam.procs import redis_with_password
from tests.redteam.record import record
from tests.redteam.test_up_shared_machine import OTHER, _other_user

pytestmark = [pytest.mark.integration]

TOKEN = "tok-same-user-0123456789"
WEBHOOK = "whsec-same-user-abcdef"
CONTROL = (" worker --node", " serve --port", "node.watcher")  # the control plane's command lines

# What a curious experiment runs: every readable environment of its own user's processes, and whose.
PROBE = """
import os, sys
me, wanted = os.getuid(), sys.argv[1:]
for pid in filter(str.isdigit, os.listdir("/proc")):
    cmd = "?"
    try:
        if os.stat(f"/proc/{pid}").st_uid != me:
            continue
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace")
        cmd = cmd.replace("\\n", " ")[:120]
        env = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
    except OSError as exc:
        print(f"refused\\t{pid}\\t{type(exc).__name__}\\t{cmd}")
        continue
    print(f"read\\t{pid}\\t{','.join(w for w in wanted if w in env) or '-'}\\t{cmd}")
"""


# The second user with CAP_DAC_READ_SEARCH only: it may read the test's interpreter (under a private home) and
# nothing more; without CAP_SYS_PTRACE it reads another process's environment as any user's process does.
AS_OTHER = ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search"]


def _as_other(env: dict[str, str], *cmd: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*AS_OTHER, "env", "-i", *(f"{k}={v}" for k, v in env.items()), *cmd],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_an_experiment_s_user_cannot_read_the_control_plane_s_environment(tmp_path: Path) -> None:
    _other_user()
    if not shutil.which("setpriv"):
        pytest.skip("setpriv is not installed")
    base = Path(tempfile.mkdtemp(prefix="ajet-same-user-"))
    shutil.chown(base, OTHER)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with redis_with_password(tmp_path) as (url, password):
            env = {"PATH": os.environ["PATH"], "HOME": str(base), "REDIS_URL": url, "AJET_RUNNER_TOKEN": TOKEN,
                   "AJET_RUNNER_WEBHOOK_SECRET": WEBHOOK, "AJET_RUNNER_TMUX_SOCKET": str(base / "tmux.sock")}
            port = free_port()
            procs.append(_as_other(env, *CLI, "worker", "--node", "same-user", "--gpus", "0"))
            procs.append(_as_other(env, *CLI, "serve", "--port", str(port)))
            procs.append(_as_other({"PATH": env["PATH"], "PLAIN": "1"}, "sleep", "300"))  # ordinary: readable
            store = Store.from_url(url)
            wait_for(lambda: any(n["name"] == "same-user" for n in store.nodes.all()), 90, "the worker to register")
            wait_for(lambda: _answers(port), 60, "serve to answer")
            watcher = wait_for(lambda: _of_other("ajet_runner.workers.node.watcher"), 30, "the watcher")
            # A process is readable from its exec until its start-up turns the flag off (its imports): the probe
            # looks again until every control-plane process has started up, or the time is out.
            rows = wait_for(lambda: _settled(password), 30, "the control plane's processes to start up",
                            interval=0.5)
    finally:
        for proc in procs:
            kill_group(proc)  # type: ignore[arg-type]
        shutil.rmtree(base, ignore_errors=True)
    assert isinstance(rows, list)
    leaked = [r for r in rows if r[0] == "read" and r[2] != "-"]
    control = [r for r in rows if any(k in r[3] for k in CONTROL)]
    plain = [r for r in rows if r[3].startswith("sleep 300")]
    record("control plane's environment, same user", "a process of the experiments' Unix user reading "
           "/proc/<pid>/environ of every process of that user (worker, watcher, serve; a password in REDIS_URL, "
           "the API token, the webhook secret)", len(rows),
           f"{len(leaked)} environments with a secret; {sum(r[0] == 'refused' for r in control)}/{len(control)} "
           f"control-plane processes refused; an ordinary process read: {bool(plain) and plain[0][0] == 'read'}",
           passed=not leaked and bool(control) and all(r[0] == "refused" for r in control)
           and bool(plain) and plain[0][0] == "read")
    assert watcher
    assert plain and plain[0][0] == "read", rows  # the probe can read what is readable
    assert len(control) >= 3 and all(r[0] == "refused" for r in control), control
    assert leaked == [], leaked


def _probe(password: str) -> list[list[str]]:
    done = subprocess.run([*AS_OTHER, sys.executable, "-c", PROBE, password, TOKEN, WEBHOOK], capture_output=True,
                          text=True, timeout=60, check=True)
    return [line.split("\t") for line in done.stdout.splitlines()]


def _settled(password: str) -> list[list[str]] | None:
    """The probe's rows once it finds the worker, its watcher and serve all refused (else None: look again)."""
    rows = _probe(password)
    control = [r for r in rows if any(k in r[3] for k in CONTROL)]
    return rows if len(control) >= 3 and all(r[0] == "refused" for r in control) else None


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _of_other(needle: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["username", "cmdline"]):
        if proc.info["username"] == OTHER and needle in " ".join(proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found
