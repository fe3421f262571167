"""Swarm mode inside one experiment run: the small hooks the driver calls.

Kept apart from the driver (which is being split into per-state handlers) so the driver only
calls `swarm_plan` and `port_problems` when queued, `start_or_reuse` before launching the
client, `stop_ours` when a repair restarts the server or the experiment ends, and
`swarm_results_path` for the client's named `## Step N` file. Watching the server while the
client runs is `workers/swarm/server_watch.py`; finding unnamed results files is `workers/swarm/found_results.py`.
`state` (the experiment context's `swarm` field) keeps the spec, whether the server is reused,
our server's tmux handle, and a `history` of starts, reuses and stops for `repair_log.md`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.blueprint.swarm_blueprint import (
    SwarmSpec,
    swarm_problems,
    swarm_spec,
    val_result_abspath,
    yaml_placeholder,
)
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.statemachine.models import Blueprint, Level, Problem
from ajet_runner.workers.executors.attempt import MARKER
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Runner
from ajet_runner.workers.swarm.server import (
    SwarmServer,
    SwarmServerFailed,
    answers_http,
    client_env,
    ensure_server,
    port_listening,
)

__all__ = ["is_swarm", "port_problems", "swarm_plan", "start_or_reuse", "stop_ours", "swarm_results_path",
           "SwarmServerFailed"]


def is_swarm(bp: Blueprint) -> bool:
    """A swarm experiment known from the blueprint (the `[exp_swarm_server]` part)."""
    return bool(bp.exp_swarm_declared or bp.exp_swarm_server.strip())


def _yaml_text(bp: Blueprint) -> str | None:
    """The blueprint's YAML, when it may be what makes it a swarm experiment (`ajet.enable_swarm_mode`)."""
    if is_swarm(bp) or not bp.exp_yaml_path or yaml_placeholder(bp.exp_yaml_path):
        return None
    try:
        return Path(bp.yaml_abspath()).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def swarm_plan(bp: Blueprint) -> tuple[SwarmSpec | None, list[Problem]]:
    """The swarm spec and its problems; None for a classic experiment. A blueprint is swarm by its
    `[exp_swarm_server]` part (no YAML preflight then) or by `ajet.enable_swarm_mode: true` in its
    YAML (the server command then defaults to `ajet-swarm start --swarm-port=<port> --conf <yaml>`)."""
    spec = swarm_spec(bp, _yaml_text(bp))
    return spec, swarm_problems(bp, spec)


def port_problems(spec: SwarmSpec) -> list[Problem]:
    """A port held by a listener that does not answer HTTP is not a swarm server: refuse to launch."""
    if spec.port is None or not port_listening(spec.port) or answers_http(spec.port):
        return []
    fld = "exp_launch_command" if spec.port_source == "launch_command" else "exp_swarm_server"
    return [Problem(level=Level.error, field=fld, message=(
        f"the swarm port {spec.port} is in use by something that does not answer HTTP (not a swarm "
        f"server): free the port or choose another (--swarm-port=N)"))]


def swarm_results_path(bp: Blueprint) -> str:
    """The client's results file named by `[exp_val_result_path]`, or "" (then the files are
    discovered: see ajet_runner.workers.swarm.found_results)."""
    return val_result_abspath(bp)


def start_or_reuse(
    runner: Runner, state: dict[str, Any], bp: Blueprint, *, exp_id: str, env: Mapping[str, str],
    attempt: int, boot_timeout: float, publish: Callable[[dict[str, Any]], None],
    base_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Make sure a swarm server listens; returns the client's environment.

    `state` (kept in the experiment's context) records whether the server is reused or ours
    and our server's tmux handle. Raises SwarmServerFailed when it cannot be brought up.
    """
    spec = SwarmSpec.model_validate(state["spec"])
    handle = RunHandle.from_dict(state["handle"]) if state.get("handle") else None
    if handle is not None and runner.is_running(handle):
        return client_env(spec, bp.exp_launch_command, env)
    # Without the attempt's cleanup marker: the scoped cleanup after each client attempt must not
    # kill the server; it is stopped only by `stop_ours` (gracefully).
    server_env = {k: v for k, v in env.items() if k != MARKER}
    began = time.monotonic()
    server = ensure_server(runner, spec, purpose=bp.exp_purpose, exp_id=exp_id, cwd=bp.exp_codebase_dir,
                           env=server_env, log_dir=Path(bp.exp_result_dir) / "logs", n=attempt,
                           boot_timeout=boot_timeout, base_env=base_env)
    history = state.setdefault("history", [])
    waited = round(time.monotonic() - began, 1)
    if server.reused:
        state["reused"] = True
        history.append({"attempt": attempt, "what": "reused", "at": time.time(), "port": spec.port})
        publish({"type": EventType.swarm_server, "message": f"reusing the swarm server already listening on port "
                 f"{spec.port}; it is not started again and not stopped at the end"})
    else:
        assert server.handle is not None
        state["handle"] = server.handle.to_dict()
        state["reused"] = False
        state.setdefault("started", 0)
        state["started"] += 1
        again = any(h.get("what") in ("started", "restarted", "reused") for h in history)
        history.append({"attempt": attempt, "what": "restarted" if again else "started",
                        "at": time.time(), "port": spec.port, "session": server.handle.session,
                        "log": str(server.handle.log_path), "seconds": waited})
        publish({"type": EventType.swarm_server, "message": f"swarm server listening on port {spec.port} in tmux "
                 f"session {server.handle.session} (log {server.handle.log_path})"})
    return client_env(spec, bp.exp_launch_command, env)


def stop_ours(runner: Runner, state: dict[str, Any], grace: float,
              publish: Callable[[dict[str, Any]], None]) -> None:
    """Stop the server this experiment started (gracefully, nothing left); a reused one stays."""
    if not state or state.get("reused") or not state.get("handle"):
        return
    handle = RunHandle.from_dict(state["handle"])
    spec = SwarmSpec.model_validate(state["spec"])
    was_running = runner.is_running(handle)
    try:
        SwarmServer(spec=spec, reused=False, handle=handle).stop(runner, grace)
    except RuntimeError as exc:
        publish({"type": EventType.warning, "message": f"stopping the swarm server left processes behind: {exc}"})
    else:
        publish({"type": EventType.swarm_server, "message": f"swarm server on port {spec.port} stopped"})
    state.setdefault("history", []).append({"what": "stopped", "at": time.time(), "port": spec.port,
                                            "session": handle.session, "was_running": was_running})
    state["handle"] = None

