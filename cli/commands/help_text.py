"""`--help` that a person reads: metavars named after the option, no Python types, no sentinel defaults.

typer labels every parameter with its Python type (`<str>`, `<bool>`, `<list[str]>`); this pass over the
built click command gives each option an argparse-style metavar (`--log-level LOG_LEVEL`), flags none at all,
and arguments no type label (their name is already in the usage line). Defaults that are sentinels (`-1`, `0`,
`""` meaning "ask the machine") are stated in words by each option's own `show_default` text.
"""

from __future__ import annotations

import copy
from typing import Any

import typer
from typer.core import TyperArgument, TyperOption


def _metavar(param: TyperOption) -> str:
    """The last word of the long option: `--log-level LEVEL`, `--metrics-port PORT`, `--stop-job-id ID`."""
    longest = max(param.opts, key=len)
    return longest.lstrip("-").rsplit("-", 1)[-1].upper()


def _untyped(kind: Any) -> Any:
    """A copy of an argument's click type whose metavar is empty: typer's rich help shows an argument's type
    metavar, else `<type name>`, and has no hook to leave it out (the shared STRING instance stays as it is)."""
    copied = copy.copy(kind)
    copied.get_metavar = lambda param, ctx: ""
    return copied


def _tidy_param(param: Any) -> None:
    """An option's metavar (none for a flag or a count), an argument's without brackets or dots (the usage
    line adds its own) and with its type's name dropped."""
    if isinstance(param, TyperOption):
        if param.is_flag or param.count:
            param.metavar = ""
        elif param.metavar is None:
            param.metavar = _metavar(param)
    elif isinstance(param, TyperArgument):
        param.type = _untyped(param.type)
        if param.metavar:
            param.metavar = param.metavar.strip("[]{}.") or param.metavar


def tidy(command: Any, ctx: typer.Context | None = None) -> Any:
    """Set readable metavars on `command` (typer's built click command), its help option and every
    sub-command, recursively."""
    ctx = ctx or typer.Context(command, info_name=command.name)
    params: list[Any] = list(command.params)
    help_option = command.get_help_option(ctx)
    if help_option is not None:
        params.append(help_option)
    for param in params:
        _tidy_param(param)
    for name, sub in getattr(command, "commands", {}).items():
        tidy(sub, typer.Context(sub, info_name=name, parent=ctx))
    return command
