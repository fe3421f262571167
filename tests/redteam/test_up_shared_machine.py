"""Red team: `ajet-runner up` on a machine other users share.

Its embedded Redis had no password and a TCP port every local user could see in `ps`; whoever reached it could
queue a job the worker ran as the user of `up`. Here a real `up` is started (as root, the worst case) in a
directory every user may enter, and a second local user (created for the test, run with `runuser`) tries what
`ps` and the file system show it: the Redis socket, any TCP port of the Redis, its config file, the worker's
environment, the token file, the private tmux server, and every command line for a secret. Meanwhile
`/metrics` (no token) is asked for under a foreign Host, as a DNS-rebinding page would.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest

from tests.integration.scenario import clean_env
from tests.integration.up_process import running_up
from tests.redteam.record import record

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OTHER = "ajet-redteam-other"


def _other_user() -> str:
    if os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("useradd"):
        pytest.skip("needs root, runuser and useradd (a second local user is created)")
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER], check=True,
                       capture_output=True)
    return OTHER


def _as_other(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", OTHER, "--", *cmd], capture_output=True, text=True, timeout=30,
                          check=False)


def test_another_local_user_cannot_use_up_s_redis_token_or_tmux(tmp_path: Path) -> None:
    _other_user()
    if not shutil.which("redis-cli"):
        pytest.skip("redis-cli is not installed")
    base = Path(tempfile.mkdtemp(prefix="ajet-up-shared-"))
    base.chmod(0o755)  # the other user may enter it: the files' own modes are what is tested
    workdir = base / "up"
    tries: dict[str, bool] = {}  # attack -> refused
    try:
        with running_up(workdir, clean_env(), "--no-demo", cwd=base) as up:
            proc, port = up.proc, up.port
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            (redis_proc,) = [p for p in tree if "redis-server" in p.name()]
            shown = " ".join(redis_proc.cmdline())  # redis-server's own title: "redis-server unixsocket:/path"
            listening = [c for c in redis_proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
            at_socket = re.search(r"unixsocket:(\S+)", shown)
            where = ["-s", at_socket.group(1)] if at_socket else ["-p", str(listening[0].laddr.port)]
            conf = Path(at_socket.group(1)).parent / "redis.conf" if at_socket else Path("/nonexistent")
            found = re.search(r'requirepass "([^"]+)"', conf.read_text()) if conf.exists() else None
            password = found.group(1) if found else "no password at all"
            token = (workdir / "token").read_text().strip()
            worker = next(p for p in tree if "worker" in p.cmdline())

            tries["PING the Redis"] = "PONG" not in _as_other("redis-cli", *where, "PING").stdout
            pushed = _as_other("redis-cli", *where, "LPUSH", "rq:queue:default", "x")
            tries["push a job id into its queue"] = not pushed.stdout.strip().isdigit()
            tries["a TCP port of the Redis"] = not listening
            tries["read redis.conf (the password)"] = _as_other("cat", str(conf)).returncode != 0
            tries["read the token file"] = _as_other("cat", str(workdir / "token")).returncode != 0
            tries["read the worker's environment"] = _as_other("cat", f"/proc/{worker.pid}/environ").returncode != 0
            tmux = _as_other("tmux", "-S", str(workdir / "tmux.sock"), "list-sessions")
            tries["the private tmux server"] = tmux.returncode != 0
            argv = " ".join(" ".join(p.cmdline()) for p in tree if p.is_running())
            tries["a secret on a command line (ps)"] = password not in argv and token not in argv
            assert oct((workdir / "token").stat().st_mode & 0o777) == "0o600"

            url = f"http://127.0.0.1:{port}/metrics"
            foreign = [httpx.get(url, headers={"Host": h, "Authorization": f"Bearer {token}"}).status_code
                       for h in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", f"localhost.evil:{port}")]
            own = httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code
            anonymous = _as_other("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url).stdout.strip()
            tries["read /metrics (experiment purposes) without the token"] = anonymous == "401"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    refused = [name for name, ok in tries.items() if ok]
    record("`up` on a shared machine", "another local user: " + ", ".join(tries), len(tries),
           f"{len(refused)}/{len(tries)} refused", passed=len(refused) == len(tries))
    record("`/metrics` under `up`", "foreign Host headers (DNS rebinding) on /metrics, even with the token",
           len(foreign), f"{sum(s == 400 for s in foreign)}x400; own Host with the token {own}",
           passed=all(s == 400 for s in foreign) and own == 200)
    assert len(refused) == len(tries), {k: v for k, v in tries.items() if not v}
    assert all(s == 400 for s in foreign) and own == 200, (foreign, own)
