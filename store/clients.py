"""Where Redis is, and the one place its clients are made: the API, the node's supervisor, watcher and RQ slot
workers, the RQ job entry points, the CLI. Either one server (`REDIS_URL`) or a master that Redis Sentinel
names (`AJET_RUNNER_REDIS_SENTINELS` + `AJET_RUNNER_REDIS_MASTER`): a Sentinel client asks the sentinels
for the master before each new connection, so after a failover it follows the new master by itself.

Every Sentinel client made here retries a command that met a lost connection (or no known master) with bounded
exponential backoff, long enough to ride out a failover (`AJET_RUNNER_REDIS_RETRY_SECONDS`). That is safe
for what the control plane sends: reads, whole-field writes, and the Lua compare-and-set scripts, whose
second try after a first that did land finds the version moved (the journal checks that it was its own,
workers/drive/journal.py) or the event already published (`publish_once`). The timeouts are each caller's
(a blocking pop must not be cut off, an API call must not hang); this module keeps `redis` out of the
layers above the store. Callers import it through store/connection.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool, SentinelManagedConnection

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from ajet_runner.store.settings import Settings

NoMasterKnown = MasterNotFoundError  # no sentinel names a master now (a failover under way, or all away)

SENTINELS_ENV = "AJET_RUNNER_REDIS_SENTINELS"
MASTER_ENV = "AJET_RUNNER_REDIS_MASTER"
PASSWORD_ENV = "AJET_RUNNER_REDIS_PASSWORD"
URL_ENV = "REDIS_URL"
RETRY_BASE_SECONDS = 0.05
RETRY_CAP_SECONDS = 1.0
CHECK_TIMEOUT_SECONDS = 3.0  # per sentinel, at start


class RedisSettingsError(ValueError):
    """The Redis settings cannot work; the message names the setting (checked at start, never papered over)."""


@dataclass(frozen=True)
class RedisTarget:
    """One Redis server by URL, or the master a set of sentinels names. `retry_seconds` is how long a command
    that meets a lost connection or no known master is retried before the error reaches the caller."""

    url: str = ""
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str = ""
    db: int = 0
    password: str = field(default="", repr=False)
    retry_seconds: float = 10.0

    @property
    def sentinel(self) -> bool:
        return bool(self.sentinels)

    def describe(self) -> str:
        """Where it is, for messages and logs (never the password)."""
        if self.sentinel:
            members = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"master {self.master!r} of sentinels {members}"
        return redact_url(self.url)

    def env(self) -> dict[str, str]:
        """The environment that names this target to a child process (the node's watcher): the variables
        the settings read. A password goes only here, never on a command line."""
        if not self.sentinel:
            return {URL_ENV: self.url}
        out = {SENTINELS_ENV: ",".join(f"{h}:{p}" for h, p in self.sentinels), MASTER_ENV: self.master,
               "AJET_RUNNER_REDIS_DB": str(self.db), "AJET_RUNNER_REDIS_RETRY_SECONDS": str(self.retry_seconds)}
        if self.password:
            out[PASSWORD_ENV] = self.password
        return out


def redact_url(url: str) -> str:
    """A Redis URL with its password shown as ***."""
    scheme, sep, rest = url.partition("://")
    cred, at, host = rest.rpartition("@")
    if not sep or not at:
        return url
    user = cred.partition(":")[0]
    return f"{scheme}://{user}:***@{host}"


def parse_sentinels(text: str) -> tuple[tuple[str, int], ...]:
    """`host:port,host:port,…` (IPv6 as `[::1]:26379`) → pairs; RedisSettingsError names the bad member."""
    out: list[tuple[str, int]] = []
    for raw in text.split(","):
        member = raw.strip()
        if not member:
            continue
        host, sep, port = member.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RedisSettingsError(f"{SENTINELS_ENV}: {member!r} is not host:port "
                                     f"(e.g. {SENTINELS_ENV}=redis-0.sentinel:26379,redis-1.sentinel:26379)")
        out.append((host, int(port)))
    if not out:
        raise RedisSettingsError(f"{SENTINELS_ENV} names no sentinel")
    if len(set(out)) != len(out):
        raise RedisSettingsError(f"{SENTINELS_ENV} names a sentinel twice: {text}")
    return tuple(out)


def target_from(settings: Settings) -> RedisTarget | None:
    """The Redis the settings name (None: none configured). Mixed or incomplete settings raise
    RedisSettingsError naming them: there is no fallback from one Redis to another."""
    url = settings.redis_url.strip()
    sentinels = settings.redis_sentinels.strip()
    master = settings.redis_master.strip()
    password = settings.redis_password.get_secret_value()
    retry = settings.redis_retry_seconds
    if sentinels or master:
        if url:
            raise RedisSettingsError(f"{URL_ENV} and {SENTINELS_ENV}/{MASTER_ENV} are both set: use one (with "
                                     f"Sentinel, the sentinels name the master; unset {URL_ENV})")
        if not sentinels:
            raise RedisSettingsError(f"{MASTER_ENV} is set but {SENTINELS_ENV} is not: name the sentinels "
                                     "(host:port,host:port,…)")
        if not master:
            raise RedisSettingsError(f"{SENTINELS_ENV} is set but {MASTER_ENV} is not: name the master the "
                                     "sentinels monitor (their `sentinel monitor NAME …`)")
        return RedisTarget(sentinels=parse_sentinels(sentinels), master=master, db=settings.redis_db,
                           password=password, retry_seconds=retry)
    if not url:
        if password:
            raise RedisSettingsError(f"{PASSWORD_ENV} is set but no Redis is: set {URL_ENV} or {SENTINELS_ENV}")
        return None
    if password:
        if "@" in url.partition("://")[2]:
            raise RedisSettingsError(f"{PASSWORD_ENV} is set and {URL_ENV} holds credentials too: use one")
        scheme, _, rest = url.partition("://")
        url = f"{scheme}://:{quote(password, safe='')}@{rest}"
    return RedisTarget(url=url, retry_seconds=retry)


def need_target(settings: Settings) -> RedisTarget:
    """The configured Redis; RedisSettingsError when there is none."""
    target = target_from(settings)
    if target is None:
        raise RedisSettingsError(f"no Redis configured: set {URL_ENV} (e.g. redis://redis-host:6379/0) or "
                                 f"{SENTINELS_ENV} and {MASTER_ENV}")
    return target


def _target(where: RedisTarget | str) -> RedisTarget:
    return where if isinstance(where, RedisTarget) else RedisTarget(url=where)


def retry_policy(seconds: float) -> Retry:
    """Exponential backoff with jitter (0.05 s doubling, at most 1 s apart) for about `seconds` in all."""
    waits, total = 0, 0.0
    while total < seconds:
        total += min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** waits)
        waits += 1
    return Retry(ExponentialWithJitterBackoff(base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS), max(waits, 1))


def _sentinel_kwargs(target: RedisTarget, options: dict[str, Any]) -> dict[str, Any]:
    """The sentinels' own connections: the same password, short timeouts (a dead member must not stall)."""
    out: dict[str, Any] = {"socket_timeout": min(float(options.get("socket_timeout") or 2.0), 2.0),
                           "socket_connect_timeout": min(float(options.get("socket_connect_timeout") or 1.0), 1.0)}
    if target.password:
        out["password"] = target.password
    return out


@cache
def _scripts() -> tuple[tuple[str, str], ...]:
    """(sha1, text) of every Lua script of the store (store/*.lua)."""
    files = resources.files("ajet_runner.store")
    texts = [f.read_text(encoding="utf-8") for f in files.iterdir() if f.name.endswith(".lua")]
    return tuple((hashlib.sha1(t.encode()).hexdigest(), t) for t in texts)  # Redis names a script by its SHA-1


class ScriptsLoadedConnection(SentinelManagedConnection):
    """A connection to the master Sentinel names that first makes sure the store's Lua scripts are there. A
    promoted replica has an empty script cache (Redis replicates a script's effects, not the script), and
    redis-py reloads a missing script for a single EVALSHA but not inside a pipeline retried after a failover:
    without this, the first pipelined script on a new master fails with NOSCRIPT."""

    _looked_up = False  # connect_to() was just given the address the sentinels name

    def connect_to(self, address: tuple[str, int]) -> None:
        self._looked_up = True
        try:
            super().connect_to(address)
        finally:
            self._looked_up = False

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        """A reconnect after a lost connection asks the sentinels for the master first. redis-py 8 reconnects
        a dropped connection (send_packed_command) to the address it had, bypassing the lookup in connect():
        a master that hangs (frozen, or cut off without a reset) took every retry and timed each one out,
        behind a switch the sentinels had made long before (docs/operations.md, measured)."""
        if not self._sock and not self._looked_up and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)

    def on_connect_check_health(self, check_health: bool = True) -> None:
        super().on_connect_check_health(check_health=check_health)
        scripts = _scripts()
        self.send_command("SCRIPT", "EXISTS", *(sha for sha, _ in scripts))
        present = self.read_response()
        for (_, text), there in zip(scripts, present, strict=True):
            if not there:
                self.send_command("SCRIPT", "LOAD", text)
                self.read_response()


def connect(where: RedisTarget | str, **options: Any) -> redis.Redis:
    """A client of its own for `where` (a target, or a plain URL); `options` are redis-py's (timeouts,
    health_check_interval). Retries as the module docstring says."""
    target = _target(where)
    if not target.sentinel:
        return redis.Redis.from_url(target.url, **options)  # redis-py's own retries (about 5 s)
    options.setdefault("retry", retry_policy(target.retry_seconds))
    if target.password:
        options.setdefault("password", target.password)
    options.setdefault("connection_class", ScriptsLoadedConnection)
    manager = Sentinel(list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, options))
    return manager.master_for(target.master, db=target.db, **options)


@cache
def _async_connection_class() -> type:
    """The asyncio twin of ScriptsLoadedConnection's reconnect (the API's SSE reader; it runs no scripts)."""
    from redis.asyncio.sentinel import SentinelManagedConnection as AsyncManaged

    class LookupOnReconnect(AsyncManaged):
        _looked_up = False

        async def connect_to(self, address: tuple[str, int]) -> None:
            self._looked_up = True
            try:
                await super().connect_to(address)
            finally:
                self._looked_up = False

        async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
            if not self.is_connected and not self._looked_up and self.connection_pool.is_master:
                self.host, self.port = await self.connection_pool.get_master_address()
            await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)

    return LookupOnReconnect


def async_client(where: RedisTarget | str, **options: Any) -> aioredis.Redis:
    """The asyncio client (the API's blocking stream reads), on the same target and retries."""
    import redis.asyncio as aioredis  # only the API needs it: no worker pays its import
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel

    target = _target(where)
    if not target.sentinel:
        return aioredis.Redis.from_url(target.url, **options)

    tries = retry_policy(target.retry_seconds).get_retries()
    options.setdefault("retry", AsyncRetry(ExponentialWithJitterBackoff(base=RETRY_BASE_SECONDS,
                                                                        cap=RETRY_CAP_SECONDS), tries))
    if target.password:
        options.setdefault("password", target.password)
    options.setdefault("connection_class", _async_connection_class())
    manager = AsyncSentinel(list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, options))
    return manager.master_for(target.master, db=target.db, **options)


def clone(client: redis.Redis, **options: Any) -> redis.Redis:
    """A client on a pool of its own with `client`'s connection settings (auth, TLS, the sentinels) and
    `options` overriding some (timeouts)."""
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, **options}
    if isinstance(pool, SentinelConnectionPool):
        kwargs.pop("connection_pool", None)  # the pool's own proxy: the new pool makes its own
        return redis.Redis(connection_pool=SentinelConnectionPool(
            pool.service_name, pool.sentinel_manager, connection_class=pool.connection_class,
            is_master=pool.is_master, check_connection=pool.check_connection, **kwargs))
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))


def server_identity(client: redis.Redis) -> tuple[Any, ...]:
    """Which server and account a client talks to (equal for two clients of one Redis or one master name)."""
    pool = client.connection_pool
    kw = pool.connection_kwargs
    if isinstance(pool, SentinelConnectionPool):
        members = tuple(sorted(str(s.connection_pool.connection_kwargs.get("host")) + ":" +
                               str(s.connection_pool.connection_kwargs.get("port"))
                               for s in pool.sentinel_manager.sentinels))
        return ("sentinel", pool.service_name, members, kw.get("db"), kw.get("username"), kw.get("password"))
    return (pool.connection_class.__name__, *(kw.get(k) for k in ("host", "port", "path", "db", "username",
                                                                    "password")))


def is_replicated(client: redis.Redis) -> bool:
    """True for a Sentinel-managed master: a write that must survive a failover waits for a replica."""
    return isinstance(client.connection_pool, SentinelConnectionPool)


def master_address(client: redis.Redis) -> tuple[str, int] | None:
    """The master a Sentinel client last connected to (None for a plain client, or before its first
    connection): a change means a failover happened."""
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        addr = pool.master_address
        return (str(addr[0]), int(addr[1])) if addr else None
    return None


def connection_target(conn: redis.Redis) -> RedisTarget:
    """Where a client talks to (an RQ job's connection, to build a client of our own)."""
    pool = conn.connection_pool
    kw = pool.connection_kwargs
    if isinstance(pool, SentinelConnectionPool):
        manager = pool.sentinel_manager
        members = tuple((str(s.connection_pool.connection_kwargs["host"]),
                         int(s.connection_pool.connection_kwargs["port"])) for s in manager.sentinels)
        return RedisTarget(sentinels=members, master=pool.service_name, db=int(kw.get("db") or 0),
                           password=str(kw.get("password") or ""))
    return RedisTarget(url=connection_url(conn))


def connection_url(conn: redis.Redis) -> str:
    """The URL a plain client was made from (its password included)."""
    kw = conn.connection_pool.connection_kwargs
    auth = f":{quote(str(kw['password']), safe='')}@" if kw.get("password") else ""
    if "path" in kw:
        return f"unix://{auth}{kw['path']}?db={kw.get('db', 0)}"
    return f"redis://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def check_reachable(target: RedisTarget, timeout: float = CHECK_TIMEOUT_SECONDS) -> None:
    """At start: every sentinel answers and names the master (RedisSettingsError naming the setting
    otherwise), so a typo or a dead member is found now, not at the first failover. A plain URL is not
    checked here: its users already report an unreachable server in their own words."""
    if not target.sentinel:
        return
    for host, port in target.sentinels:
        client = redis.Redis(host, port, password=target.password or None, socket_timeout=timeout,
                             socket_connect_timeout=timeout, retry=Retry(ExponentialWithJitterBackoff(), 0))
        try:
            masters = client.sentinel_masters()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisSettingsError(f"{SENTINELS_ENV}: sentinel {host}:{port} is unreachable "
                                     f"({type(exc).__name__}: {exc})") from exc
        except redis.ResponseError as exc:
            raise RedisSettingsError(f"{SENTINELS_ENV}: {host}:{port} did not answer as a sentinel "
                                     f"({exc})") from exc
        finally:
            client.close()
        names = {str(name) for name in masters}
        if target.master not in names:
            known = ", ".join(sorted(names)) or "none"
            raise RedisSettingsError(f"{MASTER_ENV}={target.master!r}: sentinel {host}:{port} does not monitor "
                                     f"it (it monitors: {known})")
