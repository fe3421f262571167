"""Swarm mode: is a blueprint a swarm experiment, which server command and which port.

AgentJet's swarm mode splits training in two processes: a swarm server
(`ajet-swarm start --swarm-port=10086`) that blocks once it listens, and a client (the
blueprint's launch command) that reaches it through `AJET_SWARM_URL`. A blueprint is a
swarm experiment when it has an `[exp_swarm_server]` part or its YAML sets
`ajet.enable_swarm_mode: true`. Pure: the YAML comes in as text.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

import yaml
from pydantic import BaseModel

from ajet_runner.statemachine.models import Blueprint, Finding, Level, Problem
from ajet_runner.statemachine.signatures import signature

__all__ = ["DEFAULT_PORT", "SERVER_DIED", "SwarmSpec", "server_failure_finding", "swarm_spec", "swarm_problems",
           "yaml_placeholder", "val_result_abspath"]

DEFAULT_PORT = 10086
SERVER_DIED = "swarm_server_died"
_YAML_PLACEHOLDERS = {"", "na", "n/a", "无", "none", "null", "-"}
_PORT_FLAG = re.compile(r"(?:^|\s)--(?:swarm-port|swarm_port|port)(?:=|\s+)(\S+)")
_SWARM_URL = re.compile(r"AJET_SWARM_URL=['\"]?(\S+?)['\"]?(?:\s|$)")
_URL_PORT = re.compile(r"^[a-z]+://[^/:]+:(\S+?)(?:/.*)?$", re.IGNORECASE)


class SwarmSpec(BaseModel):
    """The swarm part of an experiment; `port_text` keeps what was written when it is no number."""

    server_command: str
    port: int | None
    port_text: str = ""
    port_source: str = "default"  # server_command | launch_command | default
    defaulted_command: bool = False

    def public(self) -> dict[str, Any]:
        """The `"swarm"` object of `check --json`."""
        return {"server_command": self.server_command, "port": self.port}

    def url(self) -> str:
        return f"http://localhost:{self.port}"


def yaml_placeholder(value: str) -> bool:
    """An absent YAML, as swarm blueprints may write it ("NA", "N/A", "无")."""
    return value.strip().strip("`*_ ").lower() in _YAML_PLACEHOLDERS


def _yaml_enables_swarm(yaml_text: str | None) -> bool:
    if not yaml_text:
        return False

    try:
        data = yaml.safe_load(yaml_text)
    except yaml.YAMLError:
        return False
    ajet = data.get("ajet") if isinstance(data, dict) else None
    return isinstance(ajet, dict) and ajet.get("enable_swarm_mode") is True


def _port_of(server_command: str, launch_command: str) -> tuple[str, str]:
    """(the port as written, where it came from)."""
    if (m := _PORT_FLAG.search(server_command)) is not None:
        return m.group(1).strip("'\""), "server_command"
    if (m := _SWARM_URL.search(launch_command)) is not None:
        url = m.group(1)
        pm = _URL_PORT.match(url)
        return (pm.group(1) if pm else "80"), "launch_command"
    return str(DEFAULT_PORT), "default"


def swarm_spec(bp: Blueprint, yaml_text: str | None = None) -> SwarmSpec | None:
    """The swarm part of `bp`, or None for a classic experiment.

    With only `ajet.enable_swarm_mode: true` in the YAML, the server command defaults to
    `ajet-swarm start --swarm-port=<port> --conf <yaml>`.
    """
    server = bp.exp_swarm_server.strip()
    if not server and not _yaml_enables_swarm(yaml_text):
        return None
    written, source = _port_of(server, bp.exp_launch_command)
    port = int(written) if written.isdigit() and 0 < int(written) < 65536 else None
    defaulted = False
    if not server:
        conf = shlex.quote(bp.yaml_abspath()) if bp.exp_yaml_path else ""
        server = f"ajet-swarm start --swarm-port={port or DEFAULT_PORT}" + (f" --conf {conf}" if conf else "")
        defaulted = True
    return SwarmSpec(server_command=server, port=port, port_text=written, port_source=source,
                     defaulted_command=defaulted)


def declares_swarm(bp: Blueprint) -> bool:
    """Swarm mode known from the blueprint alone (the `[exp_swarm_server]` part is present)."""
    return bool(bp.exp_swarm_server.strip())


def swarm_problems(bp: Blueprint, spec: SwarmSpec | None) -> list[Problem]:
    """Errors that keep a swarm blueprint from running: no server command, a port that is no number."""
    if spec is None:
        return []
    problems: list[Problem] = []
    if not spec.server_command.strip():
        problems.append(Problem(level=Level.error, field="exp_swarm_server",
                                message="the swarm server command is empty"))
    if spec.port is None:
        fld = "exp_swarm_server" if spec.port_source == "server_command" else "exp_launch_command"
        problems.append(Problem(level=Level.error, field=fld,
                                message=f"the swarm port {spec.port_text!r} is not a port number (1-65535)"))
    vr = bp.exp_val_result_path.strip()
    if vr and not os.path.isabs(vr) and not os.path.isabs(bp.exp_codebase_dir):
        problems.append(Problem(level=Level.error, field="exp_val_result_path",
                                message=f"{vr!r} is relative and the codebase is not an absolute path"))
    return problems


def val_result_abspath(bp: Blueprint) -> str:
    """The client's results file as an absolute path ("" when the blueprint names none)."""
    vr = bp.exp_val_result_path.strip()
    if not vr:
        return ""
    return os.path.normpath(vr if os.path.isabs(vr) else os.path.join(bp.exp_codebase_dir, vr))


def server_failure_finding(server_cause: Finding | None, last_line: str = "", what: str = "died") -> Finding:
    """The diagnosis of a swarm server that died (or never came up), from the server's own log.

    A swarm signature in that log (`swarm_mode_disabled`, `swarm_engine_state`, ...) is the
    diagnosis as it stands, with its own plan; anything else (another signature, or none) is
    `swarm_server_died`, whose plan restarts the server, awaits it and relaunches the client, and
    whose explanation quotes what the server's log said last.
    """
    if server_cause is not None and server_cause.signature.startswith("swarm_"):
        return server_cause
    quote = server_cause.text if server_cause is not None else last_line.strip()
    seen = f" (its log shows {server_cause.signature})" if server_cause is not None else ""
    note = f"The server {what}{seen}" + (f"; its log said: {quote}" if quote else "; its log said nothing") + "."
    return signature(SERVER_DIED).finding(server_cause.line if server_cause else 0, quote, note=note)
