"""`ajet-runner worker` (one per GPU node) and `ajet-runner drain`."""

from __future__ import annotations

import json
import signal
from typing import Any

import typer

from ajet_runner.cli.commands.catalogue_command import check_adviser, install_site_catalogue
from ajet_runner.store.settings import get_settings


def _need_redis_url() -> str:
    url = get_settings().redis_url
    if not url:
        typer.echo("error: REDIS_URL is not set (e.g. REDIS_URL=redis://redis-host:6379/0)", err=True)
        raise typer.Exit(2)
    return url


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: REDIS_URL=redis://redis-host:6379/0 ajet-runner worker --node gpu-a --gpus 8")
    def worker(
        node: str = typer.Option("", help="this node's name", show_default="$AJET_RUNNER_NODE or the hostname"),
        gpus: int = typer.Option(-1, help="GPUs on this node (0 = none)",
                                 show_default="$AJET_RUNNER_GPUS, else all GPUs nvidia-smi lists"),
        slots: int = typer.Option(0, help="experiments at once", show_default="$AJET_RUNNER_SLOTS, else one per GPU, "
                                  "or 2 without GPUs"),
        metrics_port: int = typer.Option(-1, help="Prometheus port for this worker (0 = off)",
                                         show_default="$AJET_RUNNER_METRICS_PORT, else off"),
        metrics_host: str = typer.Option("", help="address /metrics listens on (0.0.0.0 = every interface)",
                                         show_default="$AJET_RUNNER_METRICS_HOST, else 127.0.0.1"),
        log_level: str = typer.Option("", help="debug, info, warning or error",
                                      show_default="$AJET_RUNNER_LOG_LEVEL, else info"),
        log_format: str = typer.Option("", help="text, or json (one object per line)",
                                       show_default="$AJET_RUNNER_LOG_FORMAT, else text"),
        address: str = typer.Option("", help="MASTER_ADDR of the multi-node runs this node heads, for host names that "
                                    "do not resolve", show_default="$AJET_RUNNER_NODE_ADDRESS, else the hostname"),
    ) -> None:
        """Run this node's worker: the watcher (a thread per run), heartbeat, re-adoption of running experiments."""
        from ajet_runner.logsetup import LogSetupError, configure
        from ajet_runner.workers.node.this_node import NodeInfo
        from ajet_runner.workers.node.watcher_process import spawn_watcher

        if address:  # the watcher (a separate process) reads it from the environment
            import os

            os.environ["AJET_RUNNER_NODE_ADDRESS"] = address
            get_settings.cache_clear()
        url = _need_redis_url()
        settings = get_settings()
        try:  # first, so every line has the format; exported: the slot processes log the same way
            configure("worker", log_level, log_format, node=node or settings.node)
        except LogSetupError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        check_adviser("worker")
        install_site_catalogue("worker")  # validated here; each slot loads it again
        info = NodeInfo.from_settings(node or settings.node, settings.gpus if gpus < 0 else gpus,
                                      slots or settings.slots)
        watcher = spawn_watcher(info, url)  # before the supervisor's import: both processes start at once
        from ajet_runner.workers.node.supervisor import NodeSupervisor

        sup = NodeSupervisor(settings, info, url)
        sup.watcher = watcher
        from ajet_runner.workers.notify.deliverer import start_deliverer

        outbox = start_deliverer(settings, url, info.name, sup.stopping)  # webhooks, stage reports (the outbox)
        port = settings.metrics_port if metrics_port < 0 else metrics_port
        if port:
            from ajet_runner.workers.node.worker_metrics import serve_worker_metrics

            serve_worker_metrics(sup, port, metrics_host or settings.metrics_host)

        def stop(*_: Any) -> None:
            sup.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        sup.run()
        outbox.join(10)  # what is due now still gets its chance (workers/notify/deliverer.py DRAIN_SECONDS)

    @app.command(epilog='Example: ajet-runner drain --node gpu-a --sticky --reason "bad GPU 3"')
    def drain(
        node: str = typer.Option("", help="the node to drain",
                                 show_default="this node ($AJET_RUNNER_NODE or the hostname)"),
        undo: bool = typer.Option(False, "--undo", help="take work again"),
        as_json: bool = typer.Option(False, "--json", help='print only {"node", "draining", "by", "reason", '
                                     '"sticky"} as JSON'),
        sticky: bool = typer.Option(False, "--sticky",
                                    help="keep the drain when a worker (re)starts on the node (an operator's drain)"),
        reason: str = typer.Option("", help="why, shown in /v1/nodes"),
        by: str = typer.Option("", help="who drains (in a pod: the pod's name)", show_default="user@hostname"),
    ) -> None:
        """Stop a node taking new work; its running experiments go on in tmux (used by preStop).

        Without --sticky the node's next worker undoes the drain when it starts (a pod's preStop
        hook drains; its replacement takes work again)."""
        import getpass
        import socket

        from ajet_runner.store.store import Store

        store = Store.from_url(_need_redis_url())
        name = node or get_settings().node
        known = [n["name"] for n in store.nodes()]
        if name not in known and not (undo and store.draining(name)):
            typer.echo(f"error: no node named {name!r} has a worker registered (known: {', '.join(known) or 'none'}); "
                       "see `ajet-runner nodes`", err=True)
            raise typer.Exit(2)
        if undo:
            store.set_drain(name, False)
            result: dict[str, Any] = {"node": name, "draining": False}
        else:
            who = by or f"{getpass.getuser()}@{socket.gethostname()}"
            store.set_drain(name, True, by=who, reason=reason, sticky=sticky)
            result = {"node": name, "draining": True, "by": who, "reason": reason, "sticky": sticky}
        if as_json:
            typer.echo(json.dumps(result))
        elif undo:
            typer.echo(f"node {name}: taking work again")
        else:
            kept = "kept across worker restarts (--undo to end it)" if sticky else "until its next worker starts"
            typer.echo(f"node {name}: draining, by {result['by']}{f' ({reason})' if reason else ''}; {kept}")
