"""`make chaos`: many short simulated experiments on 2 hosts while things are killed.

Redis and two worker hosts live in network namespaces (the hosts of
tests/integration/test_multihost.py); each host's tmux server is a session host
(`ajet-runner session-host`), which owns the experiments and outlives its workers. While the
experiments run, a seeded random schedule does, one at a time: kill -9 of a supervisor
(restarted a moment later), of a watcher (the process whose threads drive a node's runs; its
supervisor restarts it); once a Redis restart (SIGKILL,
restarted on its AOF); once a host cut off from the network and restored; once a worker
upgrade (the worker stopped with SIGTERM as `systemctl restart` does, a new worker process
started, while the runs go on in the session host, which must not restart: the new worker
re-adopts them). Then it waits for every experiment to finish and prints:

  submitted / finished / duplicate launches / lost / orphans / flags / time to recover

- duplicate launches: an attempt's log with the final validation printed more than once, or
  more attempt logs than attempts (a second copy of a run);
- lost: not finished by the deadline (or its record gone);
- orphans: once the workers are stopped cleanly, any watcher of this run left alive
  with ppid 1, or any process still carrying an experiment's marker;
- flags: experiments with exactly one finish.flag naming their id and outcome;
- time to recover: per disruption, seconds until both nodes heartbeat again (a killed
  supervisor: from its replacement's pid) and one more experiment has finished (runs under 50
  experiments: the heartbeats only); worst and median.
Exit 0 only when duplicates = lost = orphans = 0 and every experiment has its flag.

Then the failover scenario (tests/integration/failover.py), twice: Redis with Sentinel (a master, a replica, 3
sentinels), an API and two workers given only the sentinels, `--failover-experiments` short runs, the master
SIGKILLed once a third have finished and started again (it returns as a replica); the second time the
master first acknowledges 1.5 s of writes its replica never gets (stopped and cut off), which the promoted
replica then lacks. It prints runs finished,
flags, duplicates, lost, webhooks delivered (and runs notified twice), the seconds the API answered 503, when
it answered again after the switch.

Usage: python bench/chaos.py [--experiments 200] [--seed 1] [--slots 4] [--timeout 1800] [--failover-experiments 60]
The first part needs root and iproute2 (network namespaces); without them it is skipped with the reason (exit 77
when the failover scenario is off too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ajet_runner.service.embedded import find_redis_server  # noqa: E402
from ajet_runner.service.submit import submit  # noqa: E402
from ajet_runner.store.store import Store, exp_key  # noqa: E402
from tests.integration.failover import run_failover  # noqa: E402
from tests.integration.scenario import make  # noqa: E402
from tests.integration.test_multihost import Net  # noqa: E402
from tests.integration.workers import kill_group  # noqa: E402

SKIP = 77
HOSTS = ("a", "b")
DISRUPTIONS = ("supervisor", "watcher")  # plus one redis restart, one host cut, one upgrade, scheduled apart
FINAL_LINE = "Final validation metrics"


class CannotRun(RuntimeError):
    """The machine does not allow network namespaces (not root, no `ip`, a sandbox)."""


@dataclass
class Figures:
    submitted: int = 0
    finished: int = 0
    duplicate_launches: int = 0
    lost: int = 0
    orphans: int = 0
    flags_ok: int = 0
    recover_seconds: list[float] = field(default_factory=list)
    disruptions: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    wall_seconds: float = 0.0
    kept_through_upgrade: int = 0  # runs alive in the session host before and after a worker upgrade

    @property
    def passed(self) -> bool:
        return (self.duplicate_launches == 0 and self.lost == 0 and self.orphans == 0
                and self.flags_ok == self.submitted and self.finished == self.submitted)

    def lines(self) -> list[str]:
        worst = max(self.recover_seconds) if self.recover_seconds else 0.0
        median = sorted(self.recover_seconds)[len(self.recover_seconds) // 2] if self.recover_seconds else 0.0
        return [
            f"submitted          {self.submitted}",
            f"finished           {self.finished}   ({', '.join(f'{k} {v}' for k, v in sorted(self.outcomes.items()))})",
            f"duplicate launches {self.duplicate_launches}",
            f"lost               {self.lost}",
            f"orphans            {self.orphans}",
            f"one finish.flag    {self.flags_ok}/{self.submitted}",
            f"disruptions        {', '.join(f'{k} {v}' for k, v in sorted(self.disruptions.items()))}",
            f"upgrade            {self.kept_through_upgrade} running experiment(s) kept in the session host",
            f"time to recover    worst {worst:.1f} s, median {median:.1f} s",
            f"wall time          {self.wall_seconds:.0f} s",
            "RESULT             " + ("PASS" if self.passed else "FAIL"),
        ]


class Cluster:
    """Redis (AOF) and one worker per host, each in its network namespace."""

    def __init__(self, net: Net, work: Path, slots: int) -> None:
        self.net, self.work, self.slots = net, work, slots
        self.redis_ip = net.ip(1)
        self.url = f"redis://{self.redis_ip}:6379/0"
        self.sockets = {h: str(work / f"tmux-{h}.sock") for h in HOSTS}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.session_hosts: dict[str, subprocess.Popen[bytes]] = {}
        self.generation = dict.fromkeys(HOSTS, 1)  # worker "versions" started on each host
        self.redis: subprocess.Popen[bytes] | None = None

    def start_redis(self) -> None:
        self.redis = self.net.run("redis", [find_redis_server(), "--bind", self.redis_ip, "--port", "6379",
                                            "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                                            "--protected-mode", "no", "--dir", str(self.work)], dict(os.environ))

    def start_session_host(self, host: str) -> None:
        """The host's tmux server (`tmux -D`), started once: workers come and go, it stays."""
        env = {k: v for k, v in os.environ.items() if k != "AJET_RUNNER_CHAOS_RUN"}
        self.session_hosts[host] = self.net.run(host, [sys.executable, "-m", "cli", "session-host", "--socket",
                                                       self.sockets[host]], env)

    def sessions(self, host: str) -> set[str]:
        """The experiments' tmux sessions alive in the host's session host."""
        proc = subprocess.run(["tmux", "-S", self.sockets[host], "list-sessions", "-F", "#{session_name}"],
                              capture_output=True, text=True, check=False, timeout=10)
        return {ln for ln in proc.stdout.split() if ln.startswith("ajet_")}

    def start_worker(self, host: str) -> None:
        env = {**os.environ, "REDIS_URL": self.url, "AJET_RUNNER_TMUX_SOCKET": self.sockets[host],
               "AJET_RUNNER_LEASE_SECONDS": "3", "AJET_RUNNER_POLL_INTERVAL": "0.2",
               "AJET_RUNNER_STOP_GRACE_SECONDS": "5", "AJET_RUNNER_CHAOS_RUN": self.url,
               "AJET_RUNNER_CHAOS_GENERATION": str(self.generation[host])}
        self.workers[host] = self.net.run(host, [sys.executable, "-m", "cli", "worker", "--node",
                                                 f"host-{host}", "--gpus", "0", "--slots", str(self.slots)], env)

    def tree(self, host: str) -> list[psutil.Process]:
        proc = self.workers.get(host)
        if proc is None or proc.poll() is not None:
            return []
        with contextlib.suppress(psutil.NoSuchProcess):
            return psutil.Process(proc.pid).children(recursive=True)
        return []


def _ping(store: Store) -> bool:
    try:
        return bool(store.r.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _wait(cond, timeout: float, interval: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if cond():
                return True
        time.sleep(interval)
    return False


def _scenarios(work: Path, n: int, steps: int = 4, step_seconds: float = 0.3) -> list:  # type: ignore[type-arg]
    out = []
    for i in range(n):
        sc = make("demo", work / f"exp{i:04d}")
        yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
        text = yaml_path.read_text().replace("total_training_steps: 10", f"total_training_steps: {steps}")
        yaml_path.write_text(text.replace("step_seconds: 1.0", f"step_seconds: {step_seconds}"))
        out.append(sc)
    return out


def _finished_count(store: Store, ids: list[str]) -> int:
    pipe = store.r.pipeline(transaction=False)
    for i in ids:
        pipe.hget(exp_key(i), "state")
    return sum(1 for s in pipe.execute() if s == b"finished")


def _both_alive(store: Store, cluster: Cluster | None = None) -> bool:
    """Both nodes heartbeat now (within 3 s) -- from the current supervisor's pid, when known."""
    now = time.time()
    nodes = {n["name"]: n for n in store.nodes.all() if now - float(n.get("last_seen", 0)) < 3}
    for host in HOSTS:
        info = nodes.get(f"host-{host}")
        if info is None:
            return False
        if cluster is not None and int(info.get("pid") or 0) != cluster.workers[host].pid:
            return False
    return True


class ChaosBroken(RuntimeError):
    """The set-up itself failed (e.g. the session host restarted): the figures would mean nothing."""


def _upgrade(cluster: Cluster, host: str, figures: Figures, store: Store) -> str:
    """Replace the host's worker by a new process, as an upgrade does (`systemctl restart` sends
    SIGTERM: the drivers hand their runs back, the runs stay in the session host)."""
    session_host = cluster.session_hosts[host]
    running = {str(r.get("tmux_session")) for r in store.records.unfinished()
               if r.get("node") == f"host-{host}" and r.get("state") == "running"}  # not lingering panes
    hosted = running & cluster.sessions(host)
    if not hosted:
        return ""  # an upgrade under no running experiment proves nothing: later
    proc = cluster.workers[host]
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        kill_group(proc)
    cluster.generation[host] += 1
    cluster.start_worker(host)
    kept = hosted & cluster.sessions(host)
    figures.kept_through_upgrade += len(kept)
    if session_host.poll() is not None:
        raise ChaosBroken(f"the session host of {host} exited during the upgrade ({session_host.returncode})")
    return f"upgrade@{host} ({len(kept)}/{len(hosted)} running experiments kept in the session host)"


def _disrupt(cluster: Cluster, kind: str, rng: random.Random, store: Store, figures: Figures) -> str:
    host = rng.choice(HOSTS)
    if kind == "upgrade":
        return _upgrade(cluster, host, figures, store)
    if kind == "supervisor":
        proc = cluster.workers[host]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)  # the supervisor only: its watcher must die with it
        proc.wait(10)
        time.sleep(rng.uniform(0.5, 3.0))
        cluster.start_worker(host)
        return f"supervisor@{host}"
    if kind == "watcher":
        pool = [p for p in cluster.tree(host) if "ajet_runner.workers.node.watcher" in " ".join(p.cmdline())]
        if not pool:
            return ""
        with contextlib.suppress(psutil.NoSuchProcess):
            rng.choice(pool).kill()
        return f"{kind}@{host}"
    if kind == "redis":
        assert cluster.redis is not None
        kill_group(cluster.redis)
        time.sleep(rng.uniform(1.0, 3.0))
        cluster.start_redis()
        _wait(lambda: _ping(store), 30)
        return "redis-restart"
    if kind == "cut":
        cluster.net.link(host, up=False)
        time.sleep(rng.uniform(6.0, 10.0))  # past the 3 s lease: the other host must not take its runs
        cluster.net.link(host, up=True)
        return f"cut@{host}"
    raise ValueError(kind)


def _orphans(url: str, ids: set[str]) -> int:
    """Processes of this run left behind once the workers were stopped."""
    count = 0
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            orphan_watcher = (env.get("AJET_RUNNER_CHAOS_RUN") == url and proc.ppid() == 1
                              and "ajet_runner.workers.node.watcher" in " ".join(proc.cmdline()))
            if orphan_watcher or env.get("AJET_RUNNER_EXPERIMENT") in ids:
                count += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return count


def _judge(store: Store, ids: list[str], scenarios: list, figures: Figures) -> None:  # type: ignore[type-arg]
    for exp_id, sc in zip(ids, scenarios, strict=True):
        rec = store.records.raw(exp_id)
        if rec is None or rec.get("state") != "finished":
            figures.lost += 1
            print(f"  lost: {exp_id} ({(rec or {}).get('state', 'no record')})")
            continue
        figures.finished += 1
        figures.outcomes[str(rec.get("outcome"))] += 1
        logs = sorted((sc.results / "logs").glob("attempt-*.log"))
        finals = sum(p.read_text(errors="replace").count(FINAL_LINE) for p in logs)
        attempts = int(rec.get("attempt") or 0)
        if len(logs) > attempts or finals > 1:
            figures.duplicate_launches += 1
            print(f"  duplicate: {exp_id} ({len(logs)} logs for {attempts} attempt(s), {finals} final lines)")
            for e in store.events.read(exp_id):  # what happened, for the diagnosis
                print("    " + " ".join(f"{k}={e[k]}" for k in ("at", "type", "trigger", "owner", "state", "node",
                                                                  "attempt", "message") if e.get(k) is not None)[:300])
            for p in logs:
                text = p.read_text(errors="replace").splitlines()
                print(f"    {p.name}: {len(text)} lines; " + " | ".join(t[:80] for t in text if FINAL_LINE in t
                                                                         or "ajet-runner" in t)[:600])
        flags = list(sc.results.glob("finish.flag*"))
        try:
            flag = json.loads((sc.results / "finish.flag").read_text())
        except (OSError, ValueError):
            flag = {}
        if len(flags) == 1 and flag.get("id") == exp_id and flag.get("outcome") == rec.get("outcome"):
            figures.flags_ok += 1
        else:
            print(f"  flag: {exp_id} flags={[p.name for p in flags]} flag={flag} outcome={rec.get('outcome')}")


def run_chaos(n: int, seed: int, slots: int, timeout: float, work: Path, out=print,  # type: ignore[no-untyped-def]  # noqa: C901 - one scenario loop: its phases read in order
              steps: int = 4, step_seconds: float = 0.3) -> Figures:
    if os.geteuid() != 0 or not shutil.which("ip"):
        raise CannotRun("network namespaces need root and iproute2 (`ip`)")
    rng = random.Random(seed)
    net = Net(suffix=secrets.token_hex(2), subnet=f"10.232.{secrets.randbelow(250) + 1}")  # never a twin run's
    figures = Figures(submitted=n)
    try:
        try:
            subprocess.run(["ip", "link", "add", net.bridge, "type", "bridge"], check=True, capture_output=True,
                           text=True)
        except subprocess.CalledProcessError as exc:
            raise CannotRun(f"network namespaces are not permitted here: {exc.stderr.strip()}") from exc
        subprocess.run(["ip", "addr", "add", f"{net.ip(254)}/24", "dev", net.bridge], check=True)
        subprocess.run(["ip", "link", "set", net.bridge, "up"], check=True)
        for i, host in enumerate(("redis", *HOSTS), start=1):
            net.add_host(host, i)
        cluster = Cluster(net, work, slots)
        cluster.start_redis()
        store = Store.from_url(cluster.url)
        if not _wait(lambda: _ping(store), 30):
            raise RuntimeError("redis did not start in its namespace")
        for host in HOSTS:
            cluster.start_session_host(host)
        if not _wait(lambda: all(os.path.exists(cluster.sockets[h]) for h in HOSTS), 30):
            raise RuntimeError("the session hosts did not start")
        for host in HOSTS:
            cluster.start_worker(host)
        if not _wait(lambda: _both_alive(store), 60):
            raise RuntimeError("the workers did not register")
        scenarios = _scenarios(work, n, steps, step_seconds)
        t0 = time.monotonic()
        ids = [submit(store, sc.blueprint.read_text())["id"] for sc in scenarios]
        out(f"submitted {n} experiments; chaos begins")
        # Redis restart, worker upgrade and host cut happen once each, at a third, a half and two thirds of
        # the way (a short run is over too soon for that: there they follow the first round of kills at once,
        # one after the other, so that each lands while runs are in flight however fast they finish).
        special = ([(max(1, n // 3), "redis"), (max(2, n // 2), "upgrade"), (max(3, 2 * n // 3), "cut")] if n >= 50
                   else [(0, "upgrade"), (0, "redis"), (0, "cut")])
        done_special: set[str] = set()
        first = rng.sample(DISRUPTIONS, len(DISRUPTIONS))  # each kind at least once, early
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            finished = _wait_count(store, ids)
            if finished >= n:
                break
            kind = "" if first else next((k for at, k in special
                                          if finished >= at and k not in done_special), "")
            from_first = False
            if kind:
                done_special.add(kind)
            else:
                from_first = bool(first)
                kind = first.pop() if first else rng.choice(DISRUPTIONS)
            before = finished
            what = _disrupt(cluster, kind, rng, store, figures)
            if not what:  # nothing of that kind alive right now (e.g. no watcher between restarts): try it again later
                if from_first:
                    first.insert(0, kind)
                done_special.discard(kind)
                time.sleep(0.5)
                continue
            at = time.monotonic()
            figures.disruptions[kind] += 1
            # A short run (the one in `make test`) cannot wait for a finish after each of its six disruptions
            # (its runs end in two or three bursts): there, recovered = both nodes heartbeat again.
            ok = _wait(lambda b=before: _both_alive(store, cluster) and (  # type: ignore[misc]
                n < 50 or _finished_count(store, ids) > b or _finished_count(store, ids) >= n), 120)
            figures.recover_seconds.append(time.monotonic() - at if ok else float("inf"))
            out(f"  {what:<16} recovered in {figures.recover_seconds[-1]:.1f} s "
                f"({_wait_count(store, ids)}/{n} finished)")
            time.sleep(rng.uniform(1.0, 4.0))
        _wait(lambda: _finished_count(store, ids) >= n, max(0.0, deadline - time.monotonic()), interval=1.0)
        figures.wall_seconds = time.monotonic() - t0
        # A clean stop: SIGTERM to the supervisors (they stop their watchers), then count what is left.
        for proc in cluster.workers.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in cluster.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        time.sleep(1.0)
        figures.orphans = _orphans(cluster.url, set(ids))
        _judge(store, ids, scenarios, figures)
        for host, sock in cluster.sockets.items():
            if cluster.session_hosts[host].poll() is not None:
                raise ChaosBroken(f"the session host of {host} exited during the run")
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
    finally:
        for proc in net.procs:
            kill_group(proc)
        for ns in net.hosts.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", net.bridge], capture_output=True, check=False)
    return figures


def _wait_count(store: Store, ids: list[str]) -> int:
    """Finished so far (0 while Redis is briefly away)."""
    try:
        return _finished_count(store, ids)
    except Exception:  # noqa: BLE001 - redis restarting
        return 0


def failover(n: int, slots: int, timeout: float, lose_seconds: float = 0.0) -> bool:
    """The Sentinel failover scenario; prints its figures, returns whether it passed. `lose_seconds`: the master
    first acknowledges that long of writes no replica gets (the loss asynchronous replication allows)."""
    with tempfile.TemporaryDirectory(prefix="ajet-failover-") as tmp:
        sock = str(Path(tmp) / "tmux.sock")
        try:
            figures = run_failover(Path(tmp), sock, n=n, slots=slots, restart_old=True, timeout=timeout,
                                   out=lambda line: print(f"  {line}", flush=True), lose_writes_seconds=lose_seconds)
        finally:
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
    lost = f", after {lose_seconds:g} s of writes no replica got" if lose_seconds else ""
    print(f"Redis Sentinel failover (master SIGKILL mid-sweep{lost}, the old master back as a replica):")
    print("\n".join(figures.lines()))
    for problem in figures.problems:
        print(f"  {problem}")
    return figures.passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--failover-experiments", type=int, default=60, help="0: no failover scenario")
    parser.add_argument("--no-namespaces", action="store_true", help="only the failover scenario")
    args = parser.parse_args(argv)
    passed, ran = True, False
    if not args.no_namespaces and args.experiments > 0:
        with tempfile.TemporaryDirectory(prefix="ajet-chaos-") as tmp:
            try:
                figures = run_chaos(args.experiments, args.seed, args.slots, args.timeout, Path(tmp))
                print("\n".join(figures.lines()))
                passed, ran = figures.passed, True
            except CannotRun as exc:
                print(f"chaos: cannot run here: {exc}", file=sys.stderr)
    if args.failover_experiments > 0:
        passed = failover(args.failover_experiments, args.slots, args.timeout) and passed
        passed = failover(args.failover_experiments, args.slots, args.timeout, lose_seconds=1.5) and passed
        ran = True
    if not ran:
        return SKIP
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
