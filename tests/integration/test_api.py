"""The HTTP API against a real Redis: FastAPI's TestClient where a server adds nothing, a real
`ajet-runner serve` process for start-up rules, server-sent events and the access log.

No workers here: submissions just queue, and a queued experiment is stopped by the API itself.
The helpers `running_server` and `free_port` are shared with the CLI and two-node tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from rq.serializers import JSONSerializer

from ajet_runner.service.api.application import HTTP_REGISTRY, create_app
from ajet_runner.service.client.api_client import AjetRunnerClient, ApiError
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import CLI, make, wait_for
from tests.integration.workers import kill_group

pytestmark = [pytest.mark.integration]

TOKEN = "t-0123456789abcdef"
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
OTHER = "t-second-token-for-rotation"
VIEW_FIELDS = {"id", "state", "outcome", "node", "tmux_session", "attempt", "created_at", "started_at", "finished_at",
               "elapsed_seconds", "max_seconds", "latest_metrics", "result_dir", "history", "purpose", "reason",
               "queue", "gpus"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    token: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, token: str | None = None) -> AjetRunnerClient:
        return AjetRunnerClient(self.url, token or self.token)


@contextmanager
def running_server(redis_url: str, log: Path, token: str = TOKEN, **env: str) -> Iterator[Server]:
    """A real `ajet-runner serve` on a free port, up when /healthz answers; killed afterwards."""
    port = free_port()
    full_env = {**os.environ, "REDIS_URL": redis_url, "AJET_RUNNER_TOKEN": token, **env}
    with open(log, "wb") as out:
        proc = subprocess.Popen([*CLI, "serve", "--port", str(port)], env=full_env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", token, proc, log)
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 30, "serve to answer /healthz")
        yield server
    finally:
        kill_group(proc)  # type: ignore[arg-type]


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def settings(redis_url: str, tmp_path: Path) -> Settings:
    # The venv running the tests is the blueprints' exp_venv_exe: it must be inside the roots too.
    return Settings(redis_url=redis_url, token=f"{TOKEN},{OTHER}", allowed_roots=f"{tmp_path}:{VENV}",
                    max_request_bytes=50_000)


@pytest.fixture()
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture()
def store(redis_url: str) -> Iterator[Store]:
    s = Store.from_url(redis_url)
    yield s
    s.r.close()


def submit_demo(api: TestClient, tmp_path: Path, name: str = "demo", **extra: object) -> tuple[dict, Path]:
    sc = make("demo", tmp_path / name)
    resp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text(), **extra}, headers=auth())
    assert resp.status_code == 201, resp.text
    return resp.json(), sc.results


# -- health, auth, limits ----------------------------------------------------------------------------
def test_health_needs_no_token_and_readiness_follows_redis(api: TestClient) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").status_code == 200
    with TestClient(create_app(Settings(redis_url="redis://127.0.0.1:1/0", token=TOKEN))) as down:
        assert down.get("/healthz").status_code == 200
        resp = down.get("/readyz")
        assert resp.status_code == 503 and resp.json()["status"] == "unavailable"
        assert down.get("/v1/experiments", headers=auth()).status_code == 503  # a clear "Redis is unreachable"


def test_every_v1_route_needs_a_valid_token(api: TestClient) -> None:
    for method, path in (("GET", "/v1/experiments"), ("GET", "/v1/experiments/x"), ("POST", "/v1/experiments"),
                         ("POST", "/v1/experiments/x/stop"), ("DELETE", "/v1/experiments/x"),
                         ("GET", "/v1/experiments/x/events"), ("GET", "/v1/experiments/x/log"),
                         ("GET", "/v1/nodes")):
        for headers in ({}, auth("wrong"), {"Authorization": TOKEN}, {"Authorization": "Basic abc"}):
            resp = api.request(method, path, headers=headers)
            assert resp.status_code == 401, (method, path, headers, resp.text)
            assert resp.headers["www-authenticate"].startswith("Bearer")
    assert api.get("/v1/nodes", headers=auth(TOKEN)).status_code == 200
    assert api.get("/v1/nodes", headers=auth(OTHER)).status_code == 200  # several tokens at once


def test_token_file_is_reread_when_it_changes(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# one per line\nfile-token-1\n")
    with TestClient(create_app(Settings(redis_url=redis_url, token_file=str(path)))) as api:
        assert api.get("/v1/nodes", headers=auth("file-token-1")).status_code == 200
        path.write_text("file-token-2\n")
        os.utime(path, (time.time() + 5, time.time() + 5))  # a distinct mtime even on coarse clocks
        assert api.get("/v1/nodes", headers=auth("file-token-1")).status_code == 401
        assert api.get("/v1/nodes", headers=auth("file-token-2")).status_code == 200


def test_no_configured_token_refuses_everything_unless_insecure(redis_url: str) -> None:
    with TestClient(create_app(Settings(redis_url=redis_url))) as api:
        resp = api.get("/v1/nodes")
        assert resp.status_code == 401 and "no token is configured" in resp.json()["detail"]
    # An open API answers loopback names only (service/api/hosts.py): TestClient's "testserver" would be 400.
    with TestClient(create_app(Settings(redis_url=redis_url), insecure=True), base_url="http://127.0.0.1") as api:
        assert api.get("/v1/nodes").status_code == 200


def test_too_large_bodies_get_413_before_parsing(api: TestClient, store: Store) -> None:
    big = json.dumps({"blueprint": "x" * 60_000})
    resp = api.post("/v1/experiments", content=big, headers={**auth(), "Content-Type": "application/json"})
    assert resp.status_code == 413 and "too large" in resp.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
        for _ in range(70):
            yield b"x" * 1000

    resp = api.post("/v1/experiments", content=chunks(), headers={**auth(), "Content-Type": "application/json"})
    assert resp.status_code == 413
    assert store.indexes.count() == 0


# -- submission --------------------------------------------------------------------------------------
def test_broken_blueprints_get_422_with_problems_naming_fields(api: TestClient, store: Store) -> None:
    resp = api.post("/v1/experiments", json={"blueprint": "## [exp_purpose]\nonly a purpose\n"}, headers=auth())
    assert resp.status_code == 422
    fields = {p["field"] for p in resp.json()["problems"]}
    assert {"exp_codebase_dir", "exp_launch_command", "exp_result_dir", "exp_max_time"} <= fields
    assert all(p["message"] and p["level"] == "error" for p in resp.json()["problems"])
    for body, field in (({}, "blueprint"), ({"blueprint": "x", "priority": "urgent"}, "priority"),
                        ({"blueprint": "x", "node": "../etc"}, "node")):
        resp = api.post("/v1/experiments", json=body, headers=auth())
        assert resp.status_code == 422 and field in {p["field"] for p in resp.json()["problems"]}, resp.text
    resp = api.post("/v1/experiments", content=b"{not json", headers={**auth(), "Content-Type": "application/json"})
    assert resp.status_code == 422 and resp.json()["problems"][0]["field"] == "body"
    assert store.indexes.count() == 0  # nothing half-done


def test_paths_outside_the_allowed_roots_are_refused(redis_url: str, tmp_path: Path, store: Store) -> None:
    inside = tmp_path / "allowed"
    inside.mkdir()
    sc = make("demo", tmp_path / "elsewhere")
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN, allowed_roots=str(inside)))) as api:
        resp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text()}, headers=auth())
    assert resp.status_code == 422
    problems = {p["field"]: p["message"] for p in resp.json()["problems"]}
    assert "outside the allowed roots" in problems["exp_codebase_dir"]
    assert "outside the allowed roots" in problems["exp_result_dir"]
    assert store.indexes.count() == 0


def test_submit_get_list_and_events_page(api: TestClient, tmp_path: Path) -> None:
    first, _ = submit_demo(api, tmp_path, "a")
    second, _ = submit_demo(api, tmp_path, "b", node="nodeX", priority="high", wait_for_node=True)
    assert first["state"] == "queued" and set(first) >= VIEW_FIELDS
    assert second["target_node"] == "nodeX" and second["queue"] == "node:nodeX" and second["priority"] == "high"
    got = api.get(f"/v1/experiments/{first['id']}", headers=auth()).json()
    assert set(got) >= VIEW_FIELDS and got["id"] == first["id"] and got["history"] == []
    assert got["max_seconds"] == 300 and got["result_dir"].endswith("a/demo/results") and got["gpus_needed"] == 8

    page = api.get("/v1/experiments", params={"limit": 1}, headers=auth()).json()
    assert page["total"] == 2 and [i["id"] for i in page["items"]] == [second["id"]]  # newest first
    page = api.get("/v1/experiments", params={"limit": 1, "offset": 1}, headers=auth()).json()
    assert [i["id"] for i in page["items"]] == [first["id"]]
    by_node = api.get("/v1/experiments", params={"node": "nodeX"}, headers=auth()).json()
    assert by_node["total"] == 1 and by_node["items"][0]["id"] == second["id"]
    assert api.get("/v1/experiments", params={"state": "running"}, headers=auth()).json()["total"] == 0
    assert api.get("/v1/experiments", params={"state": "queued"}, headers=auth()).json()["total"] == 2
    assert api.get("/v1/experiments", params={"state": "nonsense"}, headers=auth()).status_code == 422

    events = api.get(f"/v1/experiments/{first['id']}/events", headers=auth()).json()
    assert [e["type"] for e in events["events"]] == ["submitted"] and not events["finished"]
    after = api.get(f"/v1/experiments/{first['id']}/events", params={"after": events["next_after"]},
                    headers=auth()).json()
    assert after["events"] == [] and after["next_after"] == events["next_after"]
    assert api.get(f"/v1/experiments/{first['id']}/events", params={"after": "junk"}, headers=auth()).status_code == 422
    log = api.get(f"/v1/experiments/{first['id']}/log", headers=auth())
    assert log.status_code == 200 and log.text == "" and log.headers["x-log-source"] == "redis"


def test_unknown_ids_are_404_with_a_clear_message(api: TestClient) -> None:
    for method, path in (("GET", ""), ("POST", "/stop"), ("DELETE", ""), ("GET", "/events"), ("GET", "/log")):
        resp = api.request(method, f"/v1/experiments/nope{path}", headers=auth())
        assert resp.status_code == 404, (method, path)
        assert "no experiment with id 'nope'" in resp.json()["detail"]


# -- stop and delete without a worker -------------------------------------------------------------------
def test_stop_queued_finishes_it_cancelled_without_launching(api: TestClient, tmp_path: Path, store: Store) -> None:
    from rq import Queue

    rec, results = submit_demo(api, tmp_path)
    queue = Queue(rec["queue"], connection=store.r, serializer=JSONSerializer)
    assert queue.count == 1
    resp = api.post(f"/v1/experiments/{rec['id']}/stop", headers=auth())
    assert resp.status_code == 200, resp.text
    done = resp.json()
    assert done["state"] == "finished" and done["outcome"] == "cancelled"
    assert [h["to"] for h in done["history"]] == ["collecting", "finished"]  # never launching
    assert queue.count == 0
    flag = json.loads((results / "finish.flag").read_text())
    assert flag == {**flag, "id": rec["id"], "outcome": "cancelled"}
    assert (results / "experiment_report.md").exists() and not (results / "logs").exists()
    again = api.post(f"/v1/experiments/{rec['id']}/stop", headers=auth())
    assert again.status_code == 409 and "already finished" in again.json()["detail"]

    deleted = api.delete(f"/v1/experiments/{rec['id']}", headers=auth())
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert api.get(f"/v1/experiments/{rec['id']}", headers=auth()).status_code == 404
    assert (results / "finish.flag").exists() and (results / "experiment_report.md").exists()  # files kept


def test_delete_queued_stops_and_drops_it_at_once(api: TestClient, tmp_path: Path, store: Store) -> None:
    rec, results = submit_demo(api, tmp_path)
    resp = api.delete(f"/v1/experiments/{rec['id']}", headers=auth())
    assert resp.status_code == 200 and resp.json() == {**resp.json(), "deleted": True}
    assert store.records.raw(rec["id"]) is None and store.indexes.count() == 0
    assert json.loads((results / "finish.flag").read_text())["outcome"] == "cancelled"


# -- docs and metrics ------------------------------------------------------------------------------------
def test_openapi_docs_and_latency_by_route_template(api: TestClient, tmp_path: Path) -> None:
    doc = api.get("/openapi.json").json()
    assert {"/v1/experiments", "/v1/experiments/{exp_id}", "/v1/experiments/{exp_id}/events", "/v1/nodes",
            "/healthz", "/readyz"} <= set(doc["paths"])
    assert any(s.get("type") == "http" and s.get("scheme") == "bearer"
               for s in doc["components"]["securitySchemes"].values())
    assert api.get("/docs").status_code == 200
    rec, _ = submit_demo(api, tmp_path)
    api.get(f"/v1/experiments/{rec['id']}", headers=auth())
    text = generate_latest(HTTP_REGISTRY).decode()
    assert ('ajet_runner_http_request_duration_seconds_count{method="GET",route="/v1/experiments/{exp_id}",'
            'status="200"}') in text
    assert rec["id"] not in text  # route templates, never raw paths
    metrics = api.get("/metrics")  # no token needed
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert 'ajet_runner_http_request_duration_seconds_sum{method="GET",route="/v1/experiments/{exp_id}"' \
        in metrics.text


# -- a real server: start-up rules, SSE, the access log -------------------------------------------------------
def serve_exit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_") and k != "REDIS_URL"}
    return subprocess.run([*CLI, "serve", "--port", str(free_port()), *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=False)


def test_serve_refuses_to_start_unsafely(redis_url: str, tmp_path: Path) -> None:
    no_token = serve_exit({"REDIS_URL": redis_url})
    assert no_token.returncode == 2 and "refusing to start without a token" in no_token.stderr
    exposed = serve_exit({"REDIS_URL": redis_url}, "--host", "0.0.0.0", "--insecure")
    assert exposed.returncode == 2 and "only allowed on a loopback address" in exposed.stderr
    no_redis = serve_exit({"AJET_RUNNER_TOKEN": TOKEN})
    assert no_redis.returncode == 2 and "REDIS_URL is not set" in no_redis.stderr
    missing = serve_exit({"REDIS_URL": redis_url, "AJET_RUNNER_TOKEN_FILE": str(tmp_path / "absent")})
    assert missing.returncode == 2 and "cannot read the token file" in missing.stderr


def test_serve_insecure_on_loopback_needs_no_token(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
    proc = subprocess.Popen([*CLI, "serve", "--port", str(port), "--insecure"], env={**env, "REDIS_URL": redis_url},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def answer() -> int:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/v1/nodes", timeout=1).status_code
            except httpx.TransportError:
                return 0

        assert wait_for(answer, 30, "the insecure server") == 200
    finally:
        kill_group(proc)  # type: ignore[arg-type]


def test_sse_follows_live_resumes_with_last_event_id_and_no_token_is_logged(
        redis_url: str, tmp_path: Path) -> None:
    sc = make("demo", tmp_path / "sse")
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as client:
        exp = client.submit_file(sc.blueprint)
        seen: list[dict] = []
        done = threading.Event()

        def follow() -> None:
            seen.extend(client.follow(exp["id"]))  # ends by itself after the finished transition
            done.set()

        with AjetRunnerClient(server.url, server.token) as other:
            thread = threading.Thread(target=follow, daemon=True)
            thread.start()
            wait_for(lambda: seen, 10, "the submitted event over SSE")
            assert not done.is_set()  # still open: the experiment is not finished
            other.stop(exp["id"])
        assert done.wait(15), "the event stream did not end after the finished transition"
        types = [(e["type"], e.get("to")) for e in seen]
        assert types == [("submitted", None), ("transition", "collecting"), ("transition", "finished")]
        ids = [e["event_id"] for e in seen]
        assert ids == sorted(ids) and all("-" in i for i in ids)

        # Resume after the first event: exactly the rest, then the stream ends.
        resumed = list(client.follow(exp["id"], last_event_id=ids[0]))
        assert [e["event_id"] for e in resumed] == ids[1:]
        assert list(client.follow(exp["id"], last_event_id=ids[-1])) == []
        raw = httpx.get(f"{server.url}/v1/experiments/{exp['id']}/events",
                        headers={**auth(), "Accept": "text/event-stream", "Last-Event-ID": ids[1]}, timeout=10)
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert f"id: {ids[2]}\nevent: transition\ndata: " in raw.text

        with AjetRunnerClient(server.url, "wrong-token") as bad, pytest.raises(ApiError) as info:
            bad.get(exp["id"])
        assert info.value.status == 401
    log = server.log.read_text()
    assert f"GET /v1/experiments/{exp['id']}/events" in log  # the access log is on ...
    assert TOKEN not in log and "wrong-token" not in log and "Bearer" not in log  # ... and shows no token
