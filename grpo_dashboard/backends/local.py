"""Local backend: the job script as a subprocess (argument list, never a shell) in its own process group.

Several processes go through `accelerate launch --num_processes N`; GPUs are chosen with CUDA_VISIBLE_DEVICES.
A process is identified by pid plus its start time (from /proc), so a reused pid is never mistaken for the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..jobfiles import JOB_SCRIPT
from ..spec import RunSpec


@dataclass
class LocalProcess:
    """What the store keeps to find the process again."""

    pid: int
    start_time: str | None
    popen: subprocess.Popen | None = None


def build_command(spec: RunSpec, config_path: Path, metrics_path: Path) -> list[str]:
    """The argument list that runs the job for this spec (also shown to users as the equivalent command)."""
    job = [str(JOB_SCRIPT), "--config", str(config_path), "--metrics", str(metrics_path)]
    b = spec.backend
    if b.num_processes <= 1 and not b.accelerate_config:
        return [sys.executable, *job]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(b.num_processes)]
    if b.accelerate_config:
        cmd += ["--config_file", accelerate_config_path(b.accelerate_config)]
    elif b.num_processes > 1:
        cmd.append("--multi_gpu")
    return [*cmd, *job]


def accelerate_config_path(name: str) -> str:
    """Resolve a TRL accelerate preset name (zero2, fsdp2, ...) to its file; other values are paths."""
    try:
        import trl

        preset = Path(trl.__file__).parent / "accelerate_configs" / f"{name}.yaml"
        if preset.is_file():
            return str(preset)
    except ImportError:
        pass
    return str(Path(name).expanduser().resolve())


def job_environment(spec: RunSpec) -> dict[str, str]:
    """Environment for the job: ours plus unbuffered output and the chosen GPUs."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if spec.backend.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.backend.gpus)
    return env


def start(spec: RunSpec, run_dir: Path, config_path: Path, metrics_path: Path) -> LocalProcess:
    """Start the job detached in a new session (its own process group); output goes to run_dir/job.log."""
    cmd = build_command(spec, config_path, metrics_path)
    log = open(run_dir / "job.log", "ab")  # noqa: SIM115 - handed to the child, closed here after spawn
    try:
        popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=str(run_dir), env=job_environment(spec), start_new_session=True)
    finally:
        log.close()
    return LocalProcess(popen.pid, process_start_time(popen.pid), popen)


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of a process (clock ticks since boot), or None if unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def is_alive(pid: int | None, start_time: str | None) -> bool:
    """True when the process with this pid and start time still runs (zombies count as gone)."""
    if not pid:
        return False
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = _state(pid)
    if state is None or state in ("Z", "X"):
        return False
    return start_time is None or process_start_time(pid) == start_time


def group_alive(pgid: int) -> bool:
    """True while any process of the group exists (zombies excluded)."""
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 2 and rest[2] == str(pgid) and rest[0] not in ("Z", "X"):
            return True
    return False


def signal_group(pid: int, sig: int) -> bool:
    """Send a signal to the run's process group (the job is its group leader); False if it is gone."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False


def terminate(pid: int, start_time: str | None, grace_s: float = 10.0) -> None:
    """SIGTERM the whole group, then SIGKILL whatever is left after `grace_s` seconds."""
    if not is_alive(pid, start_time):
        if group_alive(pid):
            signal_group(pid, signal.SIGKILL)
        return
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pid):
            return
        time.sleep(0.1)
    signal_group(pid, signal.SIGKILL)
