"""CLI commands that talk to `ajet-runner serve` over HTTP (AJET_RUNNER_URL, AJET_RUNNER_TOKEN, or flags).

`submit`, `scan`, `status`, `stop`, `logs`, `events`, `watch`; and drop-ins for the AgentJet
research workflow: `submit --blueprint=PATH`, `scan-jobs` and `stop-jobs --stop-job-id=ID`.
Exit codes: 0 done, 1 something was refused or failed, 2 the server could not be reached or
refused the token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from service.client import DEFAULT_URL, AjetRunnerClient, ApiError, ApiUnavailable, token_from_env

URL_OPTION = typer.Option(DEFAULT_URL, "--url", envvar="AJET_RUNNER_URL", help="the API's base URL")
TOKEN_OPTION = typer.Option("", "--token", envvar="AJET_RUNNER_TOKEN", show_default=False,
                            help="bearer token (default: $AJET_RUNNER_TOKEN, or $AJET_RUNNER_TOKEN_FILE's first line)")
JSON_OPTION = typer.Option(False, "--json", help="print JSON")

# The research workflow's status words.
STATUS_WORDS = {"completed": "Succeeded", "early_stopped": "Succeeded", "failed": "Failed", "timed_out": "Failed",
                "cancelled": "Stopped"}


def status_word(rec: dict[str, Any]) -> str:
    """queued → Queuing; launching/running/failing/repairing/collecting → Running; finished → by outcome."""
    state = rec.get("state")
    if state == "queued":
        return "Queuing"
    if state == "finished":
        return STATUS_WORDS.get(str(rec.get("outcome")), "Failed")
    return "Running"


@contextmanager
def _unknown_id_exits() -> Iterator[None]:
    """404 → one line and exit 1; Ctrl-C → exit 130; other API errors propagate."""
    try:
        yield
    except ApiError as exc:
        if exc.status != 404:
            raise
        _err(f"error: {exc.detail}")
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _err(message: str) -> None:
    typer.echo(message, err=True)


@contextmanager
def connect(url: str, token: str) -> Iterator[AjetRunnerClient]:
    """A client; unreachable server or refused token → one clear line and exit 2."""
    client = AjetRunnerClient(url, token.split(",")[0].strip() or token_from_env() or None)
    try:
        yield client
    except ApiUnavailable as exc:
        _err(f"error: {exc.detail}")
        raise typer.Exit(2) from exc
    except ApiError as exc:
        if exc.status != 401:
            raise
        _err(f"error: the server refused the token ({exc.detail}); set AJET_RUNNER_TOKEN or --token")
        raise typer.Exit(2) from exc
    finally:
        client.close()


def _elapsed(rec: dict[str, Any]) -> str:
    secs = rec.get("elapsed_seconds")
    if secs is None:
        return "-"
    secs = int(secs)
    return f"{secs // 3600}h{secs % 3600 // 60:02d}m" if secs >= 3600 else f"{secs // 60}m{secs % 60:02d}s"


def _reward(rec: dict[str, Any]) -> str:
    value = (rec.get("latest_metrics") or {}).get("mean_reward")
    return f"{value:.4f}" if isinstance(value, int | float) else "-"


def _state_or_outcome(rec: dict[str, Any]) -> str:
    if rec.get("state") == "finished":
        return str(rec.get("outcome") or "finished")
    return str(rec.get("state")) + (" (stopping)" if rec.get("cancel_requested") else "")


def _when(at: Any) -> str:
    try:
        return datetime.fromtimestamp(float(at)).strftime("%H:%M:%S")
    except (TypeError, ValueError):
        return "--:--:--"


def event_line(event: dict[str, Any]) -> str:
    from service.follow import describe

    text = describe(event)
    if text is None:
        extra = {k: v for k, v in event.items() if k not in ("at", "event_id", "type", "id")}
        text = str(extra.get("message") or json.dumps(extra, default=str)[:300])
    return f"{_when(event.get('at'))} {event.get('type', '?'):<11} {text}"


def _submit_all(client: AjetRunnerClient, paths: list[Path], node: str | None, priority: str | None,
                as_json: bool, wait_for_node: bool = False) -> int:
    failed = False
    for path in paths:
        try:
            rec = client.submit_file(path, node=node, priority=priority, wait_for_node=wait_for_node)
        except OSError as exc:
            failed = True
            _err(f"Rejected: {path}: cannot read it ({exc.strerror or exc})")
            continue
        except ApiError as exc:
            if exc.status in (0, 401):
                raise
            failed = True
            if as_json:
                typer.echo(json.dumps({"blueprint": str(path), "status": exc.status, "detail": exc.detail,
                                       "problems": exc.problems}))
            _err(f"Rejected: {path} (HTTP {exc.status})")
            for p in exc.problems or [{"level": "error", "field": "-", "message": exc.detail}]:
                _err(f"  {p.get('level', 'error')} {p.get('field', '-')}: {p.get('message', '')}")
            continue
        if as_json:
            typer.echo(json.dumps({"blueprint": str(path), **rec}))
        else:
            typer.echo(f"Job submitted: {rec['id']}")
            for w in rec.get("warnings") or []:
                _err(f"  warning {w.get('field')}: {w.get('message')}")
    return 1 if failed else 0


def _stop_all(client: AjetRunnerClient, ids: list[str], delete: bool) -> int:
    failed = False
    for exp_id in ids:
        try:
            if delete:
                res = client.delete(exp_id)
                typer.echo(f"Deleted: {exp_id}" if res["deleted"] else
                           f"Deleting: {exp_id} (stopping it first; the record is dropped once it is finished)")
                continue
            rec = client.stop(exp_id)
        except ApiError as exc:
            if exc.status in (0, 401):
                raise
            if exc.status == 409:
                typer.echo(f"Already finished: {exp_id}")
                continue
            failed = True
            _err(f"error: {exp_id}: {exc.detail}")
            continue
        if rec["state"] == "finished":
            typer.echo(f"Stopped: {exp_id} ({rec.get('outcome')})")
        else:
            typer.echo(f"Stopping: {exp_id} (was {rec['state']}; it is stopped gracefully, collected, "
                       f"and finish.flag is written)")
    return 1 if failed else 0


def _overlap(old: list[str], new: list[str]) -> int:
    """How many leading lines of `new` are the trailing lines of `old` (for the Redis log tail)."""
    for k in range(min(len(old), len(new)), 0, -1):
        if old[-k:] == new[:k]:
            return k
    return 0


def _follow_log(client: AjetRunnerClient, exp_id: str, tail: int, follow: bool, raw: bool,
                interval: float = 1.0) -> None:
    chunk = client.log(exp_id, tail=tail, raw=raw)
    typer.echo(chunk.text, nl=False)
    lines = chunk.text.splitlines()
    while follow and not (chunk.state == "finished" and chunk.source == "redis"):
        if chunk.state == "finished" and not chunk.text:
            return
        time.sleep(interval)
        if chunk.source == "file" and chunk.offset is not None:
            nxt = client.log(exp_id, since=chunk.offset, raw=raw)
            if nxt.path != chunk.path:  # a new attempt: its log from the start
                nxt = client.log(exp_id, since=0, raw=raw)
            typer.echo(nxt.text, nl=False)
        else:
            nxt = client.log(exp_id, tail=200, raw=raw)
            if nxt.source == "file" and nxt.offset is not None and not lines:
                nxt = client.log(exp_id, since=0, raw=raw)  # the log file appeared: from its first line
                typer.echo(nxt.text, nl=False)
            else:
                new = nxt.text.splitlines()
                fresh = new[_overlap(lines, new):]
                if fresh:
                    typer.echo("\n".join(fresh))
            lines = nxt.text.splitlines()
        chunk = nxt


def register(app: typer.Typer) -> None:  # noqa: C901 - one closure per command
    @app.command()
    def submit(
        blueprints: list[Path] = typer.Argument(None, help="blueprint markdown files", show_default=False),
        blueprint: list[Path] = typer.Option(None, "--blueprint", help="a blueprint file (repeatable; "
                                             "same as a positional)", show_default=False),
        node: str = typer.Option(None, "--node", help="run on this node only"),
        priority: str = typer.Option(None, "--priority", help="normal or high (front of the queue)"),
        wait_for_node: bool = typer.Option(False, "--wait-for-node",
                                           help="queue it even if no live worker serves --node yet"),
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Submit blueprints: prints `Job submitted: <id>` for each (exit 1 if any was rejected)."""
        paths = [*(blueprints or []), *(blueprint or [])]
        if not paths:
            _err("error: give at least one blueprint file (positional or --blueprint=PATH)")
            raise typer.Exit(2)
        if priority not in (None, "normal", "high"):
            _err("error: --priority must be normal or high")
            raise typer.Exit(2)
        with connect(url, token) as client:
            code = _submit_all(client, paths, node, priority, as_json, wait_for_node)
        raise typer.Exit(code)

    @app.command()
    def scan(
        state: str = typer.Option(None, help="only this state (queued, running, finished, ...)"),
        node: str = typer.Option(None, help="only this node"),
        outcome: str = typer.Option(None, help="only this outcome (completed, failed, cancelled, ...)"),
        limit: int = typer.Option(200, help="at most this many (newest first)"),
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """A table of experiments: id, purpose, state or outcome, node, elapsed, latest mean_reward."""
        with connect(url, token) as client:
            items = []
            for rec in client.iter_experiments(state=state, node=node, outcome=outcome):
                items.append(rec)
                if len(items) >= limit:
                    break
        if as_json:
            typer.echo(json.dumps(items, indent=2))
            return
        table = Table(show_lines=False)
        for col in ("id", "purpose", "state", "node", "elapsed", "mean_reward"):
            table.add_column(col, overflow="fold" if col == "id" else "ellipsis",
                             max_width=40 if col == "purpose" else None, no_wrap=True)
        for rec in items:
            table.add_row(rec["id"], (rec.get("purpose") or "").splitlines()[0] if rec.get("purpose") else "",
                          _state_or_outcome(rec), rec.get("node") or rec.get("target_node") or "-", _elapsed(rec),
                          _reward(rec))
        Console().print(table)

    @app.command()
    def status(
        exp_id: str = typer.Argument(..., metavar="ID"),
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """One experiment: state, outcome, node, tmux session, timings, latest metrics, history."""
        with connect(url, token) as client:
            try:
                rec = client.get(exp_id)
            except ApiError as exc:
                if exc.status == 404:
                    _err(f"error: {exc.detail}")
                    raise typer.Exit(1) from exc
                raise
        if as_json:
            typer.echo(json.dumps(rec, indent=2))
            return
        for key in ("id", "purpose", "state", "outcome", "reason", "node", "tmux_session", "attempt", "result_dir"):
            value = rec.get(key)
            if value not in (None, ""):
                typer.echo(f"{key:<13} {value}")
        typer.echo(f"{'elapsed':<13} {_elapsed(rec)}" + (f" of {rec['max_seconds']:.0f}s" if rec.get("max_seconds")
                                                          else ""))
        for k, v in sorted((rec.get("latest_metrics") or {}).items()):
            if isinstance(v, int | float):
                typer.echo(f"  {k} = {v:.4g}")
        for h in rec.get("history") or []:
            typer.echo(f"{_when(h.get('at'))} {h.get('from')} → {h.get('to')} ({h.get('trigger')}) "
                       f"{h.get('reason') or ''}".rstrip())

    @app.command()
    def stop(
        exp_ids: list[str] = typer.Argument(..., metavar="ID...", help="experiment ids"),
        delete: bool = typer.Option(False, "--delete", help="also drop the record (result files are kept)"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Stop experiments: queued ones are cancelled at once; running ones stop gracefully and get collected."""
        with connect(url, token) as client:
            code = _stop_all(client, exp_ids, delete)
        raise typer.Exit(code)

    @app.command()
    def logs(
        exp_id: str = typer.Argument(..., metavar="ID"),
        follow: bool = typer.Option(False, "-f", "--follow", help="keep printing new lines until it finishes"),
        tail: int = typer.Option(200, "--tail", help="start with the last N lines"),
        raw: bool = typer.Option(False, "--raw", help="keep colour codes and Ray prefixes"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """The latest attempt's log."""
        with connect(url, token) as client, _unknown_id_exits():
            _follow_log(client, exp_id, tail, follow, raw)

    @app.command()
    def events(
        exp_id: str = typer.Argument(..., metavar="ID"),
        follow: bool = typer.Option(False, "-f", "--follow", help="follow live (server-sent events) until finished"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Transitions, evaluations, progress reports and repairs of one experiment."""
        show: Callable[[dict[str, Any]], None] = ((lambda e: typer.echo(json.dumps(e, default=str))) if as_json
                                                  else (lambda e: typer.echo(event_line(e))))
        with connect(url, token) as client, _unknown_id_exits():
            if follow:
                for event in client.follow(exp_id):
                    show(event)
                return
            after = "0-0"
            while True:
                page = client.events(exp_id, after=after)
                for event in page["events"]:
                    show(event)
                if not page["events"]:
                    return
                after = page["next_after"]

    @app.command()
    def watch(
        exp_id: str = typer.Argument(..., metavar="ID"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """A live progress bar until it finishes; Ctrl-C stops the experiment. Exit 0 / 1 / 130 like `run`."""
        from service.commands.run import EXIT_CODES
        from service.follow import follow

        console = Console()
        with connect(url, token) as client:
            def poll(after: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str]:
                page = client.events(exp_id, after=after, wait_ms=1000)
                return client.get(exp_id), page["events"], page["next_after"]

            def interrupt() -> None:
                try:
                    client.stop(exp_id)
                except ApiError as exc:
                    if exc.status != 409:
                        raise

            with _unknown_id_exits():
                final = follow(poll, console, on_interrupt=interrupt)
        outcome = str(final.get("outcome") or "")
        console.print(f"[bold]{outcome}[/]: {final.get('reason', '')}")
        console.print(f"report: {Path(final.get('result_dir') or '.') / 'experiment_report.md'}")
        raise typer.Exit(EXIT_CODES.get(outcome, 1))

    @app.command("scan-jobs")
    def scan_jobs(
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """One line per job: `<id> <Queuing|Running|Succeeded|Failed|Stopped>` (research-workflow drop-in)."""
        with connect(url, token) as client:
            for rec in client.iter_experiments():
                typer.echo(f"{rec['id']} {status_word(rec)}")

    @app.command("stop-jobs")
    def stop_jobs(
        stop_job_id: list[str] = typer.Option(..., "--stop-job-id", help="an experiment id (repeatable)"),
        delete: bool = typer.Option(False, "--delete", help="also drop the records (result files are kept)"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Stop jobs by id (research-workflow drop-in for `stop_jobs --stop-job-id=ID [--delete]`)."""
        with connect(url, token) as client:
            code = _stop_all(client, stop_job_id, delete)
        raise typer.Exit(code)
