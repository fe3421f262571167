"""A real Redis Sentinel set-up for tests and `make chaos`: a master, a replica and 3 sentinels, each a
redis-server child process on a free loopback port with its own dir (sentinels rewrite their config file),
stopped by its pid. The recipe measured in ../shared/executors-notes.md: down-after 2 s, failover timeout
10 s; a SIGKILLed master is replaced in about 3.3 s."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from ajet_runner.service.embedded import find_redis_server
from ajet_runner.store.connection import RedisTarget
from ajet_runner.store.redis_server import free_port

MASTER_NAME = "ajet"
DOWN_AFTER_MS = 2000
FAILOVER_TIMEOUT_MS = 10000


@dataclass
class Member:
    name: str
    port: int
    conf: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, workdir: Path, *extra: str) -> None:
        log = open(workdir / f"{self.name}.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen([find_redis_server(), str(self.conf), *self.args, *extra], stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def kill(self) -> None:
        """SIGKILL, by our own child's pid."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class SentinelCluster:
    """`with SentinelCluster() as c:` → c.target (what clients use), c.kill_master(), c.restart(old)."""

    password: str = ""
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ajet-sentinel-")))
    servers: list[Member] = field(default_factory=list)
    sentinels: list[Member] = field(default_factory=list)

    @property
    def target(self) -> RedisTarget:
        return RedisTarget(sentinels=tuple(("127.0.0.1", s.port) for s in self.sentinels), master=MASTER_NAME,
                           password=self.password)

    def env(self) -> dict[str, str]:
        """The settings a worker or API process gets (and no REDIS_URL)."""
        return self.target.env()

    def _server_conf(self, name: str, port: int, replica_of: int | None) -> Path:
        path = self.workdir / f"{name}.conf"
        lines = [f"port {port}", "bind 127.0.0.1", "protected-mode no", f"dir {self.workdir}",
                 f"dbfilename {name}.rdb", 'save ""', "appendonly no", "daemonize no", "loglevel warning"]
        if self.password:
            lines += [f"requirepass {self.password}", f"masterauth {self.password}"]
        if replica_of:
            lines.append(f"replicaof 127.0.0.1 {replica_of}")
        path.write_text("\n".join(lines) + "\n")
        return path

    def _sentinel_conf(self, name: str, port: int, master_port: int) -> Path:
        path = self.workdir / f"{name}.conf"
        lines = [f"port {port}", "bind 127.0.0.1", "protected-mode no", f"dir {self.workdir}", "daemonize no",
                 "loglevel notice", f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2",
                 f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                 f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
                 f"sentinel parallel-syncs {MASTER_NAME} 1"]
        if self.password:
            lines += [f"sentinel auth-pass {MASTER_NAME} {self.password}", f"requirepass {self.password}"]
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self, timeout: float = 30.0) -> SentinelCluster:
        master_port, replica_port = free_port(), free_port()
        self.servers = [Member("master", master_port, self._server_conf("master", master_port, None), []),
                        Member("replica", replica_port, self._server_conf("replica", replica_port, master_port), [])]
        for server in self.servers:
            server.start(self.workdir)
        for i in range(3):
            port = free_port()
            self.sentinels.append(Member(f"sentinel{i}", port, self._sentinel_conf(f"sentinel{i}", port, master_port),
                                         ["--sentinel"]))
        for s in self.sentinels:
            s.start(self.workdir)
        try:
            self._wait_ready(timeout)
        except Exception:
            self.stop()
            raise
        return self

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis("127.0.0.1", port, password=self.password or None, socket_timeout=1,
                           socket_connect_timeout=1)

    def _wait_ready(self, timeout: float) -> None:
        """Until the replica is in sync and every sentinel sees the master, the replica and 2 other sentinels."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                info = self._client(self.servers[1].port).info("replication")
                ready = info.get("master_link_status") == "up"
                for s in self.sentinels:
                    state = self._client(s.port).sentinel_master(MASTER_NAME)
                    ready = ready and int(state.get("num-slaves", 0)) >= 1 and \
                        int(state.get("num-other-sentinels", 0)) >= 2
                if ready:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the sentinel set-up was not ready within {timeout:.0f} s (logs in {self.workdir})")

    def master_port(self) -> int | None:
        """The master's port as the sentinels' majority name it now (None while none is named)."""
        seen: list[int] = []
        for s in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                addr = self._client(s.port).sentinel_get_master_addr_by_name(MASTER_NAME)
                if addr:
                    seen.append(int(addr[1]))
        return max(set(seen), key=seen.count) if seen else None

    def member_on(self, port: int) -> Member:
        return next(m for m in self.servers if m.port == port)

    def kill_master(self) -> Member:
        """SIGKILL the current master; returns it (to restart it later as a replica)."""
        port = self.master_port()
        assert port is not None, "no master named"
        member = self.member_on(port)
        member.kill()
        return member

    def kill_master_losing_writes(self, seconds: float) -> Member:
        """SIGKILL the master after `seconds` in which it acknowledged writes no replica got: every replica is
        stopped (SIGSTOP) and cut off (CLIENT KILL TYPE replica, so what follows is never sent), then the
        master dies and the replicas go on (SIGCONT) missing those writes. Replication is asynchronous: this
        is the loss a failover can cause, made wide enough to hit the runner's writes."""
        port = self.master_port()
        assert port is not None, "no master named"
        replicas = [m for m in self.servers if m.port != port and m.process and m.process.poll() is None]
        for m in replicas:
            assert m.process is not None
            m.process.send_signal(signal.SIGSTOP)
        try:
            client = self._client(port)
            client.client_kill_filter(_type="replica")
            client.close()
            time.sleep(seconds)
            member = self.member_on(port)
            member.kill()
        finally:
            for m in replicas:
                assert m.process is not None
                m.process.send_signal(signal.SIGCONT)
        return member

    def wait_switch(self, old_port: int, timeout: float = 30.0) -> float:
        """Seconds until every sentinel names a master other than `old_port` that answers PING."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            ports = set()
            for s in self.sentinels:
                with contextlib.suppress(redis.RedisError):
                    addr = self._client(s.port).sentinel_get_master_addr_by_name(MASTER_NAME)
                    ports.add(int(addr[1]) if addr else None)
            if len(ports) == 1 and old_port not in ports and None not in ports and _answers_auth(
                    self._client(next(iter(ports)))):  # type: ignore[arg-type]
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"no failover from port {old_port} within {timeout:.0f} s (logs in {self.workdir})")

    def wait_master_down(self, timeout: float = 30.0) -> None:
        """Until every sentinel flags the master it names as down (then clients find no master)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            flags = []
            for s in self.sentinels:
                with contextlib.suppress(redis.RedisError):
                    flags.append(str(self._client(s.port).sentinel_master(MASTER_NAME).get("flags", "")))
            if len(flags) == len(self.sentinels) and all("s_down" in f for f in flags):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the sentinels did not see the master down within {timeout:.0f} s")

    def restart(self, member: Member) -> None:
        """Start a killed server again on its port as a replica of the master the sentinels name now, as the
        chart's start script does. (Started as a master, an empty server takes writes meant for the new
        master until the sentinels reconfigure it, seconds later: clients that asked the sentinels just
        before the switch connect to it.)"""
        port = self.master_port()
        assert port is not None and port != member.port, "no new master named"
        member.start(self.workdir, "--replicaof", "127.0.0.1", str(port))

    def wait_replica(self, member: Member, timeout: float = 30.0) -> float:
        """Seconds until `member` is a replica in sync with the current master."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with contextlib.suppress(redis.RedisError):
                info = self._client(member.port).info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError(f"{member.name} did not rejoin as a replica within {timeout:.0f} s")

    def stop(self) -> None:
        for m in [*self.sentinels, *self.servers]:
            m.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SentinelCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _answers_auth(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


__all__ = ["MASTER_NAME", "Member", "SentinelCluster"]
