"""Live view of one experiment until it finishes: a progress bar of elapsed / max time, the
state, the attempt and the latest reward, with transitions and evaluations printed as they come.

Used by `run` (reading Redis directly) and `watch` (through the HTTP API): both give a
`poll(after) -> (record, events, next_after)` function.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from ajet_runner.statemachine.durations import format_progress
from ajet_runner.statemachine.lifecycle import FINISHED, EventType
from ajet_runner.statemachine.metric_vocabulary import PROGRESS_METRICS, progress_value
from ajet_runner.store.events import AdoptedEvent, EvaluationEvent, EventBase, TransitionEvent, parse_event

NO_VALUE = f"{PROGRESS_METRICS[0]} n/a"
Poll = Callable[[str], tuple[dict[str, Any] | None, list[dict[str, Any]], str]]


def headline(metrics: dict[str, Any]) -> str:
    """The progress bar's metric: mean_reward, else a swarm client's task_pass_rate@1 (its pass@1)."""
    found = progress_value(metrics)
    return f"{found[0]} {found[1]:.4f}" if found else NO_VALUE


# The events `describe` writes a line of its own for (the others: `event_line` shows their message or fields).
DESCRIBED = (EventType.transition, EventType.evaluation, EventType.adopted, EventType.adoption, EventType.cleanup,
             EventType.warning, EventType.host)


def describe(event: Mapping[str, Any] | EventBase) -> str | None:
    typed = event if isinstance(event, EventBase) else parse_event(event)
    if isinstance(typed, TransitionEvent):
        return f"{typed.from_} → {typed.to} ({typed.trigger}) {typed.reason}".strip()
    if isinstance(typed, EvaluationEvent):
        m = typed.metrics
        bits = [f"{k}={m[k]:.4g}" for k in PROGRESS_METRICS if isinstance(m.get(k), int | float)]
        return f"evaluation at step {typed.step}: {' '.join(bits)}"
    if isinstance(typed, AdoptedEvent):
        return f"{typed.type}: {typed.message or typed.owner}"
    if typed.type in DESCRIBED:
        return f"{typed.type}: {typed.message}"
    return None


def elapsed_of(rec: dict[str, Any]) -> float:
    start = float(rec.get("started_at") or 0)
    if not start:
        return 0.0
    end = float(rec.get("finished_at") or 0) or time.time()
    return max(0.0, end - start)


def fraction(rec: dict[str, Any]) -> float:
    """How full the bar is: elapsed / max time, and full once the experiment is finished (whatever the clock)."""
    if rec.get("state") == FINISHED:
        return 1.0
    max_s = float(rec.get("max_seconds") or 0)
    return min(1.0, elapsed_of(rec) / max_s) if max_s else 0.0


def _show(progress: Progress, task: TaskID, rec: dict[str, Any], events: list[dict[str, Any]], quiet: bool) -> None:
    """The new events' lines above the bar (none when `quiet`), and the bar with the record's state, clock,
    attempt and reward."""
    for event in [] if quiet else events:
        line = describe(event)
        if line:
            progress.console.print(f"  {line}", markup=False, highlight=False)
    max_s = float(rec.get("max_seconds") or 0)
    progress.update(
        task, completed=fraction(rec), state=rec.get("state", "?"),
        clock=format_progress(elapsed_of(rec), max_s),
        attempt=rec.get("attempt") or "-", reward=headline(rec.get("latest_metrics") or {}),
    )


def follow(poll: Poll, console: Console | None = None, on_interrupt: Callable[[], object] | None = None,
           interval: float = 0.5, quiet: bool = False) -> dict[str, Any]:
    """Show progress until the experiment is finished (the bar then full); returns its final record.

    `quiet` shows nothing (the caller prints the final record); into a pipe only the event lines are printed.
    Ctrl-C calls `on_interrupt` once (e.g. request a cancel) and keeps following until the
    experiment is collected and finished, so the result dir is complete when we return; a second
    Ctrl-C, or the first without `on_interrupt` (`watch` detaching), raises KeyboardInterrupt.
    """
    console = console or Console(soft_wrap=True)
    after = "0-0"
    rec: dict[str, Any] = {}
    interrupted = False
    columns = (TextColumn("[bold]{task.fields[state]}[/]"), BarColumn(), TextColumn("{task.fields[clock]}"),
               TextColumn("attempt {task.fields[attempt]}"), TextColumn("{task.fields[reward]}"))
    # Into a pipe or a file: the event lines only, no bar (a drawn bar is no line for grep or a log collector).
    with Progress(*columns, console=console, transient=False, disable=quiet or not console.is_terminal) as progress:
        task = progress.add_task("run", total=1.0, state="queued", clock="", attempt="-", reward=NO_VALUE)
        while True:
            try:
                got, events, after = poll(after)
                if got is not None:
                    rec = got
                _show(progress, task, rec, events, quiet)
                if rec.get("state") == FINISHED:
                    return rec
                time.sleep(interval if not events else 0)
            except KeyboardInterrupt:
                if interrupted or on_interrupt is None:
                    raise
                interrupted = True
                progress.console.print("[yellow]Ctrl-C: stopping the experiment (Ctrl-C again to leave it running)")
                on_interrupt()
