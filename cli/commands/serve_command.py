"""`ajet-runner serve`: the HTTP API under uvicorn.

It refuses to start without a token, unless bound to a loopback address with `--insecure`
(then anyone on this machine may use it, and nobody else can reach it).
"""

from __future__ import annotations

import ipaddress
import logging

import typer

from ajet_runner.cli.commands.redis_config import redis_or_exit
from ajet_runner.store.settings import get_settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _no_token_refusal(configured: bool, insecure: bool, host: str) -> str:
    """Why the API may not start without a token ("" when it may: --insecure on a loopback address). --insecure
    never opens an API whose token source is configured but empty."""
    rules = (
        (configured, "the configured token source (AJET_RUNNER_TOKEN / AJET_RUNNER_TOKEN_FILE) holds no token"),
        (not insecure, "refusing to start without a token: set AJET_RUNNER_TOKEN (or AJET_RUNNER_TOKEN_FILE), "
                       "or bind to a loopback address with --insecure"),
        (not is_loopback(host), f"--insecure is only allowed on a loopback address, not {host}; set AJET_RUNNER_TOKEN"),
    )
    return next((why for refused, why in rules if refused), "")


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: AJET_RUNNER_TOKEN_FILE=/etc/ajet-runner/token ajet-runner serve --host 0.0.0.0")
    def serve(
        host: str = typer.Option("127.0.0.1", help="address to bind (0.0.0.0 for every interface)"),
        port: int = typer.Option(8080, help="TCP port"),
        insecure: bool = typer.Option(False, "--insecure",
                                      help="allow no token (only with a loopback --host)"),
        log_level: str = typer.Option("", help="debug, info, warning or error",
                                      show_default="$AJET_RUNNER_LOG_LEVEL, else info"),
        log_format: str = typer.Option("", help="text, or json (one object per line)",
                                       show_default="$AJET_RUNNER_LOG_FORMAT, else text"),
    ) -> None:
        """Serve the HTTP API (submit, list, stop, events, logs, nodes, /metrics) on REDIS_URL."""
        import uvicorn

        from ajet_runner.logsetup import LogSetupError, configure
        from ajet_runner.service.api.application import create_app, trusted_proxies
        from ajet_runner.service.api.auth import TokenFileError, TokenSet
        from ajet_runner.service.api.hosts import HostsError

        try:
            level = configure("serve", log_level, log_format)
        except LogSetupError as exc:
            raise _fail(str(exc)) from exc
        settings = get_settings()
        redis_or_exit(settings)  # REDIS_URL, or the sentinels (each must answer and name the master)
        try:
            token_set = TokenSet.from_settings(settings)
            tokens = token_set.current()
        except TokenFileError as exc:
            raise _fail(str(exc)) from exc
        if not tokens:
            refusal = _no_token_refusal(token_set.configured, insecure, host)
            if refusal:
                raise _fail(refusal)
            logging.getLogger("ajet_runner.serve").warning("no token: the API is open to every user of this machine")
        try:
            api = create_app(settings, insecure=insecure and not token_set.configured, port=port, bind=host)
        except HostsError as exc:
            raise _fail(str(exc)) from exc
        # uvicorn's access log shows the method, path and status: tokens travel in a header, never logged.
        # log_config=None: uvicorn's records go through our handler (timestamps, json). With
        # AJET_RUNNER_TRUST_PROXY the app reads the forwarded headers itself (uvicorn's own would trust 127.0.0.1).
        uvicorn.run(api, host=host, port=port, log_level=level, log_config=None, timeout_graceful_shutdown=5,
                    server_header=False, proxy_headers=trusted_proxies(settings.trust_proxy) is None)
