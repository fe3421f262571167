"""A Redis Sentinel failover under a batch of short simulated runs, shared by the integration test
(tests/integration/test_sentinel_failover.py) and `make chaos` (bench/chaos.py).

Real processes only: a master, a replica and 3 sentinels (tests/sentinel_cluster.py), an `ajet-runner serve`
and two `ajet-runner worker` nodes configured with the sentinels (no REDIS_URL), the simulated AgentJet runs
in a private tmux server. Mid-batch the master is SIGKILLed; optionally the old master is started again (the
sentinels make it a replica). The API is polled all along (an authenticated list every 0.1 s) to measure
the seconds it answered 503, and when it answered again after the switch.

Judged like the chaos run: finished (record finished), lost (not finished by the deadline), duplicate
launches (more attempt logs than attempts, or the final validation printed twice), one finish.flag naming
the run and its outcome, and every run's `experiment_finished` webhook delivered by the outbox (to a receiver
on loopback); runs notified under two delivery ids are counted (a retried write must not queue a second one).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from ajet_runner.store.connection import store_at
from ajet_runner.store.redis_server import free_port
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, Scenario, make
from tests.integration.webhook_receiver import WebhookReceiver
from tests.integration.workers import kill_group
from tests.load import scaled
from tests.sentinel_cluster import SentinelCluster

FINAL_LINE = "Final validation metrics"
TOKEN = "failover-token"


@dataclass
class FailoverFigures:
    submitted: int = 0
    finished: int = 0
    lost: int = 0
    duplicate_launches: int = 0
    flags_ok: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    finished_before_kill: int = 0
    switch_seconds: float = 0.0  # SIGKILL of the master → every sentinel names the new one
    api_back_seconds: float = 0.0  # the switch → the API's first 200 after it
    api_503_seconds: float = 0.0  # time the API answered 503 (or not at all) around the failover
    api_other_errors: int = 0  # answers other than 200/503 (should be 0)
    api_slowest_seconds: float = 0.0  # the longest one request waited (its Redis calls retried through the switch)
    rejoin_seconds: float = 0.0  # the old master restarted → a replica in sync (0: not restarted)
    workers_kept: bool = False  # the same worker (supervisor) processes served before and after
    watcher_restarts: int = 0  # watcher processes replaced by their supervisor
    switch_seen: int = 0  # supervisors that saw the master move (and re-read their runs at once)
    records_restored: int = 0  # runs whose driver restored a record a failover had set back
    adoptions: int = 0  # re-adoptions queued by a supervisor (adoption events), e.g. of a finish the failover lost
    webhooks_delivered: int = 0  # runs whose `experiment_finished` webhook reached the receiver (the outbox)
    webhook_doubles: int = 0  # runs notified under more than one delivery id (a second notice, not a retry)
    wall_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (self.finished == self.submitted and self.lost == 0 and self.duplicate_launches == 0
                and self.flags_ok == self.submitted and self.webhooks_delivered == self.submitted)

    def lines(self) -> list[str]:
        return [
            f"submitted          {self.submitted}",
            f"finished           {self.finished}   ({', '.join(f'{k} {v}' for k, v in sorted(self.outcomes.items()))};"
            f" {self.finished_before_kill} before the master was killed)",
            f"duplicate launches {self.duplicate_launches}",
            f"lost               {self.lost}",
            f"one finish.flag    {self.flags_ok}/{self.submitted}",
            f"webhooks           {self.webhooks_delivered}/{self.submitted} runs notified; {self.webhook_doubles} "
            "notified twice (under two delivery ids)",
            f"switch             {self.switch_seconds:.1f} s from SIGKILL to a new master named by every sentinel",
            f"API                503 for {self.api_503_seconds:.1f} s; answered again {self.api_back_seconds:.1f} s "
            f"after the switch; slowest answer {self.api_slowest_seconds:.1f} s; "
            f"{self.api_other_errors} other error(s)",
            "old master         " + (f"back as a replica in {self.rejoin_seconds:.1f} s" if self.rejoin_seconds
                                      else "not restarted"),
            f"workers            {'the same processes' if self.workers_kept else 'REPLACED'}; "
            f"{self.watcher_restarts} watcher restart(s) by their supervisor; {self.switch_seen} of 2 supervisors "
            f"saw the master move; {self.records_restored} record(s) restored after lost writes; "
            f"{self.adoptions} re-adoption(s)",
            f"wall time          {self.wall_seconds:.0f} s",
            "RESULT             " + ("PASS" if self.passed else "FAIL"),
        ]


def short_runs(work: Path, n: int, steps: int = 4, step_seconds: float = 0.3) -> list[Scenario]:
    """`n` demo blueprints of `steps` training steps of `step_seconds` each (a few seconds a run)."""
    out = []
    for i in range(n):
        sc = make("demo", work / f"exp{i:03d}")
        yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
        text = yaml_path.read_text().replace("total_training_steps: 10", f"total_training_steps: {steps}")
        yaml_path.write_text(text.replace("step_seconds: 1.0", f"step_seconds: {step_seconds}"))
        out.append(sc)
    return out


def process_env(cluster: SentinelCluster, tmux_socket: str, **extra: str) -> dict[str, str]:
    """A worker's or the API's environment: the sentinels, never REDIS_URL."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update({**cluster.env(), "AJET_RUNNER_TMUX_SOCKET": tmux_socket, "AJET_RUNNER_LEASE_SECONDS": "3",
                "AJET_RUNNER_POLL_INTERVAL": "0.2", "AJET_RUNNER_STOP_GRACE_SECONDS": "5",
                "AJET_RUNNER_TOKEN": TOKEN, **extra})
    return env


class ApiProbe:
    """Polls the API in a thread: when it answered what."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, int]] = []  # (monotonic, status; 0: no answer)
        self.slowest = 0.0  # the longest a request waited for its answer (the client's retries ride a failover)
        self.odd: list[str] = []  # answers other than 200 and 503, with their bodies
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="api-probe")

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=15) as c:
            while not self._stop.is_set():
                t = time.monotonic()
                try:
                    resp = c.get("/v1/experiments", params={"limit": 1})
                    code = resp.status_code
                    if code not in (200, 503):
                        self.odd.append(f"{code}: {resp.text[:300]}")
                except httpx.TransportError:
                    code = 0
                self.samples.append((t, code))
                self.slowest = max(self.slowest, time.monotonic() - t)
                self._stop.wait(0.1)

    def __enter__(self) -> ApiProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(20)

    def unavailable_seconds(self) -> float:
        """Sum of the gaps between a 503 (or no answer) and the next sample."""
        total = 0.0
        for (t, code), (t_next, _) in zip(self.samples, self.samples[1:], strict=False):
            if code in (0, 503):
                total += t_next - t
        return total

    def first_ok_after(self, t0: float) -> float | None:
        return next((t for t, code in self.samples if t >= t0 and code == 200), None)


def start_serve(env: dict[str, str], log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([*CLI, "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return url, proc
        time.sleep(0.2)
    kill_group(proc)
    raise RuntimeError(f"serve did not get ready: {log.read_text()[-2000:]}")


def start_worker(env: dict[str, str], node: str, log: Path, slots: int) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([*CLI, "worker", "--node", node, "--gpus", "0", "--slots", str(slots)], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def watchers(proc: subprocess.Popen[bytes]) -> set[int]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return {p.pid for p in psutil.Process(proc.pid).children(recursive=True)
                if "ajet_runner.workers.node.watcher" in " ".join(p.cmdline())}
    return set()


def _states(store: Store, ids: list[str]) -> dict[str, str]:
    recs = store.records.fields_of(ids, ("state",))
    return {r["id"]: str(r.get("state") or "") for r in recs}


def judge(store: Store, ids: list[str], runs: list[Scenario], figures: FailoverFigures) -> None:
    for exp_id, sc in zip(ids, runs, strict=True):
        rec = store.records.raw(exp_id)
        if rec is None or rec.get("state") != "finished":
            figures.lost += 1
            figures.problems.append(f"lost: {exp_id} ({(rec or {}).get('state', 'no record')})")
            continue
        figures.finished += 1
        figures.adoptions += sum(1 for e in store.events.read(exp_id) if e.get("type") == "adoption")
        outcome = str(rec.get("outcome"))
        figures.outcomes[outcome] = figures.outcomes.get(outcome, 0) + 1
        logs = sorted((sc.results / "logs").glob("attempt-*.log"))
        finals = sum(p.read_text(errors="replace").count(FINAL_LINE) for p in logs)
        attempts = int(rec.get("attempt") or 0)
        if len(logs) > attempts or finals > 1:
            figures.duplicate_launches += 1
            figures.problems.append(f"duplicate: {exp_id} ({len(logs)} logs for {attempts} attempt(s), "
                                    f"{finals} final lines)")
        flags = list(sc.results.glob("finish.flag*"))
        try:
            flag = json.loads((sc.results / "finish.flag").read_text())
        except (OSError, ValueError):
            flag = {}
        if len(flags) == 1 and flag.get("id") == exp_id and flag.get("outcome") == outcome:
            figures.flags_ok += 1
        else:
            figures.problems.append(f"flag: {exp_id} {[p.name for p in flags]} {flag} outcome={outcome}")


WEBHOOK_WAIT_SECONDS = 60.0  # after the last run finished: the outbox's deliverers post what is left


def notified(hook: WebhookReceiver) -> dict[str, set[str]]:
    """Run id -> the delivery ids its `experiment_finished` webhooks came under."""
    out: dict[str, set[str]] = {}
    for got in hook.of_type("experiment_finished"):
        out.setdefault(str(got.json.get("id")), set()).add(str(got.json.get("delivery")))
    return out


def count_webhooks(hook: WebhookReceiver, ids: list[str], figures: FailoverFigures, until: float) -> None:
    """Wait (until `until`) for every run's finish webhook, then count who was notified, and who twice."""
    while not set(ids) <= set(notified(hook)) and time.monotonic() < until:
        time.sleep(0.2)
    got = notified(hook)
    figures.webhooks_delivered = sum(1 for i in ids if i in got)
    figures.webhook_doubles = sum(1 for i in ids if len(got.get(i, ())) > 1)
    figures.problems += [f"no webhook: {i}" for i in ids if i not in got]
    figures.problems += [f"webhook twice: {i} {sorted(got[i])}" for i in ids if len(got.get(i, ())) > 1]


def run_failover(work: Path, tmux_socket: str, n: int = 12, slots: int = 3, restart_old: bool = True,
                 kill_after_finished: int | None = None, timeout: float = 240.0,
                 out: object = None, lose_writes_seconds: float = 0.0) -> FailoverFigures:
    """The whole scenario; returns its figures (never raises on a bad result: the caller judges)."""
    say = out if callable(out) else (lambda *_: None)
    figures = FailoverFigures(submitted=n)
    t_start = time.monotonic()
    runs = short_runs(work / "runs", n)
    kill_at = n // 3 if kill_after_finished is None else kill_after_finished
    with SentinelCluster() as cluster, WebhookReceiver() as hook:
        env = process_env(cluster, tmux_socket, AJET_RUNNER_WEBHOOK_URL=hook.url)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            url, api = start_serve(env, work / "serve.log")
            procs.append(api)
            workers = [start_worker(env, f"node-{x}", work / f"worker-{x}.log", slots) for x in "ab"]
            procs += workers
            store = store_at(cluster.target, socket_timeout=5, socket_connect_timeout=2)
            deadline = time.monotonic() + scaled(60)
            while {n_["name"] for n_ in store.nodes.all()} < {"node-a", "node-b"}:
                assert time.monotonic() < deadline, "the workers did not register"
                assert all(w.poll() is None for w in workers), "a worker exited at start"
                time.sleep(0.2)
            before_watchers = set().union(*(watchers(w) for w in workers))
            with ApiProbe(url) as probe, httpx.Client(base_url=url, timeout=30,
                                                        headers={"Authorization": f"Bearer {TOKEN}"}) as api_c:
                ids = []
                for sc in runs:
                    resp = api_c.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text(),
                                                               "blueprint_path": str(sc.blueprint)})
                    assert resp.status_code == 201, resp.text
                    ids.append(resp.json()["id"])
                say(f"submitted {n} runs; the master is killed once {kill_at} have finished")
                while sum(s == "finished" for s in _states(store, ids).values()) < kill_at:
                    assert time.monotonic() - t_start < timeout, "runs did not finish before the kill"
                    time.sleep(0.1)
                states = _states(store, ids)
                figures.finished_before_kill = sum(s == "finished" for s in states.values())
                say(f"killing the master: {sorted(states.values())}")
                old_port = cluster.master_port() or 0
                old = (cluster.kill_master_losing_writes(lose_writes_seconds) if lose_writes_seconds
                       else cluster.kill_master())
                killed_at = time.monotonic()
                figures.switch_seconds = cluster.wait_switch(old_port)
                switched_at = killed_at + figures.switch_seconds
                say(f"switch after {figures.switch_seconds:.1f} s")
                if restart_old:
                    cluster.restart(old)
                    figures.rejoin_seconds = cluster.wait_replica(old, timeout=60)
                    say(f"old master back as a replica after {figures.rejoin_seconds:.1f} s")
                while True:
                    with contextlib.suppress(Exception):
                        if all(s == "finished" for s in _states(store, ids).values()):
                            break
                    if time.monotonic() - t_start > timeout:
                        break
                    time.sleep(0.2)
                back = probe.first_ok_after(switched_at)
                figures.api_back_seconds = (back - switched_at) if back is not None else float("inf")
            count_webhooks(hook, ids, figures, until=max(time.monotonic() + WEBHOOK_WAIT_SECONDS, t_start + timeout))
            figures.api_503_seconds = probe.unavailable_seconds()
            figures.api_slowest_seconds = probe.slowest
            figures.api_other_errors = sum(1 for _, c in probe.samples if c not in (0, 200, 503))
            figures.problems += [f"API answered {odd}" for odd in probe.odd]
            figures.workers_kept = all(w.poll() is None for w in workers)
            after_watchers = set().union(*(watchers(w) for w in workers))
            figures.watcher_restarts = len(after_watchers - before_watchers)
            judge(store, ids, runs, figures)
            logs = [(work / f"worker-{x}.log").read_text(errors="replace") for x in "ab"]
            figures.switch_seen = sum("the Redis master moved" in text for text in logs)
            figures.records_restored = sum(text.count("restoring it from the driver's state") for text in logs)
            store.close()
        finally:
            for p in procs:
                kill_group(p)
    figures.wall_seconds = time.monotonic() - t_start
    return figures
