"""Stages on the command line: `wait`, `compare`, and `stage add|list|show` (docs/stages.md).

`submit --stage NAME FILE…` / `submit --sweep KEY=V1,V2 FILE` (cli/commands/client_commands.py) make a stage;
`wait --stage NAME` (or ids) blocks until every experiment is finished — one live line each, then one
summary line each — and exits 0 when every one completed or early-stopped, 1 otherwise; `compare --stage NAME`
writes `stage_report.md`, `stage_results.json` and `stage_plot.png`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ajet_runner.cli.commands import output
from ajet_runner.cli.commands.client_commands import TOKEN_OPTION, URL_OPTION, connect
from ajet_runner.cli.commands.output import FAILED, INTERRUPTED, OK, USAGE, echo_json, err, print_table
from ajet_runner.service.client.api_client import EmptyStage, StageNotFound
from ajet_runner.statemachine.durations import format_duration
from ajet_runner.statemachine.lifecycle import FINISHED, SUCCEEDED
from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC

WAIT_COLUMNS = ("id", "purpose", "state", "attempt", "elapsed", HEADLINE_METRIC)
BEST = f"best {HEADLINE_METRIC}"


def _purpose(rec: Any) -> str:
    lines = (rec.get("purpose") or "").strip().splitlines()
    return lines[0] if lines else ""


def _state(rec: Any) -> str:
    if rec.get("state") == FINISHED:
        return str(rec.get("outcome") or "finished")
    return str(rec.get("state") or "?") + (" (stopping)" if rec.get("cancel_requested") else "")


def _elapsed(rec: Any) -> str:
    secs = rec.get("elapsed_seconds")
    return format_duration(float(secs)) if isinstance(secs, int | float) else "-"


def _reward(rec: Any) -> str:
    value = (rec.get("latest_metrics") or {}).get(HEADLINE_METRIC)
    return f"{value:.4f}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _row(rec: Any) -> list[str]:
    return [rec.id, _purpose(rec), _state(rec), str(rec.get("attempt") or 0), _elapsed(rec), _reward(rec)]


def _live_table(recs: list[Any]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in WAIT_COLUMNS:
        table.add_column(name, overflow="fold", max_width=50 if name == "purpose" else None)
    for rec in recs:
        table.add_row(*(Text(v) for v in _row(rec)))  # a sweep's `[key=value, …]` purpose is text, not markup
    done = sum(1 for r in recs if r.finished)
    table.caption = f"{done} of {len(recs)} finished"
    return table


def summary_line(rec: Any) -> str:
    """One line per experiment once the wait is over: id, outcome, elapsed, final mean_reward, result dir."""
    line = f"{rec.id}  {_state(rec)}  {_elapsed(rec)}  {HEADLINE_METRIC} {_reward(rec)}  {rec.get('result_dir') or ''}"
    if rec.get("state") == FINISHED and rec.get("outcome") not in SUCCEEDED and rec.get("reason"):
        line += f"  ({' '.join(str(rec.get('reason')).split())[:300]})"
    return line


def _wait(client: Any, stage: str | None, ids: list[str], timeout: float | None, interval: float,
          as_json: bool) -> int:
    try:
        recs = _watch(client, stage, ids, timeout, interval, as_json)
    except TimeoutError as exc:
        err(f"error: {exc}")
        return FAILED
    except StageNotFound as exc:  # nothing will ever finish: say so at once
        err(f"error: {exc.detail}")
        return USAGE
    except EmptyStage as exc:
        err(f"error: {exc}")
        return FAILED
    except KeyboardInterrupt:
        err("Detached: the experiments go on running. Wait again with the same command.")
        return INTERRUPTED
    ok = all(r.get("outcome") in SUCCEEDED for r in recs)
    if as_json:
        echo_json({"stage": stage, "succeeded": ok, "experiments": [r.to_dict() for r in recs]})
    else:
        for rec in recs:
            output.copyable(summary_line(rec))
    return OK if ok else FAILED


def _watch(client: Any, stage: str | None, ids: list[str], timeout: float | None, interval: float,
           as_json: bool) -> list[Any]:
    """The records once all are finished, shown meanwhile: a live table on a terminal, else one line per
    change of state (nothing with --json)."""
    console = output.console(stderr=True)
    seen: dict[str, str] = {}

    def printed_lines(recs: list[Any]) -> None:  # not a terminal: one line when an experiment's state changes
        for rec in recs:
            now = _state(rec)
            if seen.get(rec.id) != now:
                seen[rec.id] = now
                err(f"{time.strftime('%H:%M:%S')} {rec.id} {now}")

    if not console.is_terminal or as_json:
        return client.wait_stage(stage, ids or None, timeout=timeout, interval=interval,
                                 on_update=None if as_json else printed_lines)
    live = Live(console=console, auto_refresh=False, transient=False)
    with live:
        return client.wait_stage(stage, ids or None, timeout=timeout, interval=interval,
                                 on_update=lambda r: live.update(_live_table(r), refresh=True))


def _local_or_served(served: dict[str, Any]) -> Any:
    """An experiment's facts: its results.json read here when this machine sees it, else what the server read."""
    from ajet_runner.resultdir.stage_inputs import read_facts
    from ajet_runner.statemachine.comparison.compare import ExperimentFacts

    facts = ExperimentFacts.model_validate(served)
    if facts.source != "results.json" and facts.state == FINISHED and facts.result_dir:
        local = read_facts(facts.result_dir)
        if local is not None and local.id == facts.id:
            return local
    return facts


def _compare(facts: list[Any], stage: str, metric: str, out_dir: str, as_json: bool) -> int:
    from ajet_runner.statemachine.comparison.compare import compare
    from ajet_runner.workers.report.stage_report import write_stage_report

    comparison = compare(stage, facts, metric)
    notes: list[str] = []
    try:
        written = write_stage_report(out_dir, comparison, notes)
    except OSError as exc:
        err(f"error: cannot write the stage report into {out_dir}: {exc.strerror or exc}")
        return FAILED
    if as_json:
        typer.echo(Path(written["results"]).read_text(encoding="utf-8").rstrip("\n"))
    else:
        _print_comparison(comparison, stage, metric, written)
        for note in notes:  # e.g. no plot on a client-only install, and how to get one
            output.copyable(f"plot: not drawn: {note}")
    return OK


def _print_comparison(comparison: Any, stage: str, metric: str, written: Mapping[str, Any]) -> None:
    """What differs, the verdicts, the ranking by final value, the runs that did not succeed, the files."""
    compared = ", ".join(comparison.compared_keys) or "nothing"
    seeds = f"; repeats over {', '.join(comparison.seed_keys)}" if comparison.seed_keys else ""
    output.copyable(f"stage {stage}: {len(comparison.rows)} experiment(s); differs in {compared}{seeds}")
    for verdict in comparison.verdicts:
        output.copyable(f"  verdict: {verdict.text}")
    for line in _ranking_lines(comparison, metric):
        output.copyable(line)
    for name in ("report", "results", "plot"):
        if name in written:
            output.copyable(f"{name}: {written[name]}")


def _ranking_lines(comparison: Any, metric: str) -> list[str]:
    """The ranking by final value (ties marked `=`), then each run that did not succeed and why."""
    labels = {r.id: r.label for r in comparison.rows}
    lines = [_ranked_line(item, labels.get(item.id), metric) for item in comparison.ranking_final
             if item.value is not None]
    rows = {r.id: r for r in comparison.rows}
    return lines + [f"  not succeeded: {i} {rows[i].outcome or rows[i].state}: {rows[i].decisive or rows[i].state}"
                    for i in comparison.not_succeeded]


def _ranked_line(item: Any, label: str | None, metric: str) -> str:
    rank = f"={item.rank}" if item.tied else f"{item.rank}"
    shown = f"  {label}" if label else ""
    return f"  {rank}. {item.id}{shown}  final {metric} {item.value:.4f} (step {item.step})"


def _dir_facts(dirs: list[str]) -> list[Any]:
    """Each result dir's results.json; refused (exit 2) when one has none readable."""
    from ajet_runner.resultdir.stage_inputs import read_facts

    facts = []
    for d in dirs:
        found = read_facts(d)
        if found is None:
            raise output.fail(f"error: {d}: no readable results.json (not a finished run's result dir)")
        facts.append(found)
    return facts


def _stage_facts(url: str, token: str, stage: str, out: str | None) -> tuple[list[Any], str]:
    """The stage's facts through the API (read here where this machine sees the result dir), and where the
    report goes: `out`, else the stage's own dir."""
    from ajet_runner.workers.report.stage_plot import STAGE_PLOT_NAME, preload_matplotlib

    with connect(url, token) as client:
        # the stage's own dir only when no -o: the stage with its experiments is a second walk of its records
        out = out or client.stage(stage).dir or "."
        if not os.path.isfile(os.path.join(out, STAGE_PLOT_NAME)):
            # Imported while the server reads the facts (half the plot's cost). Not when a plot is there: it is
            # kept when it was drawn from the same comparison (the outbox's stage report), and an import
            # beside the comparison would only slow it.
            preload_matplotlib()
        served = client.stage_facts(stage)  # 404 for an unknown stage, as client.stage() says it
    return [_local_or_served(f) for f in served], out


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: ajet-runner wait --stage lr-sweep")
    def wait(
        exp_ids: list[str] = typer.Argument(None, metavar="[ID]...", help="experiment ids (instead of --stage)"),
        stage: str = typer.Option(None, "--stage", help="every experiment of this stage"),
        timeout: float = typer.Option(None, "--timeout", min=0.0, metavar="SECONDS", help="give up (exit 1) after"),
        interval: float = typer.Option(2.0, "--interval", min=0.1, metavar="SECONDS", help="between looks"),
        as_json: bool = typer.Option(False, "--json", help="no live lines: print the final records as JSON"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Block until every experiment of a stage (or every id) is finished, one live line each.
        Exit 0 when every one completed or early-stopped, 1 otherwise (also at once for a stage with no
        experiments), 2 at once for an unknown stage, 130 Ctrl-C (they go on)."""
        ids = list(exp_ids or [])
        if bool(stage) == bool(ids):
            raise output.fail("error: give --stage NAME or experiment ids (one of them)")
        with connect(url, token) as client:
            raise typer.Exit(_wait(client, stage, ids, timeout, interval, as_json))

    @app.command(epilog="Example: ajet-runner compare --stage lr-sweep -o reports/lr-sweep")
    def compare(
        result_dirs: list[str] = typer.Argument(None, metavar="[RESULT_DIR]...",
                                                help="result dirs to compare without a server (instead of --stage)"),
        stage: str = typer.Option(None, "--stage", help="the stage to compare (through the API)"),
        out: str = typer.Option(None, "-o", "--output", metavar="DIR",
                                show_default="the stage's dir, else the current dir",
                                help="where stage_report.md, stage_results.json and stage_plot.png go"),
        metric: str = typer.Option(HEADLINE_METRIC, "--metric", help="the ranking metric (final and best)"),
        name: str = typer.Option("", "--name", help="the stage's name in the report (for result dirs)"),
        as_json: bool = typer.Option(False, "--json", help="print stage_results.json instead of the summary"),
        url: str = URL_OPTION,
        token: str = TOKEN_OPTION,
    ) -> None:
        """Compare a stage's experiments: stage_report.md, stage_results.json and stage_plot.png."""
        dirs = list(result_dirs or [])
        if bool(stage) == bool(dirs):
            raise output.fail("error: give --stage NAME or result dirs (one of them)")
        if dirs:
            facts = _dir_facts(dirs)
            raise typer.Exit(_compare(facts, name or Path(os.path.commonpath(
                [os.path.abspath(d) for d in dirs])).name or "stage", metric, out or ".", as_json))
        facts, out = _stage_facts(url, token, stage, out)
        raise typer.Exit(_compare(facts, stage, metric, out, as_json))

    stage_app = typer.Typer(name="stage", help="Stages: named groups of experiments (list, show, add).",
                            no_args_is_help=True)

    @stage_app.command("list", epilog="Example: ajet-runner stage list")
    def stage_list(as_json: bool = typer.Option(False, "--json", help="print JSON"), url: str = URL_OPTION,
                   token: str = TOKEN_OPTION) -> None:
        """Every stage: experiments, counts by state and outcome, best mean_reward."""
        with connect(url, token) as client:
            stages = client.stages()
        if as_json:
            echo_json([s.to_dict() for s in stages])
            return
        print_table(("stage", "experiments", "states", "outcomes", BEST, "dir"), (
            (s.name, s.total, _counts(s.states), _counts(s.outcomes), _best(s.best), s.dir) for s in stages))

    @stage_app.command("show", epilog="Example: ajet-runner stage show lr-sweep")
    def stage_show(name: str = typer.Argument(..., metavar="NAME"),
                   as_json: bool = typer.Option(False, "--json", help="print JSON"), url: str = URL_OPTION,
                   token: str = TOKEN_OPTION) -> None:
        """One stage: its counts and its experiments."""
        with connect(url, token) as client:
            found = client.stage(name)
        if as_json:
            echo_json(found.to_dict())
            return
        output.print_fields([("stage", found.name), ("experiments", found.total), ("states", _counts(found.states)),
                             ("outcomes", _counts(found.outcomes) or "-"), (BEST, _best(found.best)),
                             ("dir", found.dir or "-"), ("report", found.report or "-")])
        output.console().print("")
        print_table(WAIT_COLUMNS, (_row(r) for r in found.experiments), shrink=("purpose",))

    @stage_app.command("add", epilog="Example: ajet-runner stage add baseline 3f9c2a1b7d40 /data/results/run2")
    def stage_add(name: str = typer.Argument(..., metavar="NAME"),
                  members: list[str] = typer.Argument(..., metavar="ID|RESULT_DIR...",
                                                      help="experiment ids, or result dirs they ran in"),
                  as_json: bool = typer.Option(False, "--json", help="print JSON"), url: str = URL_OPTION,
                  token: str = TOKEN_OPTION) -> None:
        """Make (or grow) a stage from experiments that already ran, by id or result dir."""
        dirs = [os.path.abspath(m) for m in members if os.path.isdir(m)]
        ids = [m for m in members if not os.path.isdir(m)]
        with connect(url, token) as client:
            found = client.stage_add(name, ids=ids, result_dirs=dirs)
        if as_json:
            echo_json(found.to_dict())
            return
        output.copyable(f"stage {found.name}: {found.total} experiment(s) ({_counts(found.states)})")

    app.add_typer(stage_app)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _best(best: dict[str, Any] | None) -> str:
    if not best:
        return "-"
    return f"{best['value']:.4f} ({best['id']}, step {best.get('step')})"

