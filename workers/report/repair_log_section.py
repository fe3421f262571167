"""The "Swarm server" section of `repair_log.md`: when the server was started, reused, lost,
restarted and stopped, so a reader sees that a repair restarted it before relaunching the client."""

from __future__ import annotations

from typing import Any

from ajet_runner.workers.report import NA, RepairRecord, ReportData, code_span, fmt_duration, fmt_time, md_cell

__all__ = ["swarm_server_section"]


def _entry(h: dict) -> str:
    when = fmt_time(h.get("at"))
    what = h.get("what", "")
    attempt = h.get("attempt")
    if what == "reused":
        return (f"- {when}: attempt {attempt}: a swarm server already listened on port {h.get('port')}; "
                "reused, not started again and not stopped at the end")
    if what in ("started", "restarted"):
        verb = "restarted" if what == "restarted" else "started"
        return (f"- {when}: attempt {attempt}: swarm server {verb} in tmux session {code_span(h.get('session', NA))},"
                f" listening on port {h.get('port')} after {fmt_duration(h.get('seconds'))};"
                f" log {code_span(h.get('log', NA))}"
                + ("; the client was relaunched only after that" if verb == "restarted" else ""))
    if what == "stopped" and h.get("was_running", True):
        return f"- {when}: swarm server in {code_span(h.get('session', NA))} stopped (gracefully, nothing left)"
    if what == "stopped":
        return f"- {when}: what was left of the dead swarm server in {code_span(h.get('session', NA))} cleared"
    return f"- {when}: {md_cell(str(h))}"


def _failure_event(rep: RepairRecord) -> dict[str, Any]:
    """A swarm failure as an entry of the server's history, in time order with the rest."""
    return {"at": rep.at, "what": "failure", "text": (
        f"attempt {rep.attempt} failed: {code_span(rep.signature)} — {md_cell(rep.explanation, 600)}"
        f" ({md_cell(rep.result or NA)})")}


def _events(data: ReportData) -> list[dict[str, Any]]:
    """The server's history and the swarm failures, in time order."""
    events = [dict(h) for h in (data.swarm or {}).get("history") or [] if isinstance(h, dict)]
    events += [_failure_event(rep) for rep in data.repairs if rep.signature.startswith("swarm_")]
    return sorted(events, key=lambda h: float(h.get("at") or 0.0))


def swarm_server_section(data: ReportData) -> list[str]:
    """Lines of the section; empty for a classic experiment."""
    swarm = data.swarm or {}
    if not swarm.get("spec"):
        return []
    spec = swarm["spec"]
    lines = ["## Swarm server", "",
             f"Command {code_span(spec.get('server_command', NA))}, port {spec.get('port')}.", ""]
    events = _events(data)
    for h in events:
        lines.append(f"- {fmt_time(h.get('at'))}: {h['text']}" if h.get("what") == "failure" else _entry(h))
    if not events:
        lines.append("No server was started or reused (the experiment ended before its launch).")
    return [*lines, ""]
