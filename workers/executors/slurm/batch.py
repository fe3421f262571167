"""The batch script of one attempt's SLURM job.

It runs the attempt wrapper (workers/executors/wrapper.py) unchanged, so the pid, the exit code and the
log are written exactly as for a local run. Around it, three things only a batch script can do:

- a job that SLURM requeued (a preemption, a node failure, `scontrol requeue`) is not run a second
  time into the same files: it notes the requeue in the attempt's log and exits; the runner relaunches
  the attempt as a new one that resumes from its checkpoint (docs/executors.md#slurm);
- SLURM's signals reach the wrapper: `scancel --signal=INT --batch` gives the batch shell an INT, which
  it passes on (the wrapper is started with SIGINT at its default: bash starts a background job with
  SIGINT ignored, and a signal ignored at entry cannot be trapped);
- once the wrapper is done, whatever still carries this experiment's marker on the node is stopped
  (TERM, then KILL): under `proctrack/linuxproc` a daemon that left the job's process tree (a tmux
  server, a Ray head) escapes `scancel`, so the runner does not rely on the site's proctrack.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from ajet_runner.workers.executors.wrapper import local_tool

SWEEP_WAIT = 3  # seconds between the sweep's TERM and its KILL (inside SLURM's KillWait)

_SCRIPT = """\
#!{bash}
# ajet-runner SLURM batch script: experiment {exp_id}, attempt {attempt} (generated {generated}).
# Runs the attempt wrapper {wrapper_name} unchanged (its pid, exit code and log files are the truth about
# the attempt), forwards SLURM's signals to it, then stops what of this experiment is left on the node.
log={log}
wrapper={wrapper}
marker={marker}
logs_id_ino={logs_ino}
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then
    printf '%s\\n' "[ajet-runner] SLURM job ${{SLURM_JOB_ID:-?}} was preempted or requeued \
(SLURM_RESTART_COUNT=$SLURM_RESTART_COUNT): not run again into the same files; the runner relaunches \
the attempt, resuming from its checkpoint" >> "$log"
    exit 0
fi
_ajet_w=
_ajet_fwd() {{ [ -n "$_ajet_w" ] && kill -s "$1" "$_ajet_w" 2>/dev/null; }}
trap '_ajet_fwd INT' INT
trap '_ajet_fwd TERM' TERM
trap '_ajet_fwd HUP' HUP
# The wrapper refuses a log directory that is not the one checked at submission (device:inode). A shared
# filesystem shows the same inode on every node but may show another device number: then the wrapper runs
# from a copy that expects this node's device number, the inode still checked.
run=$wrapper
have=$({stat} -c %d:%i -- {logs_dir} 2>/dev/null)
if [ -n "$have" ] && [ "$have" != {logs_id} ] && [ "${{have#*:}}" = "${{logs_id_ino}}" ]; then
    run=${{wrapper:0:-3}}.node.sh  # attempt-N.sh -> attempt-N.node.sh
    {sed} "s/^logs_id=.*/logs_id=$have/" "$wrapper" > "$run" && chmod 755 "$run" || run=$wrapper
fi
{env} --default-signal=INT,QUIT {bash} "$run" &
_ajet_w=$!
while :; do
    wait "$_ajet_w"
    rc=$?
    kill -0 "$_ajet_w" 2>/dev/null || break  # a trapped signal interrupted wait: the wrapper still runs
done
_ajet_sweep() {{  # the pids still carrying the marker, signalled with $1
    local p found=
    for p in /proc/[0-9]*; do
        p=${{p#/proc/}}
        [ "$p" = "$$" ] && continue
        if {grep} -qzxF -- "$marker" "/proc/$p/environ" 2>/dev/null; then
            kill -s "$1" "$p" 2>/dev/null && found="$found $p"
        fi
    done
    printf '%s' "$found"
}}
left=$(_ajet_sweep TERM)
if [ -n "$left" ]; then
    printf '%s\\n' "[ajet-runner] stopped process(es) of this experiment left on $({hostname}) after the \
command ended:$left" >> "$log"
    {sleep} {sweep_wait}
    _ajet_sweep KILL >/dev/null
fi
exit "$rc"
"""


def batch_script(*, exp_id: str, attempt: int, wrapper: Path, log: Path, marker: str, logs_id: str) -> str:
    """The script sbatch submits (tools by absolute path: the job starts with SLURM's variables only).
    `logs_id`: the log directory's `device:inode` as checked at submission (the wrapper's own check)."""
    q = shlex.quote
    return _SCRIPT.format(
        stat=q(local_tool("stat")), sed=q(local_tool("sed")), logs_dir=q(str(log.parent)), logs_id=q(logs_id),
        logs_ino=q(logs_id.split(":", 1)[-1]),
        bash=local_tool("bash"), env=q(local_tool("env")), grep=q(local_tool("grep")), sleep=q(local_tool("sleep")),
        hostname=q(local_tool("hostname")), exp_id=exp_id, attempt=attempt, wrapper_name=wrapper.name,
        generated=time.strftime("%Y-%m-%d %H:%M:%S"), log=q(str(log)), wrapper=q(str(wrapper)), marker=q(marker),
        sweep_wait=SWEEP_WAIT,
    )
