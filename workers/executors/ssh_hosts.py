"""The ssh hosts a worker serves (`worker --executor ssh --host H`, AJET_RUNNER_HOSTS), in the canonical form a
blueprint's `exp_host` takes (statemachine/shell/ssh_login.py), so `root@gpu1 -p 22` and `root@gpu1:22` are one host;
and whether ssh can reach a host by its name at all, asked of the ssh config before a run is queued."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from typing import Any

from ajet_runner.statemachine.shell.ssh_login import LoginError, SshTarget, parse_target


def canonical_host(text: str) -> str:
    """`user@host:port` or an alias, as a blueprint's host is stored; the text itself when it is not a host."""
    try:
        return str(parse_target(text))
    except LoginError:
        return text.strip()


def served_hosts(settings: Any) -> list[str]:
    """The hosts in `settings.hosts` (comma-separated), canonical, in order, once each."""
    seen: list[str] = []
    for raw in str(getattr(settings, "hosts", "") or "").split(","):
        host = canonical_host(raw) if raw.strip() else ""
        if host and host not in seen:
            seen.append(host)
    return seen


# How long a submission waits for the name service; past it the host is taken as it is (the launch will say).
RESOLVE_WAIT = 5.0


def config_files(config: str) -> list[str]:
    """The client configs ssh reads for a host: `-F FILE` alone, else the user's and the system's."""
    if config:
        return [config]
    return [os.path.expanduser("~/.ssh/config"), "/etc/ssh/ssh_config"]


def _resolved(options: dict[str, str]) -> str:
    """"" when the host name resolves (or cannot be asked in time); else the name service's words."""
    name, port = options.get("hostname", ""), options.get("port", "22")
    answer: list[str] = []

    def ask() -> None:
        try:
            socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
            answer.append("")
        except (OSError, UnicodeError) as exc:
            answer.append(getattr(exc, "strerror", None) or str(exc))

    thread = threading.Thread(target=ask, name="ssh-host-resolve", daemon=True)
    thread.start()
    thread.join(RESOLVE_WAIT)
    return answer[0] if answer else ""


def unknown_host(host: str, config: str) -> str:
    """Why ssh could not reach `host` by that name (a blueprint's `exp_host`), or "" when it can try.

    What ssh itself would do, asked before anything is queued: `ssh -G` applies the config (`-F config`,
    else ~/.ssh/config and /etc/ssh/ssh_config), then the HostName it gives must resolve here, unless a
    ProxyJump or ProxyCommand reaches it (only the jump host can resolve it then). The message names the
    alias and the files read."""
    try:
        target = parse_target(host)
    except LoginError as exc:
        return f"ssh host {host!r}: {exc}"
    files = config_files(config)
    read = _files_read(files, config)
    if config and not os.path.isfile(config):
        return (f"ssh host {target.host!r}: the ssh config {config} (AJET_RUNNER_SSH_CONFIG) does not exist; "
                "point AJET_RUNNER_SSH_CONFIG at your ssh client config or unset it")
    proc = _ssh_g(target, config)
    if proc is None:
        return ""  # no ssh client to ask here: the launch will say what is wrong
    if proc.returncode != 0:
        said = "; ".join(ln.strip() for ln in proc.stderr.splitlines() if ln.strip())[-300:]
        return f"ssh host {target.host!r}: ssh cannot read its config ({read}): {said}"
    options = _options(proc.stdout)
    if _proxied(options):
        return ""  # only the jump host can resolve it
    why = _resolved(options)
    return _unresolved(target.host, options, read, why, files[0]) if why else ""


def _files_read(files: list[str], config: str) -> str:
    """The ssh config files ssh reads (a named one whether or not it exists; the defaults that exist)."""
    return ", ".join(f for f in files if config or os.path.exists(f)) or "none: no ~/.ssh/config"


def _ssh_g(target: SshTarget, config: str) -> subprocess.CompletedProcess[str] | None:
    """`ssh -G`: the options ssh would use for `target`; None when there is no ssh client to ask."""
    try:
        return subprocess.run(["ssh", *(["-F", config] if config else []), "-G", *target.ssh_args()],
                              capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _options(text: str) -> dict[str, str]:
    """`ssh -G`'s `key value` lines, keys lower-cased, the first of a repeated key kept."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        options.setdefault(key.lower(), value.strip())
    return options


def _proxied(options: dict[str, str]) -> bool:
    """A ProxyJump or ProxyCommand reaches the host (only the jump host needs to resolve it)."""
    return options.get("proxyjump", "none") != "none" or options.get("proxycommand", "none") != "none"


def _unresolved(host: str, options: dict[str, str], read: str, why: str, first_file: str) -> str:
    """Why a host ssh would try does not resolve here: its HostName, or a name that is no Host at all."""
    name = options.get("hostname", host)
    if name != host:
        return (f"ssh host {host!r}: its HostName {name} (in the ssh config read: {read}) does not resolve "
                f"here ({why}); correct the HostName, or add a ProxyJump if only a jump host reaches it")
    return (f"ssh host {host!r} is not a Host in the ssh config read ({read}) and does not resolve as a "
            f"host name ({why}): add `Host {host}` with its HostName, Port and User to "
            f"{first_file}, or write the host as user@host:port")
