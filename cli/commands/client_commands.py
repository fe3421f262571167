"""CLI commands that talk to `ajet-runner serve` over HTTP (AJET_RUNNER_URL, AJET_RUNNER_TOKEN, or flags).

`submit`, `scan`, `status`, `stop`, `logs`, `events`, `watch`, `nodes`; and drop-ins for the
AgentJet research workflow: `submit --blueprint=PATH`, `scan-jobs` and `stop-jobs --stop-job-id=ID`
(each takes the workflow's `--runner=ssh|pai` and ignores it with a note on stderr); the same three
are installed as the workflow's own console scripts by ajet_runner.cli.commands.alpha_scripts.
Exit codes (ajet_runner.cli.commands.output): 0 done, 1 refused or failed, 2 usage or missing input
(also a missing or refused token), 3 the API cannot be reached or cannot serve; 130 Ctrl-C.
Every API error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape

from ajet_runner.cli.commands import output
from ajet_runner.cli.commands.output import FAILED, INTERRUPTED, OK, UNREACHABLE, USAGE, echo_json, err, print_table
from ajet_runner.service.client.api_client import (
    DEFAULT_URL,
    RECONNECT_LIMIT,
    AjetRunnerClient,
    ApiError,
    ApiUnavailable,
    Reconnect,
    TokenFileError,
    UnexpectedAnswer,
    token_from_env,
)
from ajet_runner.statemachine.durations import format_duration, format_progress
from ajet_runner.statemachine.lifecycle import FINISHED
from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC

if TYPE_CHECKING:  # a type only: `scan` and the other light commands never load pydantic
    from ajet_runner.service.client.answers import StageSubmission

URL_OPTION = typer.Option(DEFAULT_URL, "--url", envvar="AJET_RUNNER_URL", help="the API's base URL")
TOKEN_OPTION = typer.Option("", "--token", envvar="AJET_RUNNER_TOKEN", show_envvar=False,
                            show_default="$AJET_RUNNER_TOKEN, else the first line of $AJET_RUNNER_TOKEN_FILE",
                            help="bearer token")
JSON_OPTION = typer.Option(False, "--json", help="print JSON")
RECONNECT_OPTION = typer.Option(RECONNECT_LIMIT, "--reconnect-limit", envvar="AJET_RUNNER_RECONNECT_LIMIT",
                                min=0.0, metavar="SECONDS",
                                help="give up (exit 3) after this many seconds without contact with the API")

# The research workflow's status words; `timed_out` counts as Failed (its run did not end by itself).
STATUS_WORDS = {"completed": "Succeeded", "early_stopped": "Succeeded", "failed": "Failed", "timed_out": "Failed",
                "cancelled": "Stopped"}


def status_word(rec: Any) -> str:
    """queued → Queuing; launching/running/failing/repairing/collecting → Running; finished → by outcome."""
    state = rec.get("state")
    if state == "queued":
        return "Queuing"
    if state == FINISHED:
        return STATUS_WORDS.get(str(rec.get("outcome")), "Failed")
    return "Running"


def exit_code_of(exc: ApiError) -> int:
    if isinstance(exc, ApiUnavailable) or exc.status == 0 or exc.status >= 500:
        return UNREACHABLE
    if exc.status in (401, 403):
        return USAGE
    return FAILED


def error_line(exc: ApiError) -> str:
    if isinstance(exc, ApiUnavailable) or exc.status == 0:
        return f"error: {exc.detail}"
    if exc.status in (401, 403):
        return f"error: the server refused the token ({exc.detail}); set AJET_RUNNER_TOKEN or --token"
    if exc.status >= 500:
        return f"error: the API cannot serve now (HTTP {exc.status}): {exc.detail}"
    return f"error: {exc.detail}" if exc.status == 404 else f"error: HTTP {exc.status}: {exc.detail}"


def the_token(given: str) -> str | None:
    """--token (or $AJET_RUNNER_TOKEN), else $AJET_RUNNER_TOKEN_FILE's; a token file that cannot be read is exit 2."""
    try:
        return given.split(",")[0].strip() or token_from_env() or None
    except TokenFileError as exc:
        err(f"error: {exc}")
        raise typer.Exit(USAGE) from None


@contextmanager
def connect(url: str, token: str) -> Iterator[AjetRunnerClient]:
    """A client; any API error, outage or Ctrl-C ends the command with one line and its exit code."""
    try:
        client = AjetRunnerClient(url, the_token(token))
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        err(f"error: bad API URL {url!r}: {exc}")
        raise typer.Exit(USAGE) from None
    try:
        yield client
    except ApiError as exc:
        err(error_line(exc))
        raise typer.Exit(exit_code_of(exc)) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        err(f"error: bad API URL {url!r}: {exc}")
        raise typer.Exit(USAGE) from None
    except ValueError as exc:  # pydantic's ValidationError (typed calls) or UnexpectedAnswer (plain-JSON calls)
        if not _unexpected_answer(exc):
            raise
        what = f"{exc.error_count()} field errors" if hasattr(exc, "error_count") else str(exc)
        err(f"error: the API at {url} answered something unexpected ({what}); "
            "is it an ajet-runner server of this version?")
        raise typer.Exit(FAILED) from None
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None
    finally:
        client.close()


def _unexpected_answer(exc: ValueError) -> bool:
    """An answer that failed its check; pydantic is looked up only if a typed call imported it."""
    pydantic = sys.modules.get("pydantic")
    return isinstance(exc, UnexpectedAnswer) or (pydantic is not None and isinstance(exc, pydantic.ValidationError))


def _elapsed(rec: Any) -> str:
    secs = rec.get("elapsed_seconds")
    if secs is None:
        return "-"
    return format_duration(float(secs))


def _reward(rec: Any) -> str:
    value = (rec.get("latest_metrics") or {}).get(HEADLINE_METRIC)
    return f"{value:.4f}" if isinstance(value, int | float) else "-"


def _state_or_outcome(rec: Any) -> str:
    if rec.get("state") == FINISHED:
        return str(rec.get("outcome") or "finished")
    return str(rec.get("state")) + (" (stopping)" if rec.get("cancel_requested") else "")


def _when(at: Any) -> str:
    try:
        return datetime.fromtimestamp(float(at)).strftime("%H:%M:%S")
    except (TypeError, ValueError):
        return "--:--:--"


def create_time(at: Any) -> str:
    """scan-jobs' `create_time`: local time `YYYY-MM-DD HH:MM:SS`, or '' when unknown."""
    try:
        return datetime.fromtimestamp(float(at)).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError):
        return ""


def _purpose(rec: Any) -> str:
    lines = (rec.get("purpose") or "").strip().splitlines()
    return lines[0] if lines else ""


def event_line(event: Any) -> str:
    from ajet_runner.cli.commands.follow import describe

    data = event.to_dict() if hasattr(event, "to_dict") else dict(event)
    text = describe(data)
    if text is None:
        extra = {k: v for k, v in data.items() if k not in ("at", "event_id", "type", "id")}
        text = str(extra.get("message") or json.dumps(extra, default=str)[:300])
    return f"{_when(data.get('at'))} {data.get('type', '?'):<11} {text}"


# -- submit ------------------------------------------------------------------------------------------
def read_blueprints(paths: list[str]) -> list[tuple[str, str]]:
    """(name, text) of every blueprint, `-` = stdin; any unreadable one → one line each and exit 2, nothing sent."""
    out, missing = [], False
    for name in paths:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            missing = True
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            err(f"error: cannot read blueprint {name}: {why}")
            continue
        out.append((name, text))
    if missing:
        raise typer.Exit(USAGE)
    return out


def _submit_all(client: AjetRunnerClient, blueprints: list[tuple[str, str]], node: str | None,
                priority: str | None, as_json: bool, idempotency_key: str | None, wait_for_node: bool = False,
                nodes: list[str] | None = None) -> int:
    failed = False
    for name, text in blueprints:
        try:
            rec = client.submit(text, node=node, priority=priority,
                                blueprint_path=None if name == "-" else str(Path(name).resolve()),
                                idempotency_key=idempotency_key, wait_for_node=wait_for_node, nodes=nodes)
        except ApiError as exc:
            if exit_code_of(exc) != FAILED:
                raise
            failed = True
            _print_rejected(name, exc, as_json)
            continue
        if as_json:
            echo_json({"blueprint": name, **rec.to_dict()}, lines=True)
        else:
            typer.echo(f"Job submitted: {rec.id}")
            for w in rec.warnings:
                err(f"  warning {w.get('field')}: {w.get('message')}")
    return FAILED if failed else OK


def _print_rejected(name: str, exc: ApiError, as_json: bool) -> None:
    """A refused blueprint: the answer as JSON (with --json), and on stderr why, one problem a line."""
    if as_json:
        echo_json({"blueprint": name, "status": exc.status, "detail": exc.detail, "problems": exc.problems},
                  lines=True)
    err(f"Rejected: {name} (HTTP {exc.status})")
    for p in exc.problems or [{"level": "error", "field": "-", "message": exc.detail}]:
        err(f"  {p.get('level', 'error')} {p.get('field', '-')}: {p.get('message', '')}")


# -- stop ------------------------------------------------------------------------------------------
def _stop_one(client: AjetRunnerClient, exp_id: str, delete: bool) -> dict[str, Any]:
    """{"id", "result": stopped|stopping|deleted|deleting|already_finished, "record"?}."""
    if delete:
        res = client.delete(exp_id)
        return {"id": exp_id, "result": "deleted" if res.deleted else "deleting", "state": res.state,
                "outcome": res.outcome}
    try:
        rec = client.stop(exp_id)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return {"id": exp_id, "result": "already_finished", "detail": exc.detail}
    return {"id": exp_id, "result": "stopped" if rec.finished else "stopping", "state": rec.state,
            "outcome": rec.outcome}


def _stop_all(client: AjetRunnerClient, ids: list[str], delete: bool, as_json: bool) -> int:
    failed = False
    for exp_id in ids:
        try:
            res = _stop_one(client, exp_id, delete)
        except ApiError as exc:
            if exit_code_of(exc) != FAILED:
                raise
            failed = True
            if as_json:
                echo_json({"id": exp_id, "result": "error", "status": exc.status, "detail": exc.detail}, lines=True)
            err(f"error: {exp_id}: {exc.detail}")
            continue
        if as_json:
            echo_json(res, lines=True)
            continue
        typer.echo({
            "deleted": f"Deleted: {exp_id}",
            "deleting": f"Deleting: {exp_id} (stopping it first; the record is dropped once it is finished)",
            "already_finished": f"Already finished: {exp_id}",
            "stopped": f"Stopped: {exp_id} ({res.get('outcome')})",
            "stopping": f"Stopping: {exp_id} (was {res.get('state')}; it is stopped gracefully, collected, and "
                        "finish.flag is written)",
        }[res["result"]])
    return FAILED if failed else OK


def stop_jobs_lines(client: AjetRunnerClient, ids: list[str], delete: bool) -> Iterator[str]:
    """The research workflow's `stop_jobs` lines: `Stopping job <id> ...`, then `Deleted job <id>`, or
    `Failed to stop <id>: <why>` — one failure never stops the others."""
    for exp_id in ids:
        yield f"Stopping job {exp_id} ..."
        try:
            res = _stop_one(client, exp_id, delete)
        except ApiError as exc:
            why = exc.detail if exc.status in (0, 404) else f"HTTP {exc.status}: {exc.detail}"
            yield f"Failed to stop {exp_id}: {why}"
            continue
        if res["result"] in ("deleted", "deleting"):
            yield f"Deleted job {exp_id}"


RUNNER_HELP = "accepted for the research workflow (ssh|pai); ignored, with a note on stderr"
RUNNER_NOTES = {
    "submit": "ajet-runner places the job on its own workers",
    "scan-jobs": "ajet-runner lists the jobs of its own API (AJET_RUNNER_URL)",
    "stop-jobs": "ajet-runner stops jobs through its own API (AJET_RUNNER_URL)",
}


def runner_note(command: str, runner: str | None) -> None:
    """The workflow's `--runner=ssh|pai` picks a backend; ajet-runner has one: say so on stderr, go on."""
    if runner is not None:
        err(f"note: --runner={runner} is ignored: {RUNNER_NOTES[command]}")


def submit_drop_in(paths: list[str], *, runner: str | None, acknowledge: int | None, url: str, token: str,
                   as_json: bool = False, node: str | None = None, priority: str | None = None,
                   idempotency_key: str | None = None, wait_for_node: bool = False,
                   nodes: list[str] | None = None) -> int:
    """`submit` / `alpha-run-blueprint`: `Job submitted: <id>` per blueprint; the exit code."""
    runner_note("submit", runner)
    if acknowledge is not None:
        err(f"note: --acknowledge-max-parallel-capacity={acknowledge} is ignored: the workers' GPU slots bound "
            "parallel runs")
    texts = read_blueprints(paths)
    with connect(url, token) as client:
        return _submit_all(client, texts, node, priority, as_json, idempotency_key, wait_for_node, nodes)


def _has_sweep(paths: list[str]) -> bool:
    """A blueprint file with an `[exp_sweep]` part (submitted as a stage, named after the file)."""
    if len(paths) != 1 or paths[0] == "-":
        return False
    try:
        text = Path(paths[0]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False  # read_blueprints says why
    from ajet_runner.statemachine.blueprint.parse import parse_blueprint

    return bool(parse_blueprint(text).exp_sweep.strip())


def default_stage_name(paths: list[str]) -> str:
    """A sweep submitted without --stage is named after its blueprint file (`blueprint_1.md` -> `blueprint_1`)."""
    import re

    stem = Path(paths[0]).stem if paths and paths[0] != "-" else "sweep"
    return (re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "sweep")[:64]


def _resolved_path(path: str) -> str:
    """The blueprint's absolute path the server records ("" for stdin)."""
    return "" if path == "-" else str(Path(path).resolve())


def submit_stage_cli(paths: list[str], *, stage: str | None, sweep: list[str], stage_dir: str | None,
                     webhook_url: str | None, node: str | None, priority: str | None, wait_for_node: bool,
                     as_json: bool, url: str, token: str, idempotency_key: str | None = None,
                     max_experiments: int | None = None) -> int:
    """`submit --stage` / `--sweep`: `Job submitted: <id>` per experiment, `Stage: NAME …` on stderr; exit 1 if
    any experiment was refused."""
    if not stage and len(paths) > 1:
        err("error: several blueprints make a stage: name it with --stage NAME")
        return USAGE
    name = stage or default_stage_name(paths)
    texts = read_blueprints(paths)
    pairs = [(text, _resolved_path(p)) for p, text in texts]
    with connect(url, token) as client:
        try:
            result = client.submit_stage(name, pairs, sweep=sweep or None, stage_dir=stage_dir,
                                         webhook_url=webhook_url, node=node, priority=priority,
                                         wait_for_node=wait_for_node, idempotency_key=idempotency_key,
                                         max_experiments=max_experiments)
        except ApiError as exc:
            if exit_code_of(exc) != FAILED:
                raise
            _print_stage_rejected(name, exc, as_json)
            return FAILED
    if as_json:
        echo_json(result.to_dict())
    else:
        _print_stage_submission(result)
    return FAILED if result.refused else OK


def _print_stage_rejected(name: str, exc: ApiError, as_json: bool) -> None:
    """A refused stage (nothing of it was submitted): the answer as JSON (with --json), and why on stderr."""
    if as_json:
        echo_json({"stage": name, "status": exc.status, "detail": exc.detail, "problems": exc.problems})
    err(f"Rejected: stage {name} (HTTP {exc.status}); nothing was submitted")
    _err_problems(exc.problems or [{"level": "error", "field": "-", "message": exc.detail}])


def _err_problems(problems: list[dict[str, Any]]) -> None:
    for p in problems:
        err(f"  {p.get('level', 'error')} {p.get('field', '-')}: {p.get('message', '')}")


def _print_stage_submission(result: StageSubmission) -> None:
    """`Job submitted: <id>` per accepted experiment (its warnings on stderr), the stage line, the refusals."""
    for rec in result.experiments:
        typer.echo(f"Job submitted: {rec.id}")
        for w in rec.warnings:
            err(f"  warning {w.get('field')}: {w.get('message')}")
    where = f"; its report goes to {result.stage_dir}" if result.stage_dir else ""
    err(f"Stage: {result.stage} ({len(result.experiments)} experiment(s){where}); wait for it with "
        f"`ajet-runner wait --stage {result.stage}`")
    for refused in result.refused:
        err(f"Rejected: {refused.get('label')} (HTTP {refused.get('status')})")
        _err_problems(refused.get("problems") or [])


def scan_jobs_drop_in(*, runner: str | None, as_json: bool, url: str, token: str) -> None:
    """`scan-jobs` / `alpha-scan-jobs`: one Python dict per job (or a JSON list)."""
    runner_note("scan-jobs", runner)
    with connect(url, token) as client:
        jobs = [{"job_id": r["id"], "display_name": _purpose(r), "status": status_word(r),
                 "create_time": create_time(r.get("created_at"))} for r in client.iter_json()]
    if as_json:
        echo_json(jobs)
        return
    for job in jobs:
        typer.echo(repr(job))


def stop_jobs_drop_in(ids: list[str], *, delete: bool, runner: str | None, as_json: bool, url: str,
                      token: str) -> int:
    """`stop-jobs` / `alpha-stop-jobs`: the workflow's lines, exit 0 whatever happened (`--json`: our exit codes)."""
    runner_note("stop-jobs", runner)
    if as_json:
        with connect(url, token) as client:
            return _stop_all(client, ids, delete, as_json=True)
    try:
        client = AjetRunnerClient(url, token.split(",")[0].strip() or token_from_env() or None)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, TokenFileError) as exc:
        why = str(exc) if isinstance(exc, TokenFileError) else f"bad API URL {url!r}: {exc}"
        for exp_id in ids:
            typer.echo(f"Stopping job {exp_id} ...")
            typer.echo(f"Failed to stop {exp_id}: {why}")
        return OK
    with client:
        for line in stop_jobs_lines(client, ids, delete):
            typer.echo(line)
    return OK


# -- logs ------------------------------------------------------------------------------------------
def _overlap(old: list[str], new: list[str]) -> int:
    """How many leading lines of `new` are the trailing lines of `old` (for the Redis log tail)."""
    for k in range(min(len(old), len(new)), 0, -1):
        if old[-k:] == new[:k]:
            return k
    return 0


def _follow_log(client: AjetRunnerClient, exp_id: str, tail: int, follow: bool, raw: bool, as_json: bool,
                reconnect_limit: float, interval: float = 1.0) -> None:
    backoff = Reconnect(client.url, reconnect_limit)

    def show(text: str, chunk: Any) -> None:
        if as_json:
            echo_json({"text": text, "source": chunk.source, "path": chunk.path, "offset": chunk.offset,
                       "state": chunk.state}, lines=True)
        elif text:
            typer.echo(text, nl=not text.endswith("\n"))

    chunk = backoff.call(lambda: client.log(exp_id, tail=tail, raw=raw)) if follow else client.log(
        exp_id, tail=tail, raw=raw)
    show(chunk.text, chunk)
    lines = chunk.text.splitlines()
    while follow and not (chunk.state == FINISHED and chunk.source == "redis"):
        if chunk.state == FINISHED and not chunk.text:
            return
        time.sleep(interval)
        if chunk.source == "file" and chunk.offset is not None:
            nxt = backoff.call(partial(client.log, exp_id, since=chunk.offset, raw=raw))
            if nxt.path != chunk.path:  # a new attempt: its log from the start
                nxt = backoff.call(lambda: client.log(exp_id, since=0, raw=raw))
            show(nxt.text, nxt)
        else:
            nxt = _next_tail(client, backoff, exp_id, raw, lines, show)
            lines = nxt.text.splitlines()
        chunk = nxt


def _next_tail(client: AjetRunnerClient, backoff: Reconnect, exp_id: str, raw: bool, lines: list[str],
               show: Callable[[str, Any], None]) -> Any:
    """The next look at a log read from Redis's tail: the lines not shown yet (the tails overlap), or the
    whole file once it appears while nothing was shown."""
    nxt = backoff.call(lambda: client.log(exp_id, tail=200, raw=raw))
    if nxt.source == "file" and nxt.offset is not None and not lines:
        nxt = backoff.call(lambda: client.log(exp_id, since=0, raw=raw))  # the file appeared: from its start
        show(nxt.text, nxt)
        return nxt
    new = nxt.text.splitlines()
    fresh = new[_overlap(lines, new):]
    if fresh:
        show("\n".join(fresh) + "\n", nxt)
    return nxt


def _node_columns(nodes: list[dict[str, Any]]) -> list[str]:
    """Every field any node has, in the server's order (name first): new fields show up by themselves."""
    columns: list[str] = ["name"]
    for n in nodes:
        columns += [k for k in n if k not in columns]
    return columns


# -- what scan, status and nodes show -----------------------------------------------------------------
SCAN_COLUMNS = ("id", "purpose", "state", "node", "elapsed", HEADLINE_METRIC)
NODE_TIMES = ("started_at", "last_seen", "drained_at")  # epoch seconds: shown as local times
NODE_FREE_TEXT = ("running", "drained_by", "drain_reason")


def show_scan(items: Sequence[Mapping[str, Any]], console: Console | None = None) -> None:
    """Records as the API sends them (plain JSON or the typed answers, which read alike)."""
    print_table(SCAN_COLUMNS, (
        (r["id"], _purpose(r), _state_or_outcome(r), r.get("node") or r.get("target_node"), _elapsed(r), _reward(r))
        for r in items), console=console, shrink=("purpose",))


def _node_header(column: str) -> str:
    return "heartbeat_age" if column == "heartbeat_age_seconds" else column


def _node_value(column: str, value: Any) -> Any:
    if column in NODE_TIMES:
        return output.local_time(value) if value else None
    if column.endswith("_seconds") and isinstance(value, int | float) and not isinstance(value, bool):
        return format_duration(float(value))
    if isinstance(value, list):  # experiment ids: ", " lets a folded cell break between them
        return ", ".join(map(str, value)) or None
    return value


def show_nodes(nodes: list[dict[str, Any]], console: Console | None = None) -> None:
    """Every field of every node, times as times and ages as durations."""
    columns = _node_columns(nodes)
    print_table([_node_header(c) for c in columns], ([_node_value(c, n.get(c)) for c in columns] for n in nodes),
                console=console, shrink=NODE_FREE_TEXT)


def _status_fields(rec: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The record's facts that are set, its times as local times, the elapsed time and the latest metrics."""
    fields: list[tuple[str, Any]] = [(k, rec.get(k)) for k in ("id", "purpose", "state", "outcome", "reason", "node",
                                                                "tmux_session", "attempt", "result_dir")
                                     if rec.get(k) not in (None, "")]
    fields += [(name, output.local_time(rec.get(key))) for name, key in
               (("created", "created_at"), ("started", "started_at"), ("finished", "finished_at")) if rec.get(key)]
    fields.append(("elapsed", format_progress(rec.get("elapsed_seconds"), rec.get("max_seconds"))))
    fields += [(k, f"{v:.4g}") for k, v in sorted((rec.get("latest_metrics") or {}).items())
               if isinstance(v, int | float) and not isinstance(v, bool)]
    return fields


def _submit_usage(paths: list[str], priority: str | None, idempotency_key: str | None, staged: bool) -> str:
    """What makes a `submit` command line unusable (exit 2), or ""."""
    rules = (
        (not paths, "error: give at least one blueprint file (positional or --blueprint=PATH, - for stdin)"),
        (priority not in (None, "normal", "high"), "error: --priority must be normal or high"),
        (bool(idempotency_key) and len(paths) > 1 and not staged,
         "error: --idempotency-key names one submission: give one blueprint (or name the stage: --stage)"),
        (paths.count("-") > 1, "error: stdin (-) can be read only once"),
    )
    return next((message for broken, message in rules if broken), "")


def _node_list(nodes: str | None) -> list[str] | None:
    """--nodes as a list (None when not given)."""
    return [n.strip() for n in nodes.split(",") if n.strip()] if nodes else None


def _check_filters(state: str | None, outcome: str | None) -> None:
    """--state and --outcome must name a state and an outcome (exit 2 otherwise)."""
    if state is None and outcome is None:
        return  # the state machine (transitions) is imported only when asked
    from ajet_runner.statemachine.lifecycle import Outcome, State

    for flag, value, known in (("--state", state, State), ("--outcome", outcome, Outcome)):
        if value is not None and value not in {v.value for v in known}:
            raise output.fail(f"error: {flag} {value!r} is not one of {', '.join(v.value for v in known)}")


def show_status(rec: Mapping[str, Any], console: Console | None = None) -> None:
    """The record's facts (`key  value`), its latest metrics, then its history as a table."""
    output.print_fields(_status_fields(rec), console=console)
    if history := rec.get("history") or []:
        (console or output.console()).print("")
        print_table(("at", "transition", "trigger", "reason"), (
            (_when(h.get("at")), f"{h.get('from')} → {h.get('to')}", h.get("trigger"), h.get("reason"))
            for h in history), console=console, shrink=("reason",))


def register(app: typer.Typer) -> None:  # noqa: C901 - one closure per command
    @app.command(epilog="Example: ajet-runner submit blueprint_1.md blueprint_2.md --node gpu-a")
    def submit(
        blueprints: list[str] = typer.Argument(None, help="blueprint markdown files; - reads one from stdin",
                                               show_default=False, metavar="[BLUEPRINT]..."),
        blueprint: list[str] = typer.Option(None, "--blueprint", help="a blueprint file (repeatable; same as a "
                                            "positional; - = stdin)", show_default=False),
        node: str = typer.Option(None, "--node", help="run on this node only"),
        nodes: str = typer.Option(None, "--nodes", help="a multi-node run: comma-separated nodes it may use, the "
                                  "first is the head"),
        priority: str = typer.Option(None, "--priority", help="normal or high (front of the queue)"),
        idempotency_key: str = typer.Option(None, "--idempotency-key", help="names this submission: submitting "
                                            "again with the same key returns the first experiment (with --stage: "
                                            "the same stage)"),
        runner: str = typer.Option(None, "--runner", help=RUNNER_HELP, show_default=False),
        acknowledge: int = typer.Option(None, "--acknowledge-max-parallel-capacity", help="accepted for the research "
                                        "workflow; ignored: capacity is enforced by the workers' GPU slots",
                                        show_default=False),
        wait_for_node: bool = typer.Option(False, "--wait-for-node",
                                           help="queue it even if no live worker serves --node yet"),
        stage: str = typer.Option(None, "--stage", help="submit them as one stage of this name (docs/stages.md)"),
        sweep: list[str] = typer.Option(None, "--sweep", metavar="KEY=V1,V2", help="one experiment per combination "
                                        "of these YAML values (repeatable; dotted keys; makes a stage)"),
        stage_dir: str = typer.Option(None, "--stage-dir", metavar="DIR", help="where the stage report is written "
                                      "when its last experiment finishes", show_default="a sweep's result dir"),
        webhook_url: str = typer.Option(None, "--webhook-url", metavar="URL",
                                        help="the stage's own webhook (instead of $AJET_RUNNER_WEBHOOK_URL)"),
        max_experiments: int = typer.Option(None, "--max-experiments", min=1, max=1000, metavar="N",
                                            help="allow a sweep of up to N combinations (default 64, at most 1000)"),
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Submit blueprints: prints `Job submitted: <id>` for each (exit 1 if any was rejected)."""
        paths = [*(blueprints or []), *(blueprint or [])]
        staged = any((stage, sweep, stage_dir, webhook_url, max_experiments))  # any of them makes a stage
        usage = _submit_usage(paths, priority, idempotency_key, staged)
        if usage:
            err(usage)
            raise typer.Exit(USAGE)
        named = _node_list(nodes)
        if staged or (not named and _has_sweep(paths)):
            if named:
                raise output.fail("error: --nodes is not taken for a stage")
            runner_note("submit", runner)
            raise typer.Exit(submit_stage_cli(paths, stage=stage, sweep=list(sweep or []), stage_dir=stage_dir,
                                              webhook_url=webhook_url, node=node, priority=priority,
                                              wait_for_node=wait_for_node, as_json=as_json, url=url, token=token,
                                              idempotency_key=idempotency_key, max_experiments=max_experiments))
        raise typer.Exit(submit_drop_in(paths, runner=runner, acknowledge=acknowledge, url=url, token=token,
                                        as_json=as_json, node=node, priority=priority,
                                        idempotency_key=idempotency_key, wait_for_node=wait_for_node, nodes=named))

    @app.command(epilog="Example: ajet-runner scan --state running | cut -f1")
    def scan(
        state: str = typer.Option(None, help="only this state (queued, running, finished, ...)"),
        node: str = typer.Option(None, help="only this node"),
        outcome: str = typer.Option(None, help="only this outcome (completed, failed, cancelled, ...)"),
        stage: str = typer.Option(None, help="only the experiments of this stage"),
        limit: int = typer.Option(200, min=1, help="at most this many (newest first)"),
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Experiments: id, purpose, state or outcome, node, elapsed, latest mean_reward (tab-separated when piped)."""
        _check_filters(state, outcome)
        with connect(url, token) as client:
            items: list[dict[str, Any]] = []  # plain JSON: printing it needs no models (nor pydantic's import)
            for rec in client.iter_json(state=state, node=node, outcome=outcome, stage=stage):
                items.append(rec)
                if len(items) >= limit:
                    break
        if as_json:
            echo_json(items)
            return
        show_scan(items)

    @app.command(epilog="Example: ajet-runner status 3f9c2a1b7d40")
    def status(
        exp_id: str = typer.Argument(..., metavar="ID"),
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """One experiment: state, outcome, node, tmux session, timings, latest metrics, history."""
        with connect(url, token) as client:
            rec = client.get_json(exp_id)
        if as_json:
            echo_json(rec)
            return
        show_status(rec)

    @app.command(epilog="Example: ajet-runner stop 3f9c2a1b7d40 --delete")
    def stop(
        exp_ids: list[str] = typer.Argument(..., metavar="ID...", help="experiment ids"),
        delete: bool = typer.Option(False, "--delete", help="also drop the record (result files are kept)"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object per id"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Stop experiments: queued ones are cancelled at once; running ones stop gracefully and get collected."""
        with connect(url, token) as client:
            code = _stop_all(client, exp_ids, delete, as_json)
        raise typer.Exit(code)

    @app.command(epilog="Example: ajet-runner logs 3f9c2a1b7d40 -f --tail 50")
    def logs(
        exp_id: str = typer.Argument(..., metavar="ID"),
        follow: bool = typer.Option(False, "-f", "--follow", help="keep printing new lines until it finishes"),
        tail: int = typer.Option(200, "--tail", min=0, help="start with the last N lines"),
        raw: bool = typer.Option(False, "--raw", help="keep colour codes and Ray prefixes"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object per chunk: text, source, path, offset, "
                                     "state"),
        reconnect_limit: float = RECONNECT_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """The latest attempt's log."""
        with connect(url, token) as client:
            _follow_log(client, exp_id, tail, follow, raw, as_json, reconnect_limit)

    @app.command(epilog="Example: ajet-runner events 3f9c2a1b7d40 -f --json")
    def events(
        exp_id: str = typer.Argument(..., metavar="ID"),
        follow: bool = typer.Option(False, "-f", "--follow", help="follow live (server-sent events) until finished"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
        reconnect_limit: float = RECONNECT_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Transitions, evaluations, progress reports and repairs of one experiment."""
        show: Callable[[Any], None] = ((lambda e: echo_json(e.to_dict(), lines=True)) if as_json
                                       else (lambda e: typer.echo(event_line(e))))
        with connect(url, token) as client:
            if follow:
                for event in client.follow(exp_id, reconnect_limit=reconnect_limit):
                    show(event)
                return
            after = "0-0"
            while True:
                page = client.events(exp_id, after=after)
                for event in page.events:
                    show(event)
                if not page.events:
                    return
                after = page.next_after

    @app.command(epilog="Example: ajet-runner watch 3f9c2a1b7d40 (Ctrl-C detaches: the experiment goes on)")
    def watch(
        exp_id: str = typer.Argument(..., metavar="ID"),
        as_json: bool = typer.Option(False, "--json", help="no bar: print the final record as JSON"),
        stop_on_interrupt: bool = typer.Option(False, "--stop-on-interrupt",
                                               help="Ctrl-C stops the experiment (and waits for its report) "
                                               "instead of detaching"),
        reconnect_limit: float = RECONNECT_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """A live progress bar until it finishes; Ctrl-C detaches and the experiment goes on (as `kubectl logs -f`).
        Exit 0 completed/early_stopped, 1 failed/timed_out, 130 Ctrl-C (detached, or cancelled)."""
        from ajet_runner.cli.commands.follow import follow
        from ajet_runner.cli.commands.run_command import EXIT_CODES

        console = output.console(stderr=as_json)
        with connect(url, token) as client:
            backoff = Reconnect(client.url, reconnect_limit)
            backoff.call(lambda: client.get(exp_id))  # an unknown id is an error line before any bar is drawn

            def poll(after: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str]:
                page = backoff.call(lambda: client.events(exp_id, after=after, wait_ms=1000))
                rec = backoff.call(lambda: client.get(exp_id))
                return rec.to_dict(), [e.to_dict() for e in page.events], page.next_after

            def interrupt() -> None:
                try:
                    client.stop(exp_id)
                except ApiError as exc:
                    if exc.status != 409:
                        raise

            try:
                final = follow(poll, console, on_interrupt=interrupt if stop_on_interrupt else None,
                               quiet=as_json)
            except KeyboardInterrupt:
                err(f"Detached: {exp_id} goes on running. Watch it again with `ajet-runner watch {exp_id}`; "
                    f"stop it with `ajet-runner stop {exp_id}`.")
                raise typer.Exit(INTERRUPTED) from None
        outcome = str(final.get("outcome") or "")
        if as_json:
            echo_json(final)
        else:
            console.print(f"[bold]{outcome}[/]: {escape(str(final.get('reason') or ''))}", soft_wrap=True)
            output.copyable(f"report: {Path(final.get('result_dir') or '.') / 'experiment_report.md'}")
        raise typer.Exit(EXIT_CODES.get(outcome, FAILED))

    @app.command(epilog="Example: ajet-runner nodes --json")
    def nodes(
        as_json: bool = JSON_OPTION,
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """The workers' nodes: every field the API reports (alive, GPUs, slots, running, draining, ...)."""
        with connect(url, token) as client:
            found = [n.to_dict() for n in client.nodes()]
        if as_json:
            echo_json(found)
            return
        show_nodes(found)

    @app.command("scan-jobs", epilog="Example: ajet-runner scan-jobs")
    def scan_jobs(
        runner: str = typer.Option(None, "--runner", help=RUNNER_HELP, show_default=False),
        as_json: bool = typer.Option(False, "--json", help="a JSON list of the same dicts"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """One Python dict per job: job_id, display_name, status (Queuing|Running|Succeeded|Failed|Stopped),
        create_time (research-workflow drop-in for `scan_jobs [--runner=ssh|pai]`)."""
        scan_jobs_drop_in(runner=runner, as_json=as_json, url=url, token=token)

    @app.command("stop-jobs", epilog="Example: ajet-runner stop-jobs --stop-job-id=3f9c2a1b7d40 --delete")
    def stop_jobs(
        stop_job_id: list[str] = typer.Option(..., "--stop-job-id", help="an experiment id (repeatable)"),
        delete: bool = typer.Option(False, "--delete", help="also drop the records (result files are kept)"),
        runner: str = typer.Option(None, "--runner", help=RUNNER_HELP, show_default=False),
        as_json: bool = typer.Option(False, "--json", help="one JSON object per id instead of the workflow's lines"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Stop jobs by id: `Stopping job <id> ...`, `Deleted job <id>` or `Failed to stop <id>: <why>`; always
        exit 0 (research-workflow drop-in for `stop_jobs [--runner=ssh|pai] --stop-job-id=ID [--delete]`)."""
        raise typer.Exit(stop_jobs_drop_in(stop_job_id, delete=delete, runner=runner, as_json=as_json, url=url,
                                           token=token))
