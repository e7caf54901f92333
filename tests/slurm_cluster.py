"""A real single-host Slurm cluster for tests: munged, slurmctld and two slurmd daemons started from a generated
configuration in a temporary directory, stopped by the pids in their pid files.

The host runs two Slurm nodes (`n1`, `n2`), each its own slurmd (`slurmd -N`) on its own port, so a job with
`--nodes=2` really gets two Slurm nodes, SLURM_NODEID 0 and 1, and `srun` starts one task on each. Nothing here is
a stand-in: the backend talks to these daemons through Slurm's own commands, pointed at the generated
configuration by SLURM_CONF.

Partitions: `debug` (default, both nodes, 10 min limit), `tiny` (only n1: a two-node job does not fit), `closed`
(INACTIVE: slurmctld refuses every job) and `restricted` (AllowAccounts=research; without accounting, and for root,
slurmctld does not enforce it, so no account is refused here).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo")
NODES = ("n1", "n2")


def missing_commands() -> list[str]:
    """The Slurm/munge programs this machine lacks (empty: a cluster can be started)."""
    return [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    """A running cluster; `env` holds what Slurm's commands need (SLURM_CONF) to reach it."""

    root: Path
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    pid_files: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        """The generated slurm.conf."""
        return self.root / "etc" / "slurm.conf"

    def start(self, timeout_s: float = 30.0) -> SlurmCluster:
        """Start munged, slurmctld and one slurmd per node; wait until every node is idle. RuntimeError on failure,
        with the daemon's log tail."""
        r = self.root
        for sub in ("etc", "munge", "state", "log", "run", *(f"spool/{n}" for n in NODES)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = r / "munge" / "munge.socket"
        munge_pid = r / "run" / "munged.pid"
        self._run(
            [
                _program("munged"),
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={munge_pid}",
                f"--log-file={r / 'log' / 'munged.log'}",
                f"--seed-file={r / 'munge' / 'seed'}",
            ],
            "munged",
        )
        self.pid_files.append(munge_pid)
        ctl_port, node_ports = _free_port(), [_free_port() for _ in NODES]
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={p} CPUs=2 RealMemory=4000 State=UNKNOWN"
            for n, p in zip(NODES, node_ports, strict=True)
        )
        self.conf.write_text(
            f"""ClusterName=grpotest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}/%n
SlurmctldPidFile={r / "run" / "slurmctld.pid"}
SlurmdPidFile={r / "run"}/slurmd-%n.pid
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log"}/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=5
OverTimeLimit=0
InactiveLimit=0
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
{nodes}
PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=10:00 State=UP OverSubscribe=YES
PartitionName=tiny Nodes={NODES[0]} MaxTime=10:00 State=UP
PartitionName=restricted Nodes={",".join(NODES)} AllowAccounts=research MaxTime=10:00 State=UP
PartitionName=closed Nodes={NODES[0]} MaxTime=10:00 State=INACTIVE
""",
            encoding="utf-8",
        )
        self.env = {"SLURM_CONF": str(self.conf)}
        self._run([_program("slurmctld"), "-f", str(self.conf), "-i"], "slurmctld")
        self.pid_files.append(r / "run" / "slurmctld.pid")
        for n in NODES:
            self._run([_program("slurmd"), "-f", str(self.conf), "-N", n], f"slurmd {n}")
            self.pid_files.append(r / "run" / f"slurmd-{n}.pid")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.command("sinfo", "-h", "-N", "-o", "%N %T")
            states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
            if all(states.get(n, "").startswith("idle") for n in NODES):
                return self
            time.sleep(0.3)
        raise RuntimeError(
            f"Slurm nodes not idle within {timeout_s:.0f} s: {out.stdout} {out.stderr}\n{self.log_tail()}"
        )

    def command(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster."""
        return subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env}
        )

    def _run(self, cmd: list[str], what: str) -> None:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(
                f"{what} did not start (exit {done.returncode}): {done.stderr.strip()}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every daemon log (for failure messages)."""
        out = []
        for log in sorted((self.root / "log").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel what still runs (a failed test may leave a job), then stop every daemon by the pid in its pid file
        (slurmd and slurmctld first, munged last): no slurmstepd is left behind without its slurmd."""
        if self.env:
            try:
                jobs = self.command("squeue", "--noheader", "--format=%i", timeout=15).stdout.split()
                if jobs:
                    self.command("scancel", *jobs, timeout=15)
                    deadline = time.monotonic() + 30
                    while (
                        time.monotonic() < deadline
                        and self.command("squeue", "--noheader", "--format=%i", timeout=15).stdout.split()
                    ):
                        time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass  # the controller is gone already: nothing can be canceled
        for pid_file in reversed(self.pid_files):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
