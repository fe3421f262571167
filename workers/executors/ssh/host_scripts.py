"""The bash the ssh executor runs on a host, one script per call (sent on ssh's stdin to `bash -s`), so
each step costs one round trip over the multiplexed connection. Only POSIX tools plus bash, tmux,
base64, stat, tail and head are assumed on the host; every value is quoted here (`shlex.quote`)."""

from __future__ import annotations

import base64
import os
import shlex
from collections.abc import Sequence

TMUX_SOCKET = "ajet-runner"  # `tmux -L`: the runner's own tmux server on the host, apart from the user's
LOGS_ID = "@@AJET_LOGS_ID@@"  # replaced on the host by the logs dir's device:inode as the host sees it
PROBE_NAME = ".ajet-ssh-probe"
CHUNK_MAX = 4 * 1024 * 1024  # bytes of one file brought back per sync (the next tick reads on)

q = shlex.quote


def tmux_socket() -> str:
    """The runner's tmux server name on the host (`tmux -L`); tests give each its own."""
    return os.environ.get("AJET_RUNNER_SSH_TMUX_SOCKET") or TMUX_SOCKET


def _tmux(sock: str) -> str:
    return f"tmux -L {q(sock)}"


def start_script(*, sock: str, session: str, cwd: str, logs_dir: str, token: str, log: str, rc: str, pid: str,
                 files: dict[str, bytes], wrapper: str, pid_wait: float) -> str:
    """Check the host, write the attempt's files, start the wrapper in a tmux session, wait for the pid.

    Prints `ok SHARED DEV:INO PANE_PID PID` (SHARED 1 when the probe token written here is read there),
    else one word naming what is wrong (exit codes 3-7)."""
    writes = "\n".join(f"printf %s {q(base64.b64encode(data).decode())} | base64 -d > {q(name)} || exit 6"
                       for name, data in files.items())
    steps = max(1, int(pid_wait / 0.05))
    return f"""set -u
cwd={q(cwd)}; d={q(logs_dir)}; s={q(session)}
[ -d "$cwd" ] || {{ echo "nocwd"; exit 3; }}
command -v tmux >/dev/null 2>&1 || {{ echo "notmux"; exit 4; }}
{_tmux(sock)} has-session -t "=$s" 2>/dev/null && {{ echo "exists"; exit 5; }}
mkdir -p -- "$d" && cd -- "$d" || {{ echo "nodir"; exit 6; }}
shared=0; [ "$(cat -- {PROBE_NAME} 2>/dev/null)" = {q(token)} ] && shared=1
id=$(stat -c %d:%i .)
rm -f -- {q(rc)} {q(pid)}
: >> {q(log)}
{writes}
sed -i "s/{LOGS_ID}/$id/" {q(wrapper)} && chmod 755 {q(wrapper)} || exit 6
pane=$({_tmux(sock)} new-session -d -P -F '#{{pane_pid}}' -s "$s" -x 200 -y 50 \
    {q(f"exec bash -l {q(logs_dir + '/' + wrapper)}")}) || {{ echo "notstarted"; exit 7; }}
for _i in $(seq 1 {steps}); do [ -s {q(pid)} ] && break; [ -e {q(rc)} ] && break; sleep 0.05; done
echo "ok $shared $id $pane $(head -n1 {q(pid)} 2>/dev/null)"
"""


def probe_script(*, sock: str, session: str, pid: int | None, files: Sequence[tuple[str, int]]) -> str:
    """One tick: `A <alive> <session exists>` (the session is asked only while the pid is unknown), then per
    file `F <offset> <n>` and n bytes from that offset
    (from 0 when the file shrank: it was rewritten), or `N` when it does not exist."""
    alive = f"kill -0 {int(pid)} 2>/dev/null && a=1" if pid else ""
    reads = "\n".join(f"_f {q(path)} {int(offset)}" for path, offset in files)
    return f"""a=0; e=0
{alive}
{"e=1" if pid else f"{_tmux(sock)} has-session -t ={q(session)} 2>/dev/null && e=1"}
echo "A $a $e"
_f() {{
    if [ -f "$1" ]; then
        s=$(stat -c %s -- "$1"); o=$2; [ "$s" -lt "$o" ] && o=0; n=$((s - o)); [ "$n" -gt {CHUNK_MAX} ] && n={CHUNK_MAX}
        echo "F $o $n"; tail -c +$((o + 1)) -- "$1" | head -c "$n"
    else
        echo "N"
    fi
}}
{reads}
"""


def stop_script(*, sock: str, session: str, pgid: int | None, rc_path: str, grace: float, term_wait: float,
                kill_wait: float, rc_wait: float) -> str:
    """INT, then TERM, then KILL to the job's process group, each while any of it lives; wait for the rc
    file; close the session. Prints `gone` or `survived PIDS`."""
    signals = ""
    if pgid:
        signals = "\n".join(
            f"_alive && {{ kill -s {sig} -- -{int(pgid)} 2>/dev/null; _wait {wait}; }}"
            for sig, wait in (("INT", grace), ("TERM", term_wait), ("KILL", kill_wait)))
    group = int(pgid or 0)
    return f"""_alive() {{ [ {group} -gt 0 ] && kill -0 -- -{group} 2>/dev/null; }}
_wait() {{ local n; n=$(awk "BEGIN {{print int($1 / 0.05)}}"); for _i in $(seq 1 "$n"); do _alive || return 0; \
sleep 0.05; done; }}
{signals}
if [ {group} -gt 0 ]; then
    for _i in $(seq 1 {max(1, int(rc_wait / 0.05))}); do [ -e {q(rc_path)} ] && break; sleep 0.05; done
fi
{_tmux(sock)} kill-session -t ={q(session)} 2>/dev/null
if _alive; then echo "survived $(ps -o pid= -g {group} 2>/dev/null | tr -s ' \\n' ' ')"; else echo gone; fi
"""


def kill_marked_script(name: str, value: str, grace: float) -> str:
    """TERM, then KILL after `grace`, to every process on the host whose environment holds `name=value`."""
    marker = q(f"{name}={value}")
    return f"""_marked() {{ for e in /proc/[0-9]*/environ; do p=${{e#/proc/}}; p=${{p%/environ}}; \
[ "$p" = "$$" ] && continue; grep -qzxF -- {marker} "$e" 2>/dev/null && echo "$p"; done; }}
pids=$(_marked | tr '\\n' ' ')
[ -n "$pids" ] || exit 0
kill -s TERM $pids 2>/dev/null
for _i in $(seq 1 {max(1, int(grace / 0.1))}); do left=$(_marked); [ -z "$left" ] && break; sleep 0.1; done
left=$(_marked | tr '\\n' ' ')
[ -n "$left" ] && kill -s KILL $left 2>/dev/null
echo "$pids"
"""


def adopt_script(*, sock: str, session: str, logs_dir: str, token: str, rc: str, pid: str) -> str:
    """What is left of an attempt on the host: `<shared> <pid file> <rc file> <session exists>`, 1 or 0 each."""
    return f"""cd -- {q(logs_dir)} 2>/dev/null || {{ echo "0 0 0 0"; exit 0; }}
shared=0; [ "$(cat -- {PROBE_NAME} 2>/dev/null)" = {q(token)} ] && shared=1
p=0; [ -s {q(pid)} ] && p=1
r=0; [ -e {q(rc)} ] && r=1
e=0; {_tmux(sock)} has-session -t ={q(session)} 2>/dev/null && e=1
echo "$shared $p $r $e"
"""


def session_script(sock: str, session: str, action: str) -> str:
    """`has-session` (prints 1 or 0) or `kill-session` of exactly this session."""
    if action == "has":
        return f"{_tmux(sock)} has-session -t ={q(session)} 2>/dev/null && echo 1 || echo 0"
    return f"{_tmux(sock)} kill-session -t ={q(session)} 2>/dev/null; echo 0"
