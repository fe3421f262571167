"""The attempt wrapper every executor runs: a bash script that starts the launch command in its own
session and process group, tees its output to the log, and records its pid and exit code in files.

It is the same script for a local tmux pane, a tmux server on an ssh host and a SLURM batch job, so
the truth about an attempt (pid, exit code as 128+N for signal N, the first write error) is read the
same way everywhere. What the job's environment is, is said here too: `env_file` holds the launching
process's environment (NUL-separated, mode 0600, removed once read) and the job starts from it alone,
never from a tmux server's stale global environment; `keep` names what the host adds that must stay
(SLURM's own variables inside a job).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.shell.command_file import command_script
from ajet_runner.workers.executors.handle import RECORD_ERROR

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TEE_DRAIN_STEPS = 200  # the wrapper waits at most 200 x 25 ms = 5 s for tee to flush before writing the rc


class WrapperError(RuntimeError):
    """The wrapper cannot be written (a tool it needs is missing, a bad variable name)."""


_WRAPPER = """\
#!/usr/bin/env bash
# ajet-runner attempt wrapper, generated {generated} for session {session}.
# It runs the launch command, kept verbatim as the script COMMAND_FILE (a multi-line block,
# heredocs and if/fi run as written), in its own session and process group (setsid), so the runner can
# signal the whole job; copies all it prints (stdout+stderr) to this pane and, appended,
# to the log (tee -a); writes the command's pid, then its exit code (128+N when killed by
# signal N): tmux loses exit codes on this platform, so the rc file is the truth.
# Ctrl-C, SIGTERM and SIGHUP sent to this wrapper are forwarded to the command's group.
# Its files live in logs_dir, held as the wrapper's working directory from the start: the log
# and the rc file are written there by relative name (a directory fd, in effect), so a result
# dir swapped for a symlink mid-run is never written through. logs_id is the device:inode of the
# directory the runner checked; the rc is written only while logs_dir still leads to it.
logs_dir={logs_dir}
logs_id={logs_id}
log={log}
rc_file={rc}
pid_file={pid}
env_file={env_file}
reserve={reserve}
linger={linger}
linger_shown={linger_shown}
COMMAND_FILE={command_file}

_ajet_err=
_ajet_put() {{  # atomic: temp file, then rename; a failed write leaves no litter and its error in _ajet_err
    _ajet_err=$( {{ printf '%s\\n' "$2" > "$1.tmp.$$"; }} 2>&1 ) && {mv} -f -- "$1.tmp.$$" "$1" && return 0
    {rm} -f -- "$1.tmp.$$"
    return 1
}}
if ! cd -- "$logs_dir" 2>/dev/null || [ "$({stat} -c %d:%i .)" != "$logs_id" ]; then
    echo "[ajet-runner] refused to start: $logs_dir is no longer the directory that was checked"
    exit 1  # nothing written: the runner names the cause (a result dir outside the allowed roots)
fi
# Traps first: a signal that comes before the command starts is remembered and forwarded
# to it as soon as it exists, and never kills the wrapper before it records the code.
_ajet_pid=
_ajet_sig=
_ajet_hangup=
_ajet_forward() {{
    _ajet_sig=$1
    [ "$1" = HUP ] && _ajet_hangup=1  # the pane is gone: nobody to linger for
    [ -n "$_ajet_pid" ] && kill -s "$1" -- "-$_ajet_pid" 2>/dev/null
}}
trap '_ajet_forward INT' INT
trap '_ajet_forward TERM' TERM
trap '_ajet_forward HUP' HUP
exec 3>&1  # the pane, for the wrapper's own last words
exec > >(trap '' INT TERM HUP; exec {tee} -a -- "$log") 2>&1
_ajet_tee=$!
if ! ( cd -- {cwd} ); then
    echo "[ajet-runner] cannot cd to "{cwd}
    _ajet_put "$rc_file" 1
    exit 1
fi
# The job's environment is exported in a subshell only, so the wrapper, tee and the
# linger sleep carry no experiment marker. A background job ignores SIGINT unless told
# otherwise; `env --default-signal` restores it so a graceful stop works. The job writes
# its own pid once that is done (so no stop signal sent after the pid is known can be
# lost), then becomes bash running COMMAND_FILE: same pid, its own session and process group. Builtins
# only: a bash waiting for a child (say `mv`) swallows a SIGINT the child survives. The
# pid is one write() of "<pid>\\n"; the runner reads it only once the newline is there.
_ajet_job='printf "%s\\n" "$$" > "$1" && exec "$2" -- "$3"'
(
    if [ -n "$env_file" ]; then  # the launching process's environment, and nothing a tmux server kept
        while IFS= read -r _ajet_n; do
            case "$_ajet_n" in {keep}) ;; *) unset -v "$_ajet_n" 2>/dev/null ;; esac
        done < <(compgen -e)
        # Read whole under the C locale (a UTF-8 locale would swallow the NUL after a byte that is not
        # UTF-8), then export: a LANG among them changes nothing already read.
        LC_ALL=C mapfile -d '' -t _ajet_vars < "$logs_dir/$env_file"
        for _ajet_kv in "${{_ajet_vars[@]}}"; do
            export "$_ajet_kv" 2>/dev/null || echo "[ajet-runner] not exported: ${{_ajet_kv%%=*}}"
        done
        {rm} -f -- "$logs_dir/$env_file"
        unset _ajet_n _ajet_kv _ajet_vars
    fi
{exports}
    cd -- {cwd} || exit 1
    exec {setsid} {env} --default-signal=INT,QUIT {bash} -c "$_ajet_job" ajet-job "$logs_dir/$pid_file" {bash} \\
        "$logs_dir/$COMMAND_FILE"
) < /dev/null &
_ajet_pid=$!
[ -n "$_ajet_sig" ] && _ajet_forward "$_ajet_sig"
while :; do
    _ajet_sig=
    wait "$_ajet_pid"
    rc=$?
    [ -z "$_ajet_sig" ] && break  # a trapped signal interrupted wait: wait again
done
# Let tee flush what the command printed before the rc says "done". Bounded, because an
# escaped daemon may hold the pipe open for ever.
exec >&3 2>&3
for ((_i = 0; _i < {tee_steps}; _i++)); do
    [ -e "/proc/$_ajet_tee" ] || break
    {sleep} 0.025
done
# A full disk: the reserve kept in the result dir for the final files makes room for the code,
# which then carries the first error, so the run ends failed naming it (never "no exit code").
if [ "$({stat} -L -c %d:%i -- "$logs_dir" 2>/dev/null)" != "$logs_id" ]; then
    echo "[ajet-runner] $logs_dir was moved or swapped while the command ran: exit code $rc not written"
elif ! _ajet_put "$rc_file" "$rc"; then
    _ajet_why=${{_ajet_err##*: }}
    _ajet_why=${{_ajet_why:-write error}}
    [ -n "$reserve" ] && {rm} -f -- "$reserve"
    _ajet_put "$rc_file" "$rc
{record_error}$_ajet_why" || echo "[ajet-runner] exit code $rc not written: $_ajet_why"
fi
trap - INT TERM HUP
printf '\\n[ajet-runner] %(%F %T)T command exited with code %s; this pane closes in %s\\n' -1 "$rc" "$linger_shown"
[ -z "$_ajet_hangup" ] && [ "$linger" -gt 0 ] && {sleep} "$linger"
exit "$rc"
"""


def command_path(log_path: Path) -> Path:
    """Where an attempt's launch command is kept as a script: `<log_stem>.command.sh`."""
    return Path(log_path).with_name(Path(log_path).stem + ".command.sh")


def env_path(log_path: Path) -> Path:
    """Where an attempt's environment waits for its wrapper (mode 0600, removed once read): `<log_stem>.env`."""
    return Path(log_path).with_name(Path(log_path).stem + ".env")


def command_text(command: str) -> str:
    """The launch command as the body of a script (`ajet_runner.statemachine.shell.command_file`, which `check`
    shows)."""
    return command_script(command)


def local_tool(name: str) -> str:
    """Absolute path of a tool the wrapper needs, resolved now: the job's PATH may not have it."""
    path = shutil.which(name)
    if path is None:
        raise WrapperError(f"`{name}` is not installed")
    return path


def host_tool(name: str) -> str:
    """A tool on another host: its name, found on that host's PATH when the wrapper runs."""
    return name


def wrapper_text(
    session: str, command_file: Path, cwd: str, env: Mapping[str, str], log: Path, rc: Path, pid: Path, linger: int,
    *, logs_id: str, reserve: str = "", env_file: str = "", keep: str = "TMUX|TMUX_PANE",
    tools: Callable[[str], str] = local_tool,
) -> str:
    """The wrapper script. Log, rc, pid and command file share one directory, named relative to it
    here; `logs_id` is that directory's `st_dev:st_ino` as checked (a path may be seen differently
    by a session host in another mount namespace; the inode is the same); `reserve` is the reserve
    file relative to it, or ""."""
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError(f"not a valid environment variable name: {key!r}")
    if not re.fullmatch(r"[A-Za-z0-9_*|]+", keep):
        raise ValueError(f"not a case pattern of variable names: {keep!r}")
    q = shlex.quote
    _tool = tools
    return _WRAPPER.format(
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        session=session,
        logs_dir=q(os.path.abspath(log.parent)),
        logs_id=q(logs_id),
        stat=q(_tool("stat")),
        log=q(log.name),
        rc=q(rc.name),
        pid=q(pid.name),
        env_file=q(env_file),
        keep=keep,
        reserve=q(reserve),
        record_error=RECORD_ERROR,
        linger=int(linger),
        linger_shown=q(format_limit(int(linger))),
        command_file=q(command_file.name),
        cwd=q(cwd),
        exports="\n".join(f"    export {k}={q(v)}" for k, v in env.items()),
        mv=q(_tool("mv")),
        rm=q(_tool("rm")),
        tee=q(_tool("tee")),
        setsid=q(_tool("setsid")),
        env=q(_tool("env")),
        bash=q(_tool("bash")),
        sleep=q(_tool("sleep")),
        tee_steps=TEE_DRAIN_STEPS,
    )


ENV_VALUE_MAX = 128 * 1024  # Linux refuses to exec with one variable over MAX_ARG_STRLEN (E2BIG on every exec)


def shown_name(name: str | bytes) -> str:
    """A variable's name as the report can print it: bytes that are not UTF-8 shown as U+FFFD."""
    raw = name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "replace")


def env_entries(env: Mapping[str, str] | Mapping[bytes, bytes]) -> tuple[list[bytes], dict[str, str]]:
    """The `NAME=value` entries passed (as bytes, so a value that is not UTF-8 arrives unchanged), and a line
    for each variable that needs one, keyed by its name as given: left out (a name bash cannot export, a
    value too large to exec with) or passed with a value that is not UTF-8."""
    parts: list[bytes] = []
    notes: dict[str, str] = {}
    for key, value in env.items():
        k = key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")
        v = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
        shown = shown_name(k)
        name = key if isinstance(key, str) else shown
        if not _ENV_NAME.match(shown) or b"\0" in v:
            notes[name] = f"{shown}: not passed (not a name a shell can export)"
            continue
        if len(v) > ENV_VALUE_MAX:
            notes[name] = (f"{shown}: not passed ({len(v):,} bytes; a process cannot start with a variable over "
                           f"{ENV_VALUE_MAX:,} bytes)")
            continue
        try:
            v.decode("utf-8")
        except UnicodeDecodeError:
            notes[name] = f"{shown}: passed as its bytes (the value is not UTF-8)"
        parts.append(k + b"=" + v + b"\0")
    return parts, notes


def env_file_bytes(env: Mapping[str, str] | Mapping[bytes, bytes]) -> tuple[bytes, list[str]]:
    """The environment as the wrapper reads it (NAME=value, NUL-separated), and the lines of `env_entries`."""
    parts, notes = env_entries(env)
    return b"".join(parts), list(notes.values())


def write_attempt_files(dfd: int, log_path: Path, rc_path: Path, pid_path: Path, command: str,
                        reserve_path: Path | None, base_env: Mapping[str, str] | None) -> tuple[str, Path, str, str]:
    """Lay out one attempt's files in the logs directory open as `dfd`, for any executor: the previous
    attempt's rc and pid removed, an empty log, the command file, and the env file (0600) when `base_env` is
    given. Returns (the directory's `dev:ino` as checked, the command file, the reserve relative to the logs
    dir or "", the env file's name or "")."""
    from ajet_runner.resultdir.confined import write_at

    st = os.fstat(dfd)
    logs_id = f"{st.st_dev}:{st.st_ino}"  # the directory that was opened and checked
    for stale in (rc_path, pid_path):  # a previous attempt's files must not be read as ours
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale.name, dir_fd=dfd)
    write_at(dfd, log_path.name, b"", truncate=False)  # exists before start() returns; tee appends
    command_file = command_path(log_path)
    write_at(dfd, command_file.name, command_text(command).encode())
    reserve = os.path.relpath(os.path.abspath(reserve_path), os.path.abspath(log_path.parent)) \
        if reserve_path is not None else ""
    env_file = ""
    if base_env is not None:
        env_file = env_path(log_path).name
        write_at(dfd, env_file, env_file_bytes(base_env)[0], mode=0o600)
    return logs_id, command_file, reserve, env_file
