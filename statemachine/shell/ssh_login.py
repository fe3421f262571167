"""Where a blueprint says its experiment runs: an ssh login written the way researchers write it.

Accepted (EN and ZH, anywhere in the blueprint): a login line `ssh root@host -p 8824`, `ssh -p 8824 user@host`,
`ssh ALIAS`, with or without a label (`login: ssh …`, `登录：ssh …`, the seed's "login" line above it), or an
`[exp_host]` part holding `user@host:port`, `ssh://user@host:port` or an alias of the user's ssh config.

Only options that say *which* host (`-p`, `-l`) are read; anything else (`-i`, `-J`, `-o`) belongs in a
`Host` entry of the ssh config, where every ssh tool sees it, and is refused with that advice. Pure: text in,
a `SshTarget` or a `LoginError` out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

__all__ = ["LoginError", "SshTarget", "find_login_lines", "login_in_command", "parse_ssh_words", "parse_target"]

_USER = r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}"
_NAME = r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,252})"
_TARGET = re.compile(rf"(?:ssh://)?(?:(?P<user>{_USER})@)?(?P<host>{_NAME}|\[[0-9A-Fa-f:.]{{2,45}}\])"
                     r"(?::(?P<port>\d{1,5}))?/?")
# ssh's options that take a value, and the flags that change nothing about where it logs in.
_VALUE_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")
_HARMLESS_FLAGS = set("46ACgKkqTtvXxYy")
# A label before the login on the same line, or on the line above it (the seed: "login\nssh …").
_LABEL = re.compile(r"^(?:login|log in|ssh|host|remote host|ssh host|exp_host|登录|登陆|主机|远程主机|服务器)"
                    r"\s*(?:[:：=]\s*|$)", re.IGNORECASE)
_PROMPT = re.compile(r"^(?:[$#>]\s+)")
_MARKUP = " \t*_`>-•"


class LoginError(ValueError):
    """A login the runner cannot use as written; the message says how to write it."""


@dataclass(frozen=True)
class SshTarget:
    """One ssh destination: an alias of the ssh config, or user@host with a port."""

    host: str
    user: str = ""
    port: int | None = None

    def __str__(self) -> str:
        """The canonical form stored in the blueprint: `user@host:port`, `host:port`, `user@host` or `alias`."""
        return f"{self.destination()}{f':{self.port}' if self.port else ''}"

    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh_args(self) -> list[str]:
        """The arguments that name this host to `ssh` (before any remote command)."""
        return [*(["-p", str(self.port)] if self.port else []), "--", self.destination()]

    def login_line(self) -> str:
        """How a person logs in by hand."""
        return " ".join(["ssh", *(["-p", str(self.port)] if self.port else []), shlex.quote(self.destination())])


def parse_target(text: str) -> SshTarget:
    """`user@host:port`, `ssh://user@host:port`, `host`, `alias`; or a whole `ssh …` login line."""
    s = text.strip().strip("`").strip()
    if s.startswith("ssh ") or s == "ssh":
        target, rest = parse_ssh_words(_split(s))
        if rest:
            raise LoginError(f"the login `{s}` runs a command on the host ({' '.join(rest)}): name only the host "
                             "here and put the command in [exp_launch_command]")
        return target
    m = _TARGET.fullmatch(s)
    if m is None:
        raise LoginError(f"not a host: {s!r}; write user@host:port, an alias of your ssh config, or "
                         "`ssh -p PORT user@host`")
    port = int(m.group("port")) if m.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise LoginError(f"not a port: {port} in {s!r}")
    return SshTarget(m.group("host"), m.group("user") or "", port)


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise LoginError(f"cannot read the login `{text}`: {exc}") from exc


def parse_ssh_words(words: list[str]) -> tuple[SshTarget, list[str]]:
    """`ssh [options] destination [options] [command…]` as words (OpenSSH reads options after the
    destination too: `ssh root@host -p 8824`): the host, and the remote command's words."""
    if not words or words[0] != "ssh":
        raise LoginError("not an ssh command")
    port: int | None = None
    user = ""
    destination = ""
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            destination, i = _after_dashes(words, i + 1, destination)
            break
        if not word.startswith("-") or word == "-":
            if destination:
                break  # the remote command starts here
            destination = word
            i += 1
            continue
        i, opt, value = _read_option(words, i, word)
        if opt == "p":
            port = _port_number(value)
        elif opt == "l":
            user = value
    return _login_target(destination, user, port), words[i:]


def _after_dashes(words: list[str], i: int, destination: str) -> tuple[str, int]:
    """Past `--` (at `i - 1`): the destination (the next word, when none was given before) and where the
    remote command starts."""
    if not destination and i < len(words):
        return words[i], i + 1
    return destination, i


def _port_number(value: str) -> int:
    """The value of `-p` as a port; LoginError when it is none."""
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise LoginError(f"not a port: -p {value!r}")
    return int(value)


def _login_target(destination: str, user: str, port: int | None) -> SshTarget:
    """The host of an ssh login: its destination (`user@host:port`) with the `-l` user and `-p` port filling
    what it leaves out; LoginError without a destination or with two different ports."""
    if not destination:
        raise LoginError("the ssh login names no host")
    target = parse_target(destination)
    if target.port is not None and port is not None and target.port != port:
        raise LoginError(f"two ports for one host: {destination} and -p {port}")
    return SshTarget(target.host, target.user or user, target.port or port)


def _read_option(words: list[str], i: int, word: str) -> tuple[int, str, str]:
    """Check one option word (`-p 22`, `-p22`, `-tt`, `-tp 22`): the index after it, and the option that
    takes a value with its value ("" and "" for flags only)."""
    for j in range(1, len(word)):
        opt = word[j]
        if opt in _VALUE_OPTS:
            value = word[j + 1:] or (words[i + 1] if i + 1 < len(words) else "")
            if opt not in "pl":
                raise LoginError(f"the login uses `ssh -{opt} {value}`: put it in a Host entry of your ssh config "
                                 "(~/.ssh/config, or the file AJET_RUNNER_SSH_CONFIG names) and write `ssh ALIAS`")
            return i + (1 if word[j + 1:] else 2), opt, value
        if opt not in _HARMLESS_FLAGS:
            raise LoginError(f"the login uses `ssh -{opt}`, which the runner does not pass on: put what it does in "
                             "a Host entry of your ssh config and write `ssh ALIAS`")
    return i + 1, "", ""


def _login_text(line: str) -> str | None:
    """The `ssh …` of a line that is a login (labelled or not), else None."""
    s = line.strip().strip(_MARKUP).strip()
    m = _LABEL.match(s)
    if m is not None and m.end() < len(s):
        s = s[m.end():].strip().strip("`").strip()
    s = _PROMPT.sub("", s)
    return s if s.startswith("ssh ") else None


def find_login_lines(text: str) -> list[tuple[int, str, SshTarget | LoginError]]:
    """Every line of `text` that is an ssh login: (line index, the line, its target or why it is unusable).

    A line is a login when it is `ssh [options] destination` and nothing else, or is labelled as one
    (`login: ssh …`, a "login"/"登录" line above it). Prose that mentions ssh is not a login."""
    found: list[tuple[int, str, SshTarget | LoginError]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        login = _login_text(line)
        if login is None:
            continue
        labelled = _LABEL.match(line.strip().strip(_MARKUP)) is not None or (
            i > 0 and _LABEL.fullmatch(lines[i - 1].strip().strip(_MARKUP).rstrip(":：").strip() + ":") is not None)
        try:
            target, rest = parse_ssh_words(_split(login))
        except LoginError as exc:
            if labelled:
                found.append((i, line.strip(), exc))
            continue
        if rest:
            if labelled:
                found.append((i, line.strip(), LoginError(
                    f"the login `{login}` also runs a command on the host: keep the login alone on its line and put "
                    "the command in [exp_launch_command]")))
            continue
        found.append((i, line.strip(), target))
    return found


def login_in_command(words: list[str]) -> tuple[SshTarget, str] | None:
    """A launch command of the form `ssh [options] HOST 'COMMAND'`: the host and the command to run there.

    None when the command does not start with ssh; LoginError when it does but is not that simple shape."""
    if not words or words[0] != "ssh":
        return None
    target, rest = parse_ssh_words(words)
    if len(rest) != 1 or not rest[0].strip():
        raise LoginError("the launch command logs in with ssh: put the login on its own line "
                         f"(login: {target.login_line()}) and write [exp_launch_command] as it runs on the host")
    return target, rest[0].strip()
