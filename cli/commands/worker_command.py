"""`ajet-runner worker` (one per GPU node) and `ajet-runner drain`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from ajet_runner.cli.commands.redis_config import redis_or_exit
from ajet_runner.store.settings import get_settings

if TYPE_CHECKING:
    from ajet_runner.store.clients import RedisTarget


def _need_redis(check: bool = True) -> RedisTarget:
    return redis_or_exit(get_settings(), check=check)


def _check_webhook_url(settings: Any) -> None:
    """AJET_RUNNER_WEBHOOK_URL is posted to by this worker: one it may not post to stops it here, named."""
    from ajet_runner.statemachine.blueprint.webhook_url import webhook_url_problem

    url = settings.webhook_url.strip()
    problem = webhook_url_problem(url, allow_http=settings.webhook_allow_http) if url else ""
    if problem:
        typer.echo(f"error: AJET_RUNNER_WEBHOOK_URL {problem}", err=True)
        raise typer.Exit(2)


def export_executor_options(executor: str, hosts: list[str], partition: str, sbatch_args: list[str]) -> None:
    """The executor options as settings in the environment (the watcher and its slots are other processes)."""
    import os
    import shlex

    from ajet_runner.workers.executors import names

    values = {"AJET_RUNNER_EXECUTOR": executor.strip().lower(), "AJET_RUNNER_HOSTS": ",".join(hosts),
              "AJET_RUNNER_SLURM_PARTITION": partition, "AJET_RUNNER_SLURM_ARGS": shlex.join(sbatch_args)}
    chosen = values["AJET_RUNNER_EXECUTOR"] or get_settings().executor
    if chosen not in names():
        typer.echo(f"error: --executor {chosen!r}: expected one of {', '.join(names())}", err=True)
        raise typer.Exit(2)
    for name, value in values.items():
        if value:
            os.environ[name] = value
    get_settings.cache_clear()


def _first_heartbeat(url: RedisTarget, info: Any) -> float:
    """The node's first heartbeat, on a connection of its own, before the supervisor's module is imported;
    returns the worker's start time it announced. An unreachable Redis is the supervisor's loop to report."""
    import logging
    import time

    from ajet_runner.store.store import REDIS_DOWN, Store
    from ajet_runner.workers.executors.ssh_hosts import served_hosts
    from ajet_runner.workers.identity.this_node import heartbeat

    started_at = time.time()
    store = Store.from_url(url, socket_timeout=10, socket_connect_timeout=5)
    try:
        settings = get_settings()
        heartbeat(store, info, [], started_at, executor=settings.executor or "local", hosts=served_hosts(settings))
    except REDIS_DOWN as exc:
        logging.getLogger(__name__).warning("redis unreachable at start: %s", exc)
    finally:
        store.close()
    return started_at


def _export_address(address: str) -> None:
    """--address for the watcher, a separate process that reads it from the environment."""
    if not address:
        return
    import os

    os.environ["AJET_RUNNER_NODE_ADDRESS"] = address
    get_settings.cache_clear()


def _serve_metrics(sup: Any, settings: Any, metrics_port: int, metrics_host: str) -> None:
    """This worker's /metrics, when a port is given (the option, else the setting)."""
    port = settings.metrics_port if metrics_port < 0 else metrics_port
    if not port:
        return
    from ajet_runner.workers.node.worker_metrics import serve_worker_metrics

    serve_worker_metrics(sup, port, metrics_host or settings.metrics_host)


def _set_drain(store: Any, name: str, undo: bool, by: str, reason: str, sticky: bool) -> dict[str, Any]:
    """Drain the node (by `by`, else user@host) or undo it; what was set, as `--json` prints it."""
    if undo:
        store.nodes.set_drain(name, False)
        return {"node": name, "draining": False}
    import getpass
    import socket

    who = by or f"{getpass.getuser()}@{socket.gethostname()}"
    store.nodes.set_drain(name, True, by=who, reason=reason, sticky=sticky)
    return {"node": name, "draining": True, "by": who, "reason": reason, "sticky": sticky}


def _drain_line(result: dict[str, Any]) -> str:
    """What `drain` did, as a person reads it."""
    name = result["node"]
    if not result["draining"]:
        return f"node {name}: taking work again"
    kept = "kept across worker restarts (--undo to end it)" if result["sticky"] else "until its next worker starts"
    why = f" ({result['reason']})" if result["reason"] else ""
    return f"node {name}: draining, by {result['by']}{why}; {kept}"


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: REDIS_URL=redis://redis-host:6379/0 ajet-runner worker --node gpu-a --gpus 8 "
                        "(or AJET_RUNNER_REDIS_SENTINELS=s0:26379,s1:26379,s2:26379 AJET_RUNNER_REDIS_MASTER=ajet)")
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
        executor: str = typer.Option("", help="where attempts run: local, ssh or slurm",
                                     show_default="$AJET_RUNNER_EXECUTOR, else local"),
        host: list[str] = typer.Option([], "--host", help="an ssh host this worker serves (repeat for more)",
                                       show_default="$AJET_RUNNER_HOSTS"),
        partition: str = typer.Option("", help="SLURM partition the jobs go to",
                                      show_default="$AJET_RUNNER_SLURM_PARTITION, else the cluster's default"),
        sbatch_arg: list[str] = typer.Option([], "--sbatch-arg", help="one more sbatch argument (repeat for more)",
                                             show_default="$AJET_RUNNER_SLURM_ARGS"),
    ) -> None:
        """Run this node's worker: the watcher (a thread per run), heartbeat, re-adoption of running experiments."""
        # Imported here, not with the module: what runs before the watcher is spawned and the first heartbeat is
        # what a restarted node's adoption waits for (issue 39); the store, the start checks (the failure catalogue)
        # and the supervisor are imported after the spawn, while the watcher starts up beside us.
        from ajet_runner.logsetup import LogSetupError, configure
        from ajet_runner.workers.identity.this_node import NodeInfo
        from ajet_runner.workers.node.watcher_process import spawn_watcher

        export_executor_options(executor, host, partition, sbatch_arg)
        _export_address(address)
        url = _need_redis()
        settings = get_settings()
        try:  # first, so every line has the format; exported: the slot processes log the same way
            configure("worker", log_level, log_format, node=node or settings.node)
        except LogSetupError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        info = NodeInfo.from_settings(node or settings.node, settings.gpus if gpus < 0 else gpus,
                                      slots or settings.slots)
        # First: the watcher's start-up (the driver's imports) is what re-adopting a node's runs waits for, so it
        # overlaps ours from here. Should a check below fail, it ends with this process (PR_SET_PDEATHSIG).
        watcher = spawn_watcher(info, url)

        from ajet_runner.cli.commands.start_checks import check_adviser, install_site_catalogue

        try:
            check_adviser("worker")
            _check_webhook_url(settings)
            install_site_catalogue("worker")  # validated here; each slot loads it again
        except typer.Exit:
            watcher.terminate()
            raise
        started_at = _first_heartbeat(url, info)  # listed now, not after the supervisor's imports and first scan
        from ajet_runner.workers.node.supervisor import NodeSupervisor

        sup = NodeSupervisor(settings, info, url)
        sup.watcher = watcher
        sup.started_at = started_at
        outbox: list[Any] = []  # webhooks, stage reports (the outbox): started after the first adoption scan

        def start_outbox(_: Any) -> None:
            if not outbox:
                from ajet_runner.workers.notify.deliverer import start_deliverer

                outbox.append(start_deliverer(settings, url, info.name, sup.stopping))

        sup.on_tick = start_outbox
        _serve_metrics(sup, settings, metrics_port, metrics_host)

        from ajet_runner.workers.node.stop_signals import StopSignals

        def watcher_pid() -> int | None:
            proc = sup.watcher
            return proc.pid if proc is not None and proc.returncode is None else None

        # Not a handler that sets sup.stopping: one signal's handler inside another's lock hung the worker.
        StopSignals(sup.stopping, watcher_pid).install()
        sup.run()
        for thread in outbox:
            thread.join(10)  # what is due now still gets its chance (workers/notify/deliverer.py DRAIN_SECONDS)

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
        from ajet_runner.store.store import Store

        store = Store.from_url(_need_redis(check=False))
        name = node or get_settings().node
        known = [n["name"] for n in store.nodes.all()]
        if name not in known and not (undo and store.nodes.draining(name)):
            typer.echo(f"error: no node named {name!r} has a worker registered (known: {', '.join(known) or 'none'}); "
                       "see `ajet-runner nodes`", err=True)
            raise typer.Exit(2)
        result = _set_drain(store, name, undo, by, reason, sticky)
        typer.echo(json.dumps(result) if as_json else _drain_line(result))
