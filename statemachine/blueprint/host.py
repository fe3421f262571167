"""The blueprint's host: from its `[exp_host]` part, a login line in its notes, or a launch command that
logs in itself (`ssh HOST '…launcher…'`, unwrapped to the command run there). One host, or an error naming
them all: an experiment that names a host never runs anywhere else (docs/executors.md#ssh)."""

from __future__ import annotations

import shlex

from ajet_runner.statemachine.models import Blueprint, Level, Problem
from ajet_runner.statemachine.shell.ssh_login import (
    LoginError,
    SshTarget,
    find_login_lines,
    login_in_command,
    parse_target,
)

FIELD = "exp_host"


def _part_target(text: str) -> SshTarget | LoginError | None:
    """The `[exp_host]` part's value: its first line that is not blank."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not first:
        return None
    try:
        return parse_target(first.strip("`").removeprefix("$ ").strip())
    except LoginError as exc:
        return exc


def _command_target(bp: Blueprint) -> tuple[SshTarget, str] | LoginError | None:
    command = bp.exp_launch_command.strip()
    if not command.startswith("ssh ") or "\n" in command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    try:
        return login_in_command(words)
    except LoginError as exc:
        return exc


def resolve_host(bp: Blueprint, part_text: str, text: str) -> list[Problem]:
    """Set `bp.exp_host` (and its source) from the `[exp_host]` part and the login lines of `text` (the
    blueprint without its command parts); the problems found. May unwrap `bp.exp_launch_command`."""
    problems: list[Problem] = []
    found: list[tuple[SshTarget, str]] = []
    part = _part_target(part_text)
    if isinstance(part, LoginError):
        problems.append(Problem(level=Level.error, field=FIELD, message=str(part)))
    elif part is not None:
        found.append((part, "[exp_host]"))
    for _line, shown, target in find_login_lines(text):
        if isinstance(target, LoginError):
            if isinstance(part, LoginError) and str(part) == str(target):
                continue  # the [exp_host] part's own line, already said
            problems.append(Problem(level=Level.error, field=FIELD, message=f"{target} (the login `{shown}`)"))
        else:
            found.append((target, f"the login line `{shown}`"))
    _unwrap_command_login(bp, problems, found)
    problems.extend(_settle_host(bp, found))
    return problems


def _settle_host(bp: Blueprint, found: list[tuple[SshTarget, str]]) -> list[Problem]:
    """The one host found becomes `bp.exp_host` (with where it was written); more than one is an error."""
    hosts = {str(t) for t, _ in found}
    if len(hosts) > 1:
        first = {str(t): where for t, where in reversed(found)}
        named = "; ".join(f"{t} ({where})" for t, where in first.items())
        return [Problem(level=Level.error, field=FIELD, message=(
            f"the blueprint names more than one host: {named}. An experiment runs on one host: keep one login"))]
    if found:
        bp.exp_host = str(found[0][0])
        bp.exp_host_source = found[0][1]
    return []


def _unwrap_command_login(bp: Blueprint, problems: list[Problem], found: list[tuple[SshTarget, str]]) -> None:
    """A launch command that logs in (`ssh host 'cmd'`): its host joins `found` and the command becomes
    what runs there (with a warning); a login it cannot read is an error."""
    in_command = _command_target(bp)
    if isinstance(in_command, LoginError):
        problems.append(Problem(level=Level.error, field="exp_launch_command", message=str(in_command)))
    elif in_command is not None:
        target, inner = in_command
        found.append((target, "the launch command's ssh login"))
        bp.exp_launch_command = inner
        problems.append(Problem(level=Level.warning, field="exp_launch_command", message=(
            f"the launch command logged in with `{target.login_line()}`: it runs on that host as `{inner}`; "
            f"write the login on its own line (login: {target.login_line()}) and the command as it runs there")))
