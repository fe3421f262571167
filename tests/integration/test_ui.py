"""The web console over HTTP against a real `serve` and a real worker: auth, CSRF, escaping, files, submit."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import httpx
import pytest

from tests.integration.scenario import make, wait_for
from tests.integration.test_api import TOKEN, running_server
from tests.integration.ui_harness import (
    IMG_LINE,
    IMG_PURPOSE,
    SCRIPT_LINE,
    SCRIPT_PURPOSE,
    demo,
    running_console,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BEARER = {"Authorization": f"Bearer {TOKEN}"}
PAGE = {"Accept": "text/html"}


def login(url: str, token: str = TOKEN) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    resp = client.post("/ui/login", data={"token": token, "next": "/ui/nodes"})
    assert resp.status_code == 303 and resp.headers["location"] == "/ui/nodes", resp.text
    return client


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field in the page"
    return found.group(1)


def test_nothing_but_the_login_page_without_a_session(redis_url, tmp_path) -> None:
    with running_server(redis_url, tmp_path / "serve.log") as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/").status_code == 307 and c.get("/").headers["location"] == "/ui/"
        page = c.get("/ui/", headers=PAGE)
        assert page.status_code == 303 and page.headers["location"] == "/ui/login?next=%2Fui%2F"
        for path in ("/ui/", "/ui/static/app.js", "/ui/static/style.css", "/ui/fragments/experiments", "/ui/stream",
                     "/ui/nodes", "/ui/submit", "/ui/experiments/abc", "/ui/experiments/abc/log",
                     "/ui/experiments/abc/files/reward_plot.png", "/ui/experiments/abc/parts"):
            resp = c.get(path)
            assert resp.status_code == 401, path
            assert resp.headers["www-authenticate"].startswith("Bearer") and "detail" in resp.json()
        assert c.post("/ui/experiments/abc/stop", data={"csrf": "x"}).status_code == 401
        form = c.get("/ui/login")
        assert form.status_code == 200 and 'name="token"' in form.text
        assert "default-src 'none'" in form.headers["content-security-policy"]
        assert c.get("/ui/login.css").status_code == 200

        wrong = c.post("/ui/login", data={"token": "not-it"})
        assert wrong.status_code == 401 and "not valid" in wrong.text and "set-cookie" not in wrong.headers
        away = c.post("/ui/login", data={"token": TOKEN, "next": "https://evil.example/"})
        assert away.status_code == 303 and away.headers["location"] == "/ui/"
        cookie = away.headers["set-cookie"]
        for attr in ("HttpOnly", "SameSite=strict", "Path=/ui", "Max-Age=43200"):
            assert attr.lower() in cookie.lower(), cookie
        assert TOKEN not in cookie
        assert c.get("/ui/", headers=PAGE).status_code == 200  # the client kept the cookie
        assert c.get("/v1/experiments").status_code == 401  # the cookie is for the console only

        c.cookies.clear()
        value = cookie.split(";")[0].split("=", 1)[1]
        c.cookies.set("ajet_session", value[:-2] + ("AA" if not value.endswith("AA") else "BB"), path="/ui")
        assert c.get("/ui/", headers=PAGE).status_code == 303  # tampered
        c.cookies.clear()
        assert c.get("/ui/static/app.js", headers=BEARER).status_code == 200  # tools: the bearer header


def test_forms_need_the_session_csrf_token_and_this_origin(redis_url, tmux_socket, tmp_path) -> None:
    sc = demo(tmp_path, "q", "stays queued", max_time="10 minutes")
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as api:
        exp = api.submit(sc.blueprint.read_text(), node="nowhere", wait_for_node=True)["id"]  # stays queued
        c = login(server.url)
        page = c.get(f"/ui/experiments/{exp}")
        assert page.status_code == 200 and 'id="stop-button" class="danger">' in page.text
        token = csrf_of(page.text)
        assert c.post(f"/ui/experiments/{exp}/stop", data={}).status_code == 403
        assert c.post(f"/ui/experiments/{exp}/stop", data={"csrf": "forged"}).status_code == 403
        evil = c.post(f"/ui/experiments/{exp}/stop", data={"csrf": token}, headers={"Origin": "https://evil.example"})
        assert evil.status_code == 403
        assert api.get(exp)["state"] == "queued"
        done = c.post(f"/ui/experiments/{exp}/stop", data={"csrf": token}, headers={"Origin": server.url})
        assert done.status_code == 303 and done.headers["location"].endswith("?done=cancelled")
        assert api.get(exp)["outcome"] == "cancelled"
        page = c.get(done.headers["location"])
        assert "Cancelled." in page.text and re.search(r'id="stop-button" class="danger" disabled', page.text)
        other = login(server.url)  # another session: its own CSRF token
        assert other.post(f"/ui/experiments/{exp}/delete", data={"csrf": token}).status_code == 403
        gone = c.post(f"/ui/experiments/{exp}/delete", data={"csrf": token})
        assert gone.status_code == 303 and gone.headers["location"] == "/ui/"
        assert c.get(f"/ui/experiments/{exp}", headers=PAGE).status_code == 404
        bearer = httpx.post(f"{server.url}/ui/logout", headers=BEARER, data={})
        assert bearer.status_code == 303  # a bearer header needs no CSRF token (no ambient credential)


def test_hostile_purposes_and_log_lines_are_text_everywhere(redis_url, tmux_socket, tmp_path) -> None:
    a = demo(tmp_path, "a", SCRIPT_PURPOSE)
    b = demo(tmp_path, "b", IMG_PURPOSE)
    with running_console(redis_url, tmux_socket, tmp_path) as console, console.server.client() as api:
        ids = [api.submit(sc.blueprint.read_text())["id"] for sc in (a, b)]
        for exp in ids:
            wait_for(lambda e=exp: api.get(e)["state"] == "finished", 120, f"{exp} to finish")
        log_file = a.results / "logs" / "attempt-1.log"
        with open(log_file, "a") as fh:
            fh.write(f"{SCRIPT_LINE}\n{IMG_LINE}\n\x1b[31mred\x1b[0m text\n")
        c = login(console.url)
        pages = [c.get("/ui/").text, c.get("/ui/fragments/experiments").text,
                 *(c.get(f"/ui/experiments/{e}").text for e in ids), c.get("/ui/?q=script").text]
        parts = c.get(f"/ui/experiments/{ids[0]}/parts").json()
        for text in [*pages, *parts.values()]:
            assert "<script>window" not in text and "<img src=x" not in text and 'onerror="window' not in text
        listing = pages[0]
        assert SCRIPT_PURPOSE in html.unescape(listing) and IMG_PURPOSE in html.unescape(listing)  # shown as text
        assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in parts["report"]  # the report's purpose
        search = pages[-1]
        assert ids[0] in search and ids[1] not in search
        log = c.get(f"/ui/experiments/{ids[0]}/log", params={"tail": 3}).json()
        assert log["source"] == "file" and log["text"].splitlines() == [SCRIPT_LINE, IMG_LINE, "red text"]
        assert c.get(f"/ui/experiments/{ids[0]}/log").headers["content-type"].startswith("application/json")

        plot = c.get(f"/ui/experiments/{ids[0]}/files/reward_plot.png")
        assert plot.status_code == 200 and plot.content.startswith(b"\x89PNG")
        md = c.get(f"/ui/experiments/{ids[0]}/files/experiment_report.md")
        assert md.headers["content-type"].startswith("text/plain") and md.headers["x-content-type-options"] == "nosniff"
        assert c.get(f"/ui/experiments/{ids[0]}/files/finish.flag").status_code == 404  # not a served name
        assert c.get(f"/ui/experiments/{ids[0]}/files/..%2Ffinish.flag").status_code == 404
        secret = tmp_path / "secret.png"
        secret.write_bytes(b"\x89PNG not in the result dir")
        os.replace(b.results / "reward_plot.png", tmp_path / "moved.png")
        os.symlink(secret, b.results / "reward_plot.png")  # a link out of the result dir is not followed
        assert c.get(f"/ui/experiments/{ids[1]}/files/reward_plot.png").status_code == 404


def test_submit_page_shows_problems_by_field_then_submits(redis_url, tmux_socket, tmp_path) -> None:
    good = make("demo", tmp_path / "good")
    with running_console(redis_url, tmux_socket, tmp_path) as console:
        c = login(console.url)
        page = c.get("/ui/submit")
        token = csrf_of(page.text)
        assert "nodeW" in page.text and re.search(r'id="submit-button"[^>]* disabled', page.text)
        broken = "## [exp_purpose]\n<b>bold</b> purpose\n\n## [exp_result_dir]\nrelative/dir\n"
        checked = c.post("/ui/submit", data={"csrf": token, "blueprint": broken, "action": "check"})
        assert checked.status_code == 200 and "not runnable" in checked.text
        row = re.search(r"<tr class=\"has-error\">\s*<th>exp_result_dir</th>(.*?)</tr>", checked.text, re.S)
        assert row and 'class="problem error" data-field="exp_result_dir"' in row.group(1)
        assert re.search(r"<th>exp_codebase_dir</th>.*?data-field=\"exp_codebase_dir\"", checked.text, re.S)
        assert "&lt;b&gt;bold&lt;/b&gt;" in checked.text and "<b>bold</b>" not in checked.text
        refused = c.post("/ui/submit", data={"csrf": token, "blueprint": broken, "action": "submit"})
        assert refused.status_code == 422 and "blueprint rejected" in refused.text
        text = good.blueprint.read_text()
        ok = c.post("/ui/submit", data={"csrf": token, "blueprint": text, "action": "check"})
        assert ok.status_code == 200 and "runnable" in ok.text and "not runnable" not in ok.text
        assert "Changes the runner will make before launching" in ok.text
        assert "val_print_to_markdown_file_path" in ok.text  # the preflight's planned change
        done = c.post("/ui/submit", data={"csrf": token, "blueprint": text, "action": "submit", "node": "nodeW",
                                          "priority": "high"})
        assert done.status_code == 303
        exp = done.headers["location"].rsplit("/", 1)[1]
        with console.server.client() as api:
            rec = api.get(exp)
            assert rec["target_node"] == "nodeW" and rec["priority"] == "high"
        nodes = c.get("/ui/fragments/nodes").text
        assert 'id="node-nodeW"' in nodes and "live" in nodes
        assert c.post("/ui/submit", data={"blueprint": text, "action": "submit"}).status_code == 403  # no CSRF


def test_live_streams_end_after_finished(redis_url, tmux_socket, tmp_path) -> None:
    sc = demo(tmp_path, "a", "a short run")
    with running_console(redis_url, tmux_socket, tmp_path) as console, console.server.client() as api:
        c = login(console.url)
        exp = api.submit(sc.blueprint.read_text())["id"]
        with c.stream("GET", f"/ui/experiments/{exp}/stream", timeout=120) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in resp.iter_lines() if line.startswith("data:")]
        assert lines[-1] == 'data: {"type": "end"}'
        assert any('"to": "finished"' in line for line in lines) and any('"evaluation"' in line for line in lines)
        with c.stream("GET", "/ui/stream", params={"after": "0-0"}, timeout=30) as resp:
            for line in resp.iter_lines():
                if '"to": "finished"' in line:
                    assert exp in line
                    break
        Path(tmp_path / "done").touch()


def test_the_experiments_page_says_when_no_worker_is_live(redis_url, tmp_path) -> None:
    """`up` serves the console before its worker joins (issue 39): until a node's heartbeat is live the
    list says queued experiments wait for one, and the refreshed table drops the line once one is."""
    from ajet_runner.store.store import Store

    store = Store.from_url(redis_url)
    with running_server(redis_url, tmp_path / "serve.log") as server:
        c = login(server.url)
        assert "No worker is live yet" in c.get("/ui/", headers=PAGE).text
        store.nodes.heartbeat("n1", {"gpus": 0, "slots": 1}, ttl=30)
        assert "No worker is live yet" not in c.get("/ui/fragments/experiments").text
        assert "No worker is live yet" not in c.get("/ui/", headers=PAGE).text
        c.close()
