import redis

from ajet_runner.service.embedded import EmbeddedRedis, find_redis_server


def test_embedded_redis_starts_answers_and_stops() -> None:
    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.ping() is True
        client.set("k", "v")
        assert client.get("k") == b"v"
    finally:
        server.stop()
    assert server.process is not None and server.process.poll() is not None


def test_redis_server_binary_found() -> None:
    assert find_redis_server().endswith("redis-server")


def test_the_private_embedded_redis_has_no_port_a_0700_socket_and_a_password_off_argv() -> None:
    """What `run` and `up` start: reachable only through a unix socket in a directory only this user enters,
    with a password that is in a 0600 config file, not on the command line `ps` shows."""
    import os
    import stat

    import psutil
    import pytest

    server = EmbeddedRedis(private=True).start()
    try:
        assert server.process is not None
        proc = psutil.Process(server.process.pid)
        assert not [c for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert stat.S_IMODE(os.stat(server.workdir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(server.socket_path).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(server.workdir, "redis.conf")).st_mode) == 0o600
        assert server.password and server.password not in " ".join(proc.cmdline())
        assert server.password not in server.shown and server.socket_path in server.shown
        assert redis.Redis.from_url(server.url).ping() is True
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(unix_socket_path=server.socket_path).ping()
    finally:
        server.stop()
    assert not os.path.exists(server.workdir)
