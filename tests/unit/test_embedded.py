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
