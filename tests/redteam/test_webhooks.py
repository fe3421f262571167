"""Red team: webhooks that cannot be turned against the cluster or its users.

Real HTTP servers on loopback (tests/integration/webhook_receiver.py) and a real Redis: a receiver that never
answers must not hold up another receiver's notification (before, one delivery thread per worker waited out a
10 s per-read timeout, and the next worker got stuck on the same receiver); a receiver that trickles one byte a
second is cut at the POST's total deadline; a redirect is not followed; a failing log line's secrets do not
reach the receiver; a webhook URL with CR/LF, another scheme or plain http to a foreign host is refused at
submission with nothing written; a notification given up on is visible in the API and the console.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import SecretStr

from ajet_runner.service.api.application import create_app
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.cluster.stages import define_stage
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.notify.deliverer import Deliverer
from ajet_runner.workers.notify.webhook import post_json
from tests.integration.scenario import wait_for
from tests.integration.webhook_receiver import (
    EndlessReceiver,
    RedirectingReceiver,
    SilentReceiver,
    TrickleReceiver,
    WebhookReceiver,
)
from tests.redteam.record import record

pytestmark = [pytest.mark.integration]
TOKEN = "t-webhooks-0123456789"
SILENT_NOTICES = 10
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store(redis.Redis.from_url(redis_url), retention_seconds=0)


def settings(url: str = "", **extra: object) -> Settings:
    fields: dict[str, object] = {"webhook_url": url, "webhook_secret": SecretStr("whsec-red-team-42"),
                                 "webhook_backoff_cap_seconds": 0.05, "webhook_max_attempts": 3,
                                 "webhook_timeout_seconds": 4.0, "outbox_poll_seconds": 0.05, **extra}
    return Settings(**fields)  # type: ignore[arg-type]


def finished(store: Store, exp_id: str, stage: str = "", reason: str = "") -> None:
    rec = store.records.create(exp_id, {"state": "queued", "lifecycle": Lifecycle.initial_dict(exp_id),
                                        "purpose": exp_id, "result_dir": f"/r/{exp_id}",
                                        **({"stage": stage} if stage else {})},
                               {"message": "submitted"})
    store.records.transition(exp_id, expected_version=int(rec["version"]), event={"type": "transition"}, fields={
        "state": "finished", "outcome": "failed", "reason": reason or "exit code 1"})


def _step(deliverer: Deliverer) -> bool:
    deliverer.step()
    return True


@pytest.fixture()
def running() -> Iterator[list[tuple[threading.Event, threading.Thread]]]:
    """Deliverers running in threads: stopped, and awaited with their delivery threads (each ends by its POST's
    deadline), before the next test's Redis is flushed."""
    started: list[tuple[threading.Event, threading.Thread]] = []
    yield started
    for stop, thread in started:
        stop.set()
        thread.join(30)


def test_a_never_answering_receiver_does_not_hold_up_another(
        store: Store, running: list[tuple[threading.Event, threading.Thread]]) -> None:
    with SilentReceiver() as silent, WebhookReceiver() as good:
        define_stage(store, "slow", webhook_url=silent.url)
        define_stage(store, "fast", webhook_url=good.url)
        for n in range(SILENT_NOTICES):  # queued first, and more of them than a worker has delivery threads
            finished(store, f"a{n}", "slow")
        finished(store, "b", "fast")
        s = settings()
        deliverer = Deliverer(store, s)
        stop = threading.Event()
        thread = threading.Thread(target=deliverer.run, args=(stop,), daemon=True)
        running.append((stop, thread))
        t0 = time.monotonic()
        thread.start()
        wait_for(lambda: any(r.json.get("id") == "b" for r in good.of_type("experiment_finished")), 30,
                 "b's notification")
        delay = time.monotonic() - t0
        wait_for(lambda: any(e["type"] == "webhook_failed" for e in store.events.read("a0")), 30, "a0's first failure")
        failed = next(e for e in store.events.read("a0") if e["type"] == "webhook_failed")
        a_ended = time.monotonic() - t0
        stop.set()
        thread.join(30)  # its delivery threads end by their deadline: nothing writes into the next test's Redis
        assert not thread.is_alive()
    deadline = s.webhook_timeout_seconds
    ok = delay < deadline and "deadline" in failed["error"]
    record("webhooks: one receiver never holds up another", "receiver A accepts and never answers (deadline "
           f"{deadline:g} s); {SILENT_NOTICES} notices for A (more than the {s.webhook_concurrency} delivery threads), "
           "then one for receiver B", SILENT_NOTICES + 1,
           f"B delivered after {delay:.2f} s (< {deadline:g} s); A's POST cut at {a_ended:.1f} s: {failed['error']}",
           passed=ok)
    assert delay < deadline, f"B waited {delay:.2f} s behind a receiver that never answers"
    assert "deadline" in failed["error"], failed


def test_one_deadline_covers_connect_send_and_read() -> None:
    with TrickleReceiver(every=1.0) as slow:
        t0 = time.monotonic()
        result = post_json(slow.url, {"type": "experiment_finished", "delivery": "d1"}, timeout=2.0)
        took = time.monotonic() - t0
    ok = not result.ok and took < 2.0 + 3.0 and "deadline" in result.error
    record("webhooks: a total deadline per POST", "a receiver answering one byte a second (no single read waits "
           "long; the whole answer takes 2 minutes), deadline 2 s", 1, f"cut after {took:.1f} s: {result.error}",
           passed=ok)
    assert not result.ok and "deadline" in result.error, result
    assert took < 5.0, f"the POST took {took:.1f} s with a 2 s deadline"


def test_an_endless_answer_is_not_read_to_its_end() -> None:
    with EndlessReceiver() as flood:
        t0 = time.monotonic()
        result = post_json(flood.url, {"type": "experiment_finished", "delivery": "d1"}, timeout=10.0)
        took = time.monotonic() - t0
        sent = flood.sent
    ok = result.status == 500 and took < 5.0 and len(result.error) < 300
    record("webhooks: an endless answer", "a receiver answering 500 with a 20 GB body streamed as fast as it is read "
           "(deadline 10 s)", 1, f"done after {took:.2f} s, {sent / 1e6:.1f} MB sent by the receiver; error kept to "
           f"{len(result.error)} characters", passed=ok)
    assert result.status == 500 and not result.ok, result
    assert took < 5.0, f"read the endless body for {took:.1f} s"


def test_a_redirect_is_not_followed() -> None:
    with WebhookReceiver() as elsewhere, RedirectingReceiver(to=elsewhere.url) as hop:
        result = post_json(hop.url, {"type": "experiment_finished", "delivery": "d1"}, secret="s3cret-key")
        followed = len(elsewhere.received)
    record("webhooks: redirects", "a receiver answering 307 to another URL", 1,
           f"HTTP {result.status}, not followed ({followed} POST reached the redirect's target)",
           passed=not result.ok and followed == 0 and hop.hits == 1)
    assert result.status == 307 and not result.ok and followed == 0 and hop.hits == 1


def test_a_failing_log_line_s_secrets_do_not_reach_the_receiver(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AJET_RUNNER_TOKEN", "api-token-never-in-a-webhook-77")
    secrets_ = {
        "redis password": "r3dis-pa55word-x9",
        "token=": "abcdef0123456789abcdef",
        "Bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlLXNpZw",
        "API token (env)": "api-token-never-in-a-webhook-77",
        "webhook secret": "whsec-red-team-42",
        "--password": "hunter2-hunter2",
        "api_key:": "sk-live-0123456789abcdefghij",
    }
    reason = ("Traceback: ConnectionError: redis://:r3dis-pa55word-x9@10.0.0.5:6379/0 refused; "
              "GET /v1/x?token=abcdef0123456789abcdef; Authorization: Bearer "
              "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlLXNpZw; echo api-token-never-in-a-webhook-77 "
              "whsec-red-team-42; mysql --password hunter2-hunter2; api_key: sk-live-0123456789abcdefghij")
    with WebhookReceiver() as hook:
        finished(store, "e1", reason=reason)
        deliverer = Deliverer(store, settings(hook.url))
        wait_for(lambda: _step(deliverer) and hook.received, 20, "the notification")
        body = hook.received[0].body.decode()
    leaked = [name for name, value in secrets_.items() if value in body]
    record("webhooks: redaction", "a failing log line (the payload's reason) holding a Redis URL with its password, "
           "token=, a Bearer JWT, the API token, the webhook secret, --password, api_key:", len(secrets_),
           f"{len(leaked)} sent to the receiver" + (f": {', '.join(leaked)}" if leaked else ""), passed=not leaked)
    assert not leaked, body
    assert "REDACTED" in body and "10.0.0.5" in body  # the line itself is kept, only its secrets go


BAD_URLS = ["https://hooks.example.com/a\r\nX-Injected: 1", "http://hooks.example.com/a", "ftp://hooks.example.com/a",
            "file:///etc/passwd", "gopher://127.0.0.1:6379/_FLUSHALL", "http://10.0.0.5/a", "https://h.example/\n"]


def test_a_webhook_url_that_may_not_be_posted_to_is_refused_at_submission(redis_url: str, tmp_path: Path) -> None:
    answers = []
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN, allowed_roots=str(tmp_path)))) as api:
        for n, url in enumerate(BAD_URLS):
            resp = api.post("/v1/stages", headers=AUTH, json={
                "stage": f"hostile{n}", "webhook_url": url, "blueprints": [{"blueprint": "## [exp_purpose]\nx\n"}]})
            written = api.get(f"/v1/stages/hostile{n}", headers=AUTH).status_code != 404
            answers.append((resp.status_code, written, resp.json()))
    refused = [a for a in answers if a[0] == 422 and not a[1]]
    record("webhooks: URLs at submission", "stage webhook URLs with CR/LF, plain http to a foreign host, ftp:, file:, "
           "gopher:", len(BAD_URLS), f"{len(refused)}x422 naming webhook_url; "
           f"{sum(a[1] for a in answers)} stages written", passed=len(refused) == len(BAD_URLS))
    assert len(refused) == len(BAD_URLS), answers
    assert all(any(p["field"] == "webhook_url" for p in a[2]["problems"]) for a in answers)


def test_a_notification_given_up_on_is_shown_by_the_api_and_the_console(store: Store, redis_url: str) -> None:
    with WebhookReceiver(fail_first=99) as hook:
        url = hook.url.replace("http://", "http://user:pw-in-url@") + "?token=t0k3n-in-query"
        finished(store, "e1")
        deliverer = Deliverer(store, settings(url, webhook_max_attempts=2))
        wait_for(lambda: _step(deliverer) and any(e["type"] == "webhook_gave_up" for e in store.events.read("e1")), 20,
                 "the notification to be given up")
    with TestClient(create_app(Settings(redis_url=redis_url, token=TOKEN))) as api:
        dead = api.get("/v1/notifications/dead", headers=AUTH).json()
        page = api.get("/ui/notifications", headers={**AUTH, "Accept": "text/html"})
    item = dead["items"][0]
    shown = page.status_code == 200 and "e1" in page.text and "HTTP 503" in page.text
    clean = "pw-in-url" not in str(dead) + page.text and "t0k3n" not in str(dead) + page.text
    record("webhooks: dead letters", "a receiver answering 503 to every attempt (its URL with a password and a "
           "token in the query)", 1, f"given up after {item['attempts']} attempts; in /v1/notifications/dead and "
           f"the console{'' if shown else ' (NOT on the page)'}; URL shown without credentials: {clean}",
           passed=shown and clean and dead["total"] == 1)
    assert dead["total"] == 1 and item["id"] == "e1" and item["attempts"] == 2 and "HTTP 503" in item["error"], dead
    assert item["url"] == hook.url, item
    assert shown and clean, page.text[-2000:]


def test_a_stored_url_that_may_not_be_posted_to_is_a_dead_letter_at_once(store: Store) -> None:
    """A URL written before the submission check (an older version, a hand-edited stage) is checked again before
    each POST: never posted, given up on the first attempt, not retried."""
    define_stage(store, "old", webhook_url="http://hooks.example.com/a\r\nX-Injected: 1")
    finished(store, "e1", "old")
    deliverer = Deliverer(store, settings(webhook_max_attempts=5))
    wait_for(lambda: _step(deliverer) and any(e["type"] == "webhook_gave_up" for e in store.events.read("e1")), 20,
             "the notice to be given up")
    dead = store.outbox().dead()
    assert dead[0]["id"] == "e1" and dead[0]["attempts"] == 1 and "not posted" in dead[0]["given_up"], dead
    assert "\r\n" not in dead[0]["url"], dead
