"""`ajet-runner up`: the API, the web console and a local worker on one machine, in one command.

For a first look on a laptop: nothing to install but this package and tmux. Without REDIS_URL it starts the
embedded Redis (service/embedded.py), a worker for this machine (as `run` does) on a private tmux socket in
DIR, and serves the API and the console on a loopback address with a token of its own (printed, and kept in
DIR/token). A demo experiment (the simulated AgentJet, examples/) is submitted once the worker has joined, so the
console has something to show; `--no-demo` skips it. The console answers at once: the worker (seconds of
start-up on a loaded machine) joins when it is ready, and the console says so meanwhile.
Ctrl-C stops the experiments still running (each gets its report and `finish.flag`), then the worker, the API and
the embedded Redis.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ajet_runner.cli.commands import output
from ajet_runner.statemachine.durations import format_duration, format_limit
from ajet_runner.store.connection import (
    RedisSettingsError,
    RedisTarget,
    check_reachable,
    need_target,
    target_from,
)
from ajet_runner.store.settings import get_settings

STOP_WAIT_SECONDS = 60.0  # after Ctrl-C: how long the running experiments get to stop and write their reports


def _configured_redis() -> RedisTarget | None:
    """REDIS_URL or the sentinels (None: start an embedded one); mixed or unreachable settings stop `up`
    naming them."""
    try:
        target = target_from(get_settings())
        if target is not None:
            check_reachable(target)
        return target
    except RedisSettingsError as exc:
        raise output.fail(f"error: {exc}") from None


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _token(workdir: Path) -> tuple[str, Path | None]:
    """$AJET_RUNNER_TOKEN when set, else a new one kept in DIR/token (readable by this user only: a token
    file left by an earlier `up` is replaced, never reused or written through with its old mode or a link)."""
    given = os.environ.get("AJET_RUNNER_TOKEN", "").split(",")[0].strip()
    if given:
        return given, None
    token = secrets.token_urlsafe(24)
    path = workdir / "token"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token, path


def _submit_demo(store: Any, workdir: Path, node: str) -> str:
    from ajet_runner.service.demo import materialize
    from ajet_runner.service.submit import submit

    blueprint = materialize("demo", workdir / "demo")
    # Submitted once our worker joined; a missed heartbeat since must not refuse it (it waits queued then).
    rec = submit(store, blueprint.read_text(encoding="utf-8"), blueprint_path=str(blueprint), node=node,
                 wait_for_node=True)
    return str(rec["id"])


def _demo_or_fail(store: Any, workdir: Path, node: str, server: Any, failed: list[str]) -> None:
    """Submit the demo and print its line; when it cannot be, say why (in `failed`) and stop serving."""
    try:
        demo_id = _submit_demo(store, workdir, node)
    except Exception as exc:  # noqa: BLE001 - in the worker-join thread: `up` ends naming it, not a traceback
        failed.append(f"error: the demo experiment could not be submitted: {type(exc).__name__}: {exc}")
        server.should_exit = True
        return
    output.copyable(f"demo:     experiment {demo_id} (results in {workdir / 'demo' / 'results'})")
    sys.stdout.flush()


WORKER_JOIN_SECONDS = 120.0  # nothing waits on it: the console serves meanwhile


def _await_worker(store: Any, node: str, worker: Any, server: Any, failed: list[str],
                  then: Callable[[], None] | None = None) -> None:
    """Say when the worker has joined, then call `then`; if it dies first, say why (in `failed`) and stop
    serving."""
    from ajet_runner.cli.commands.local_worker import wait_for_node

    t0 = time.monotonic()
    try:
        wait_for_node(store, node, worker, WORKER_JOIN_SECONDS)
    except RuntimeError as exc:
        failed.append(f"error: the local worker did not start: {exc}")
        server.should_exit = True
        return
    output.err(f"worker {node} joined after {format_duration(time.monotonic() - t0)}")
    if then is not None:
        then()


def _stop_experiments(store: Any, wait: float) -> None:
    """Ask every unfinished experiment to stop, and wait (up to `wait` seconds) until they are finished."""
    live = [rec["id"] for rec in store.records.unfinished()]
    for exp_id in live:
        store.runs.request_cancel(exp_id)
    if live:
        output.err(f"stopping {len(live)} experiment(s) and writing their reports (up to {format_limit(wait)}; "
                   "Ctrl-C again to leave them)")
    deadline = time.monotonic() + wait
    while live and time.monotonic() < deadline:
        live = [i for i in live if (rec := store.records.get(i)) is not None and not rec.finished]
        time.sleep(0.2)


def _check_can_serve(host: str, port: int) -> None:
    """A loopback address (this is a try-out), a free port and tmux (experiments run in it); exit 2 otherwise."""
    from ajet_runner.cli.commands.serve_command import is_loopback

    if not is_loopback(host):
        raise output.fail(f"error: `up` serves on a loopback address only, not {host}; on a cluster use "
                          "`ajet-runner serve` with a token (docs/console.md)")
    if not _port_is_free(host, port):
        raise output.fail(f"error: port {port} on {host} is in use; choose another with --port")
    if shutil.which("tmux") is None:
        raise output.fail("error: tmux is not installed (e.g. 'apt-get install tmux'): experiments run in it")


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: ajet-runner up --port 8080 (then open the console URL it prints)")
    def up(
        workdir: Path = typer.Option(None, "--dir", help="where the demo, the token and the tmux socket go",
                                     show_default="./runs/up-TIME"),
        host: str = typer.Option("127.0.0.1", help="address to serve on (a loopback one: this is a try-out)"),
        port: int = typer.Option(8080, help="TCP port of the API and the console"),
        demo: bool = typer.Option(True, "--demo/--no-demo", help="submit a demo experiment (the simulated AgentJet)"),
        node: str = typer.Option("", help="node name of the local worker", show_default="the hostname"),
    ) -> None:
        """The API, the web console and a local worker on this machine (embedded Redis unless one is set)."""
        import uvicorn

        from ajet_runner.cli.commands.local_worker import start_local_worker, stop_local
        from ajet_runner.service.embedded import EmbeddedRedis, EmbeddedRedisError
        from ajet_runner.store.store import Store

        _check_can_serve(host, port)
        workdir = (workdir or Path("runs") / f"up-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        token, token_file = _token(workdir)
        os.environ.setdefault("AJET_RUNNER_TMUX_SOCKET", str(workdir / "tmux.sock"))
        embedded = None
        if _configured_redis() is None:  # REDIS_URL or the sentinels, else an embedded one
            try:
                embedded = EmbeddedRedis(private=True).start()  # no TCP port: a 0700 unix socket and a password
            except EmbeddedRedisError as exc:
                raise output.fail(f"error: {exc}", output.FAILED) from None
            os.environ["REDIS_URL"] = embedded.url
        os.environ["AJET_RUNNER_TOKEN"] = token
        # Other users of this machine reach 127.0.0.1 too: /metrics (experiment purposes) needs the token here,
        # unless AJET_RUNNER_METRICS_AUTH says otherwise.
        os.environ.setdefault("AJET_RUNNER_METRICS_AUTH", "1")
        get_settings.cache_clear()
        settings = get_settings()
        node = node or settings.node
        worker = start_local_worker(os.environ, node)
        store = Store.from_url(need_target(settings))
        try:
            from ajet_runner.service.api.application import create_app
            from ajet_runner.service.api.hosts import HostsError

            try:  # loopback Host names only, on every route (/metrics, without a token, included)
                app = create_app(settings, port=port, bind=host, local=True)
            except HostsError:
                raise output.fail("error: `up` answers loopback Host names only, not AJET_RUNNER_ALLOWED_HOSTS="
                                  f"{settings.allowed_hosts}; to serve other names use `ajet-runner serve` with "
                                  "a token") from None
            server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                   log_config=None, timeout_graceful_shutdown=5,
                                                   server_header=False))

            failed: list[str] = []

            def announce_once_listening() -> None:  # the printed URL answers when a person opens it
                while not server.started and not server.should_exit:
                    time.sleep(0.05)
                if server.started:
                    _announce(host, port, token, token_file, settings.tmux_socket, demo)

            # The demo is submitted once the worker has joined (it could not run before): its blueprint's parse
            # and checks (~0.3 s of CPU, seconds on a loaded machine, in this process) are neither on the way to
            # the server's start nor beside its first answers (issue 39).
            def submit_demo() -> None:
                _demo_or_fail(store, workdir, node, server, failed)

            threading.Thread(target=announce_once_listening, name="announce", daemon=True).start()
            threading.Thread(target=_await_worker, args=(store, node, worker, server, failed, submit_demo if demo
                                                         else None), name="worker-join", daemon=True).start()
            with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C once it has shut down
                server.run()
            if failed:
                raise output.fail(failed[0], output.FAILED)
            with contextlib.suppress(KeyboardInterrupt):
                _stop_experiments(store, STOP_WAIT_SECONDS)
        finally:
            stop_local(worker, store, embedded)
            if settings.tmux_socket == str(workdir / "tmux.sock"):  # our private tmux server: its panes linger
                subprocess.run(["tmux", "-S", settings.tmux_socket, "kill-server"], capture_output=True,
                               check=False)


def _announce(host: str, port: int, token: str, token_file: Path | None, tmux_socket: str, demo: bool) -> None:
    url = f"http://{host}:{port}"
    where = f"kept in {token_file}" if token_file else "from $AJET_RUNNER_TOKEN"
    credentials = f"AJET_RUNNER_TOKEN_FILE={token_file}" if token_file else "AJET_RUNNER_TOKEN=<as set>"
    lines = [
        f"console:  {url}/ui/",
        f"token:    {token}   (sign in with it; {where})",
        f"API docs: {url}/docs",
        f"CLI:      export AJET_RUNNER_URL={url} {credentials}; ajet-runner scan",
    ]
    lines.append(f"tmux:     tmux -S {tmux_socket} ls")
    lines.append("worker:   joins when it is ready (a line on stderr says when); queued experiments wait for it"
                 + ("; then the demo is submitted (its line follows)" if demo else ""))
    lines.append("Ctrl-C stops the experiments still running (with their reports), the worker and the API.")
    for line in lines:
        output.copyable(line)
    sys.stdout.flush()
