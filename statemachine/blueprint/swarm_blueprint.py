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

from ajet_runner.statemachine.blueprint.yamlload import load_yaml_text
from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.statemachine.models import Blueprint, Finding, Level, Problem

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
        data = load_yaml_text(yaml_text)  # bounded nesting: never a RecursionError
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


def _as_it_stands(cause: Finding) -> bool:
    """A specific, unrepairable cause: restarting the server would meet it again."""
    try:
        entry = signature(cause.signature)
    except KeyError:
        return False
    return not entry.generic and not entry.repairable


def server_failure_finding(server_cause: Finding | None, last_line: str = "", what: str = "died") -> Finding:
    """The diagnosis of a swarm server that died (or never came up), from the server's own log.

    A swarm signature in that log (`swarm_mode_disabled`, `swarm_engine_state`, ...) is the
    diagnosis as it stands, with its own plan; so is any specific cause that is not repairable (a missing
    config, a missing module: a restart would read the same file and fail the same way, so the server is
    never restarted unchanged). Anything else (a generic or repairable signature, or none) is
    `swarm_server_died`, whose plan restarts the server, awaits it and relaunches the client, and
    whose explanation quotes what the server's log said last.
    """
    if server_cause is not None and (server_cause.signature.startswith("swarm_") or _as_it_stands(server_cause)):
        return server_cause
    quote = server_cause.text if server_cause is not None else last_line.strip()
    seen = f" (its log shows {server_cause.signature})" if server_cause is not None else ""
    note = f"The server {what}{seen}" + (f"; its log said: {quote}" if quote else "; its log said nothing") + "."
    return signature(SERVER_DIED).finding(server_cause.line if server_cause else 0, quote, note=note)


# -------------------------------------------------------------- swarm as the skills write it
#
# The skills put both processes in `[exp_launch_command]`: the server in its own tmux session
# (`tmux new-session -d -s S "… ajet-swarm start …"`) or in the background (`ajet-swarm start … &`),
# a `sleep N`, then the client; `cd`/`source`/`export` lines before the server set up both. The
# runner supervises the server itself (started or reused, awaited, watched, restarted), so the
# server line becomes `[exp_swarm_server]`, the sleep is dropped (the readiness wait replaces it)
# and the rest is the client. Anything else is refused with what to write instead.

_PYTHON = re.compile(r"python[\d.]*")
_SLEEP = re.compile(r"\d+(?:\.\d+)?s?")
_TMUX_VALUE_OPTS = frozenset({"-s", "-n", "-c", "-x", "-y", "-F", "-e", "-t", "-f"})
_PREAMBLE = frozenset({"cd", "source", ".", "export", "pushd"})
_SERVER_HINTS = ("ajet-swarm", "ajet.swarm_cli", "--swarm-server")
_EXAMPLE = ("## [exp_swarm_server]\n```bash\najet-swarm start --swarm-port=10086\n```\n"
            "and only the client in [exp_launch_command] (or write the two as `- server: …` and `- client: …` "
            "bullets under [exp_launch_command])")


class SwarmSplit(BaseModel):
    """A launch command split into the swarm server and the client."""

    server: str
    client: str
    delay_seconds: float | None = None
    form: str = "bullets"  # bullets | tmux | background


def starts_server(words: list[str]) -> bool:
    """Whether a command's words start a swarm server: `ajet-swarm start`, `python -m ajet.swarm_cli start`,
    `python -m ajet.launcher … --swarm-server`."""
    for k, word in enumerate(words):
        base = os.path.basename(word)
        if base == "ajet-swarm" and words[k + 1: k + 2] == ["start"]:
            return True
        if _PYTHON.fullmatch(base) and words[k + 1: k + 2] == ["-m"] and _module_starts_server(words[k + 2:]):
            return True
    return False


def _module_starts_server(words: list[str]) -> bool:
    """Whether `python -m` followed by `words` starts a swarm server (the launcher: `--swarm-server` before
    the command's end)."""
    module = words[:1]
    if module == ["ajet.swarm_cli"]:
        return words[1:2] == ["start"]
    if module != ["ajet.launcher"]:
        return False
    rest = words[1:]
    stop = next((j for j, w in enumerate(rest) if w in ("&&", "||", ";", "|", "&")), len(rest))
    return any(w == "--swarm-server" or w.startswith("--swarm-server=") for w in rest[:stop])


def _words(text: str) -> list[str] | None:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return None


def _logical_lines(command: str) -> list[tuple[str, list[str]]]:
    """(the line joined across `\\` continuations, its original lines)."""
    out: list[tuple[str, list[str]]] = []
    pending: list[str] = []
    for line in command.split("\n"):
        pending.append(line)
        if line.rstrip().endswith("\\"):
            continue
        joined = " ".join(p.rstrip().removesuffix("\\").strip() for p in pending)
        out.append((joined.strip(), pending))
        pending = []
    if pending:
        out.append((" ".join(p.rstrip().removesuffix("\\").strip() for p in pending).strip(), pending))
    return out


def _tmux_server(words: list[str]) -> str | None:
    """The shell command of `tmux new-session [-d] [-s NAME] [-c DIR] "<command>"` when it starts a server."""
    if len(words) < 3 or os.path.basename(words[0]) != "tmux" or words[1] not in ("new-session", "new"):
        return None
    cwd, positional = _tmux_arguments(words[2:])
    command = positional[0] if len(positional) == 1 else shlex.join(positional)
    inner = _words(command)
    if not positional or inner is None or not starts_server(inner):
        return None
    return f"cd {shlex.quote(cwd)} && {command}" if cwd else command


def _tmux_arguments(args: list[str]) -> tuple[str, list[str]]:
    """(the `-c` dir, the command words) of `tmux new-session`'s arguments: options taking a value skip it,
    flags before the command are dropped."""
    k, cwd = 0, ""
    positional: list[str] = []
    while k < len(args):
        w = args[k]
        if w in _TMUX_VALUE_OPTS and k + 1 < len(args):
            cwd = args[k + 1] if w == "-c" else cwd
            k += 2
            continue
        if positional or not w.startswith("-"):  # a flag counts only before the command
            positional.append(w)
        k += 1
    return cwd, positional


def _preamble(words: list[str]) -> bool:
    """`cd`, `source`, `.`, `export` or plain assignments: the set-up both processes share."""
    if not words:
        return False
    if words[0] in _PREAMBLE:
        return True
    return all("=" in w and w.split("=", 1)[0].isidentifier() for w in words)


def _cannot_split(line: str, why: str) -> str:
    return (f"the swarm server and the client cannot be told apart with certainty ({why}): "
            f"{line.strip()!r}. Write the server in its own part, e.g.\n{_EXAMPLE}")


class _CannotSplit(Exception):
    """A line that starts (or follows) a server in a way that cannot be split with certainty, and why."""

    def __init__(self, line: str, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


def split_swarm_command(command: str) -> tuple[SwarmSplit | None, str]:
    """(the split, "") when the command starts a swarm server and then a client; (None, a refusal naming the
    line and what to write) when it starts a server in a way that cannot be split with certainty; (None, "")
    when no line starts a swarm server."""
    if not any(h in command for h in _SERVER_HINTS):
        return None, ""
    try:
        return _split(_logical_lines(command)), ""
    except _CannotSplit as exc:
        return None, _cannot_split(exc.line, exc.why)


def _split(lines: list[tuple[str, list[str]]]) -> SwarmSplit | None:
    """The split of these logical lines (None: no line starts a server); raises _CannotSplit (one refusal per
    way a server start cannot be split)."""
    preamble: list[str] = []
    server = form = ""
    delay: float | None = None
    client: list[str] = []
    for joined, original in lines:
        blank = not joined or joined.startswith("#")
        if client:
            _extend_client(client, joined, original, blank)
        elif blank:
            continue
        elif not server:
            found = _server_of(joined)
            if found is None:
                preamble.extend(original)
            else:
                server, form = found
        elif delay is None and (seconds := _sleep_seconds(_read_words(joined))) is not None:
            delay = seconds
        else:
            _read_words(joined)
            client.extend(original)
    if not server:
        return None
    return _joined_split(preamble, server, client, delay, form)


def _extend_client(client: list[str], joined: str, original: list[str], blank: bool) -> None:
    """A line after the client started belongs to it; a second server start cannot be split."""
    if not blank and _second_server(joined):
        raise _CannotSplit(joined, "a second swarm server line")
    client.extend(original)


def _joined_split(preamble: list[str], server: str, client: list[str], delay: float | None, form: str) -> SwarmSplit:
    """The server and the client commands, each after the set-up lines both share; a server with no client
    after it cannot be split."""
    if not any(ln.strip() for ln in client):
        raise _CannotSplit(server, "no client command follows the server")
    shared = "\n".join(ln.strip() for ln in preamble)
    server_cmd = f"{shared}\n{server}" if shared else server
    client_cmd = "\n".join([*(ln.strip() for ln in preamble), *_dedented(client)])
    return SwarmSplit(server=server_cmd, client=client_cmd.strip("\n"), delay_seconds=delay, form=form)


def _second_server(joined: str) -> bool:
    """Whether a line after the client's start starts a server too."""
    words = _words(joined)
    return words is not None and (starts_server(words) or _tmux_server(words) is not None)


def _server_of(joined: str) -> tuple[str, str] | None:
    """(the server command, its form) when this line (before any server) starts it; None for a set-up line;
    raises _CannotSplit for anything else."""
    words = _read_words(joined)
    tmux = _tmux_server(words)
    if tmux is not None:
        server, form = tmux, "tmux"
    elif _in_background(joined):
        server, form = joined[:-1].rstrip(), "background"
    elif starts_server(words):
        raise _CannotSplit(joined, "the server runs in the foreground, so the client after it would never start")
    elif _preamble(words):
        return None
    elif any(h in joined for h in _SERVER_HINTS):
        raise _CannotSplit(joined, "the server is started in a form the runner does not read")
    else:
        raise _CannotSplit(joined, "this line comes before any line that starts a swarm server")
    if any(w.startswith((">", "&>", "1>", "2>")) for w in _words(server) or []):
        raise _CannotSplit(joined, "the server's output is redirected, which hides the line the runner waits for "
                                   "(`Starting swarm server on port N`)")
    return server, form


def _in_background(joined: str) -> bool:
    """Whether the line starts a swarm server in the background (`… &`)."""
    return joined.endswith("&") and not joined.endswith("&&") and starts_server(_words(joined[:-1]) or [])


def _read_words(joined: str) -> list[str]:
    """A line's words (raises _CannotSplit when its quotes do not close)."""
    words = _words(joined)
    if words is None:
        raise _CannotSplit(joined, "its quotes do not close")
    return words


def _sleep_seconds(words: list[str]) -> float | None:
    """The seconds of a `sleep N` line (None for any other line)."""
    if len(words) == 2 and words[0] == "sleep" and _SLEEP.fullmatch(words[1]):
        return float(words[1].rstrip("s"))
    return None


def _dedented(lines: list[str]) -> list[str]:
    margin = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
    return [ln[margin:] if ln[:margin].strip() == "" else ln.strip() for ln in lines]


def no_server_refusal(command: str) -> str:
    """The refusal for a swarm blueprint (`[exp_yaml_path]` NA) whose command starts no server: it quotes the
    first line that is neither set-up nor a wait."""
    for joined, _ in _logical_lines(command):
        words = _words(joined) if joined and not joined.startswith("#") else None
        if not joined or joined.startswith("#") or (words is not None and _preamble(words)):
            continue
        return _cannot_split(joined, "[exp_yaml_path] is NA, so this is a swarm experiment, but no line starts a swarm "
                                     "server with `ajet-swarm start`, `python -m ajet.swarm_cli start` or "
                                     "`python -m ajet.launcher --swarm-server`")
    return _cannot_split(command or "(empty)", "[exp_yaml_path] is NA, so this is a swarm experiment, but the command "
                                              "starts no swarm server")
