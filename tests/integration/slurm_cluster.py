"""A private one-node SLURM for the tests: munge, slurmctld and slurmd as root, on free ports, with fake
GPUs (character devices), everything under one directory and stopped by pid.

The recipe is the one measured in the session notes (Debian slurm-wlm 22.05 + munge): node idle about a
second after start. `proctrack/linuxproc`: the site setting under which a daemon can escape a job, so
the executor's own sweep is what the tests see working.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
SBIN = ("/usr/sbin", "/usr/bin")
FAKE_GPUS = 4


def missing_binaries() -> list[str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _which(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    assert found is not None, name
    return found


@dataclass
class SlurmCluster:
    """One node named after this host, partition `debug`, `gpus` fake GPUs."""

    root: Path
    gpus: int = FAKE_GPUS
    pids: dict[str, int] = field(default_factory=dict)
    node: str = field(default_factory=socket.gethostname)
    _munge_dir: Path | None = None

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a SLURM client needs to reach this cluster (SLURM's own variable)."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        r = self.root
        for sub in ("state", "spool", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        self._munge()
        for i in range(self.gpus):
            dev = r / f"fakegpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device: plain files are dropped
        self._write_conf(free_port(), free_port())
        env = {**os.environ, **self.env}
        self.pids["slurmctld"] = subprocess.Popen(
            [_which("slurmctld"), "-D", "-c", "-f", str(self.conf)], env=env, stdout=subprocess.DEVNULL,
            stderr=open(r / "log" / "slurmctld.stderr", "wb"), start_new_session=True).pid  # noqa: SIM115
        self._wait(lambda: self._ok(["scontrol", "ping"]) and "UP" in self._out(["scontrol", "ping"]), timeout,
                   "slurmctld to answer")
        self.pids["slurmd"] = subprocess.Popen(
            [_which("slurmd"), "-D", "-f", str(self.conf)], env=env, stdout=subprocess.DEVNULL,
            stderr=open(r / "log" / "slurmd.stderr", "wb"), start_new_session=True).pid  # noqa: SIM115
        self._wait(lambda: self._out(["sinfo", "-h", "-o", "%T"]).strip() in ("idle", "mixed", "allocated"),
                   timeout, "the node to be idle")
        return self

    @property
    def munge_dir(self) -> Path:
        """munged runs as the munge user, which cannot traverse pytest's 0700 temp dirs: a dir of its own."""
        if self._munge_dir is None:
            self._munge_dir = Path(tempfile.mkdtemp(prefix="ajet-munge-"))
        return self._munge_dir

    def _munge(self) -> None:
        r = self.munge_dir
        key = r / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(r, 0o711)
        shutil.chown(key, "munge", "munge")
        os.chmod(key, 0o600)
        shutil.chown(r, "munge", "munge")
        proc = subprocess.run(["runuser", "-u", "munge", "--", _which("munged"), f"--key-file={key}",
                        f"--socket={r / 'munge.sock'}", f"--pid-file={r / 'munged.pid'}",
                        f"--log-file={r / 'munged.log'}", f"--seed-file={r / 'munged.seed'}", "--force"],
                       check=False, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"private SLURM: munged did not start: {proc.stderr.strip()}")
        self._wait(lambda: (r / "munged.pid").exists() and (r / "munge.sock").exists(), 10.0, "munged")
        self.pids["munged"] = int((r / "munged.pid").read_text().split()[0])

    def _write_conf(self, ctld_port: int, slurmd_port: int) -> None:
        r, node = self.root, self.node
        self.conf.write_text("\n".join([
            "ClusterName=ajettest",
            f"SlurmctldHost={node}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_dir / 'munge.sock'}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={r / 'log' / 'jobcomp.txt'}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "KillWait=10",
            "MinJobAge=600",
            "ReturnToService=2",
            "SchedulerParameters=sched_interval=1",
            f"NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 Gres=gpu:{self.gpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        (r / "gres.conf").write_text(f"NodeName={node} Name=gpu File={r}/fakegpu[0-{self.gpus - 1}]\n")
        (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainCores=no\nConstrainRAMSpace=no\n"
                                       "ConstrainDevices=no\n")

    def _cmd(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([_which(args[0]), *args[1:]], env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=30, check=False)

    def _ok(self, args: list[str]) -> bool:
        return self._cmd(args).returncode == 0

    def _out(self, args: list[str]) -> str:
        return self._cmd(args).stdout

    def jobs(self) -> list[str]:
        """Every job still in the queue (pending, running, completing): `id|state|name`."""
        return [ln for ln in self._out(["squeue", "-h", "-o", "%i|%T|%j"]).splitlines() if ln.strip()]

    def show_job(self, job_id: str) -> str:
        return self._out(["scontrol", "show", "job", job_id])

    def sbatch_wrap(self, command: str, *args: str) -> str:
        """Submit `command` as a job of its own (e.g. one that holds every GPU); its job id."""
        proc = self._cmd(["sbatch", "--parsable", "--output=/dev/null", *args, f"--wrap={command}"])
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def cancel(self, job_id: str) -> None:
        self._cmd(["scancel", job_id])

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._cmd(["scontrol", *args])

    @staticmethod
    def _wait(cond: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.1)
        raise RuntimeError(f"private SLURM: timed out after {timeout:.0f}s waiting for {what}")

    def stop(self) -> None:
        """Stop the daemons by pid: slurmd first (while slurmctld is up: a slurmd cut off from it ignored
        SIGTERM for minutes), then slurmctld, then munged; SIGKILL whatever is left after 15 s."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.get(name)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.pids.clear()
        if self._munge_dir is not None:
            shutil.rmtree(self._munge_dir, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
