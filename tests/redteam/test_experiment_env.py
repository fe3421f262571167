"""Red team: an experiment's environment holds none of the control plane's secrets, for `run`, a service-mode
worker and `up` alike.

A colleague's run used to get the Redis URL with its password, the API token and the webhook secret: enough to
edit another experiment's record, stop it through the API or sign a fake "stage succeeded" webhook. Here each
way of running an experiment is started for real with every secret the control plane can hold (in its own
variables and copied under innocent names), the blueprint's first command dumps its whole environment, and
the dump is searched for every secret value, every control-plane variable name and any Redis URL. The
embedded Redis's random password of `run` and `up` is read from its config file while it runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import httpx
import psutil
import pytest

from tests.integration.scenario import CLI, Scenario, clean_env, env_for, make, short_sim, wait_for
from tests.integration.up_process import running_up
from tests.integration.workers import kill_group, worker_env
from tests.load import scaled
from tests.redteam.procs import redis_with_password, serving
from tests.redteam.record import full, record

pytestmark = [pytest.mark.integration]

TOKEN = "tok-env-redteam-0123456789"
WEBHOOK = "whsec-env-redteam-abcdef"
LLM_KEY = "sk-env-redteam-adviser-42"
CASE = "no control-plane key reaches an experiment"
KEPT = "AJET_RUNNER_EXPERIMENT"  # the experiment's own marker, not a key


def _dumping(tmp_path: Path) -> tuple[Scenario, Path]:
    """The demo with its first command writing the job's whole environment to a JSON file."""
    sc = make("demo", tmp_path)
    short_sim(sc)
    dump = sc.workdir / "env.json"
    probe = sc.workdir / "env_probe.py"
    probe.write_text(PROBE)
    text = sc.blueprint.read_text()
    launcher = next(line for line in text.splitlines() if "-m ajet.launcher" in line)
    python = launcher.split()[0]
    sc.blueprint.write_text(text.replace(launcher, f"{python} {probe} {dump}\n{launcher}"))
    return sc, dump


# What a curious experiment reads: its own environment, and that of every ancestor (the wrapper, the tmux server
# that hosts it: a server keeps the environment it started with in /proc/<pid>/environ for its whole life).
PROBE = """
import json, os, sys
found, pid = {"job": dict(os.environ)}, os.getppid()
while pid > 1:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()
        name = open(f"/proc/{pid}/comm").read().strip()
        ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
    found[f"{name} (pid {pid})"] = dict(i.decode(errors="replace").partition("=")[::2] for i in raw.split(b"\\0") if i)
    pid = ppid
json.dump(found, open(sys.argv[1], "w"))
"""


def _planted(secrets: dict[str, str]) -> dict[str, str]:
    """Each secret copied under a name the control plane does not use (only its value can give it away)."""
    return {f"COPY_{i}": f"prefix {value} suffix" for i, value in enumerate(secrets.values())}


def _leaks(seen: dict[str, str], secrets: dict[str, str]) -> list[str]:
    """Every variable of the job that is the control plane's by name or holds one of its secrets or a Redis URL."""
    found = []
    for name, value in seen.items():
        by_name = (name.startswith("AJET_RUNNER_") and name != KEPT) or name in (
            "REDIS_URL", "REDIS_PASSWORD", "REDISCLI_AUTH", "RQ_REDIS_URL")
        by_value = [what for what, secret in secrets.items() if secret and secret in value]
        if by_name or by_value or re.search(r"\b(rediss?|unix)://", value):
            found.append(f"{name} ({', '.join(by_value) or 'name or URL'})")
    return found


def _row(mode: str, dump: Path, secrets: dict[str, str], withheld: list[str]) -> list[str]:
    """The row of one way of running: the job's environment and its ancestors' (`dump`) searched."""
    seen: dict[str, dict[str, str]] = json.loads(dump.read_text())
    assert "job" in seen and any(name.startswith("tmux") for name in seen), list(seen)  # the probe saw its server
    leaked = [f"{proc}: {leak}" for proc, env in seen.items() for leak in _leaks(env, secrets)]
    who = ", ".join(n.rsplit(" (pid", 1)[0] for n in seen)
    record(CASE, f"`{mode}`: env dumps of the job and its ancestors ({who}) "
           f"searched for {', '.join(secrets)} (those known beforehand also copied under another name), control-plane "
           "names and Redis URLs", len(secrets),
           f"{len(leaked)} leaked of {sum(map(len, seen.values()))} variables; {len(withheld)} held back from the job",
           passed=not leaked)
    return leaked


def _embedded_password(root: int) -> str:
    """The random password of the embedded Redis that process `root` started (read from its redis.conf)."""
    for proc in psutil.Process(root).children(recursive=True):
        try:
            found = re.search(r"unixsocket:(\S+)", " ".join(proc.cmdline()))
        except psutil.NoSuchProcess:
            continue
        if found and "redis-server" in proc.name():
            conf = Path(found.group(1)).parent / "redis.conf"
            password = re.search(r'requirepass "([^"]+)"', conf.read_text())
            return password.group(1) if password else ""
    return ""


@full
def test_a_run_s_environment_holds_no_control_plane_secret(tmp_path: Path, tmux_socket: str) -> None:
    sc, dump = _dumping(tmp_path)
    secrets = {"API token": TOKEN, "webhook secret": WEBHOOK, "adviser key": LLM_KEY}
    env = env_for(tmux_socket, AJET_RUNNER_TOKEN=TOKEN, AJET_RUNNER_WEBHOOK_SECRET=WEBHOOK,
                  AJET_RUNNER_LLM_API_KEY=LLM_KEY, **_planted(secrets))
    proc = subprocess.Popen([*CLI, "run", str(sc.blueprint)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out: list[str] = []
    threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
    try:
        password = wait_for(lambda: _embedded_password(proc.pid) or proc.poll() is not None, 60,
                            "run's embedded Redis")
        assert isinstance(password, str) and len(password) >= 16, "run's embedded Redis has no password"
        assert proc.wait(scaled(240)) == 0, "".join(out)[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)  # type: ignore[arg-type]
    secrets["embedded Redis password"] = password
    leaked = _row("run", dump, secrets, sc.results_json()["attempts"][0]["env_withheld"])
    assert leaked == []
    assert all(f"COPY_{i}" in sc.results_json()["attempts"][0]["env_withheld"] for i in range(3))


@full
def test_a_service_worker_s_experiment_holds_no_control_plane_secret(tmp_path: Path, tmux_socket: str) -> None:
    sc, dump = _dumping(tmp_path)
    tokens = tmp_path / "tokens"
    tokens.write_text("file-token-env-redteam-1\nfile-token-env-redteam-2\n")
    tokens.chmod(0o600)
    with redis_with_password(tmp_path) as (url, password):
        secrets = {"Redis URL": url, "Redis password": password, "API token": TOKEN,
                   "token file's tokens": "file-token-env-redteam-2", "webhook secret": WEBHOOK,
                   "adviser key": LLM_KEY}
        plain = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
        common = {"AJET_RUNNER_TOKEN": TOKEN, "AJET_RUNNER_WEBHOOK_SECRET": WEBHOOK, "AJET_RUNNER_LLM_API_KEY": LLM_KEY}
        wenv = worker_env(url, tmux_socket, **common, AJET_RUNNER_TOKEN_FILE=str(tokens), REDISCLI_AUTH=password,
                          **_planted(secrets))
        worker = subprocess.Popen([*CLI, "worker", "--node", "envn", "--gpus", "0"], env=wenv, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with serving({**plain, "REDIS_URL": url, **common}, tmp_path / "serve.log") as api:
                made = httpx.post(f"{api}/v1/experiments", json={"blueprint": sc.blueprint.read_text(), "node": "envn",
                                                                   "wait_for_node": True}, headers=auth, timeout=30)
                assert made.status_code == 201, made.text
                exp = made.json()["id"]
                wait_for(lambda: httpx.get(f"{api}/v1/experiments/{exp}", headers=auth, timeout=5).json()["state"]
                         == "finished", 240, "the run to finish")
        finally:
            kill_group(worker)
    leaked = _row("worker (service mode)", dump, secrets, sc.results_json()["attempts"][0]["env_withheld"])
    assert leaked == []


@full
def test_an_up_experiment_holds_no_control_plane_secret(tmp_path: Path) -> None:
    sc, dump = _dumping(tmp_path)
    secrets = {"webhook secret": WEBHOOK, "adviser key": LLM_KEY}
    env = clean_env(AJET_RUNNER_WEBHOOK_SECRET=WEBHOOK, AJET_RUNNER_LLM_API_KEY=LLM_KEY, **_planted(secrets))
    with running_up(tmp_path / "up", env, "--no-demo", "--node", "upn") as up:
        token = up.token()
        password = _embedded_password(up.proc.pid)
        assert len(password) >= 16, "up's embedded Redis has no password"
        auth = {"Authorization": f"Bearer {token}"}
        api = up.base
        made = httpx.post(f"{api}/v1/experiments", json={"blueprint": sc.blueprint.read_text(), "node": "upn",
                                                           "wait_for_node": True}, headers=auth, timeout=30)
        assert made.status_code == 201, made.text
        exp = made.json()["id"]
        wait_for(lambda: httpx.get(f"{api}/v1/experiments/{exp}", headers=auth, timeout=5).json()["state"]
                 == "finished", 240, "the run to finish")
    secrets.update({"API token (token file)": token, "embedded Redis password": password})
    leaked = _row("up", dump, secrets, sc.results_json()["attempts"][0]["env_withheld"])
    assert leaked == []

