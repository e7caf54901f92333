"""Local backend: the job script as a subprocess (argument list, never a shell) in its own process group.

Several processes go through `accelerate launch --num_processes N`; GPUs are chosen with CUDA_VISIBLE_DEVICES.
A process is identified by pid plus its start time (from /proc; psutil elsewhere), so a reused pid is never mistaken
for the run, and never signalled. A job gets an allow-listed environment (`JOB_ENV_NAMES`), never the dashboard's
secrets.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_dashboard.settings import on_space
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT
from grpo_dashboard.spec.run_spec import RunSpec


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


# The job's environment is built from these names only, never from the whole of `os.environ`: the dashboard's own
# environment holds secrets (OAUTH_CLIENT_SECRET, the owner's HF_TOKEN on a Space, cloud keys, WANDB_API_KEY, ...)
# that must not reach a job, which may run a user's code. What passes is what Python, torch, CUDA, accelerate and the
# Hub client need to run and find their caches, plus the job's own switches; none of it is a credential (proxy
# URLs are passed as they are, because the job cannot reach the Hub without them). The token a job gets is handed
# explicitly (`job_environment(..., token=)`); other variables pass only when the owner names them in
# GRPO_DASHBOARD_JOB_ENV.
JOB_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "SYSTEMROOT",
    "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "TOKENIZERS_PARALLELISM", "NUMEXPR_MAX_THREADS",
    "HF_HOME", "HF_ENDPOINT", "HF_ASSETS_CACHE", "HF_MODULES_CACHE", "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY", "DO_NOT_TRACK", "TRACKIO_DIR",
    "GRPO_JOB_NO_CALLBACK", "GRPO_SANDBOX_NO_UNSHARE",
    "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE",  # set on a Space: the job refuses webhooks to private addresses
})
JOB_ENV_PREFIXES = (
    "LC_", "PYTHON",
    "CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUDNN_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "TRITON_",
    "OMP_", "MKL_", "KMP_", "OPENBLAS_", "HIP_", "ROCM_", "HSA_", "ACCELERATE_",
    "HF_HUB_", "HF_DATASETS_", "HF_XET_",
)
JOB_ENV_EXTRA = "GRPO_DASHBOARD_JOB_ENV"  # comma-separated names the owner chooses to pass as well (WANDB_API_KEY)
WEBHOOK_VARIABLE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def allowed_job_variable(name: str) -> bool:
    """True when the dashboard's environment variable `name` is passed to local jobs (JOB_ENV_NAMES/PREFIXES)."""
    return name in JOB_ENV_NAMES or name.startswith(JOB_ENV_PREFIXES)


def job_environment(spec: RunSpec, token: str | None = None) -> dict[str, str]:
    """The job's whole environment: the allow-listed part of ours, the chosen GPUs, and `token` as HF_TOKEN.

    `token` is the launching user's own Hugging Face token (None: the job gets none from us). Off a Space, the
    variable a `health.webhook_url: $NAME` names is passed too (it is the local user's own); on a Space it never is,
    as every variable there is the Space owner's.
    """
    env = {k: v for k, v in os.environ.items() if allowed_job_variable(k)}
    extra = [n.strip() for n in os.environ.get(JOB_ENV_EXTRA, "").split(",") if n.strip()]
    hook = WEBHOOK_VARIABLE.match(spec.health.webhook_url or "")
    if hook and not on_space():
        extra.append(hook.group(1))
    env.update({n: os.environ[n] for n in extra if n in os.environ})
    env["PYTHONUNBUFFERED"] = "1"
    if on_space():
        env["GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE"] = "1"  # alerts must not reach the Space host's own network
    if token:
        env["HF_TOKEN"] = token
    if spec.backend.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.backend.gpus)
    return env


def start(spec: RunSpec, run_dir: Path, config_path: Path, metrics_path: Path, token: str | None = None
          ) -> LocalProcess:
    """Start the job detached in a new session (its own process group); output goes to run_dir/job.log.

    `token`: the launching user's Hugging Face token, the job's HF_TOKEN (see `job_environment`).
    """
    cmd = build_command(spec, config_path, metrics_path)
    log = open(run_dir / "job.log", "ab")  # noqa: SIM115 - handed to the child, closed here after spawn
    try:
        popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=str(run_dir), env=job_environment(spec, token), start_new_session=True)
    finally:
        log.close()
    return LocalProcess(popen.pid, process_start_time(popen.pid), popen)


def process_start_time(pid: int) -> str | None:
    """The start time of a process, or None if unknown or gone: with the pid, the identity of a process.

    On Linux the kernel's start time in clock ticks since boot (from /proc, exact, and what the store has always
    kept); elsewhere psutil's creation time in milliseconds.
    """
    if not Path("/proc").is_dir():
        return _psutil_start_time(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _psutil_start_time(pid: int) -> str | None:
    import psutil

    try:
        return str(round(psutil.Process(pid).create_time() * 1000))
    except (psutil.Error, OSError):
        return None


def _state(pid: int) -> str | None:
    if not Path("/proc").is_dir():
        import psutil

        try:
            return "Z" if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE else "R"
        except (psutil.Error, OSError):
            return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def is_alive(pid: int | None, start_time: str | None) -> bool:
    """True when the process with this pid and start time still runs (zombies count as gone).

    A None start time (not recorded) checks the pid alone: enough to say "running", never enough to signal it.
    """
    if not pid or pid <= 0:
        return False
    state = _state(pid)
    if state is None or state in ("Z", "X"):
        return False
    return start_time is None or process_start_time(pid) == start_time


def is_ours(pid: int | None, start_time: str | None) -> bool:
    """True when a process (zombies too) with this pid exists and provably is the one started at `start_time`."""
    return bool(pid and pid > 0 and start_time is not None and process_start_time(pid) == start_time)


def pid_reused(pid: int | None, start_time: str | None) -> bool:
    """True when a process with this pid exists but was not started at `start_time`: the pid was reused."""
    if not pid or pid <= 0 or start_time is None:
        return False
    current = process_start_time(pid)
    return current is not None and current != start_time


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def group_alive(pgid: int, start_time: str | None = None) -> bool:
    """True while any process of the group exists (zombies excluded).

    With `start_time` (the leader's), a group whose leader pid now belongs to another process is not this one: False.
    """
    if not pgid or pgid <= 0 or (start_time is not None and pid_reused(pgid, start_time)):
        return False
    if not Path("/proc").is_dir():
        import psutil

        for proc in psutil.process_iter():
            if _pgid(proc.pid) == pgid and _state(proc.pid) not in (None, "Z"):
                return True
        return False
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


def signal_group(pid: int | None, start_time: str | None, sig: int, leftovers: bool = False) -> bool:
    """Send `sig` to the run's process group (the job is its leader), only if it is still the run's; True if sent.

    The group is signalled when its leader `pid` is still the process started at `start_time` (a zombie leader
    counts: its pid cannot be reused before it is reaped). A pid that now belongs to another process (other start
    time), or an unknown start time, is never signalled. `leftovers`: the caller saw the leader alive at its
    previous check and it has vanished since; the group's remaining processes are then signalled too, because
    Linux never hands out a pid that is still some process's group id, so a group of that id is still the run's.
    """
    if not pid or pid <= 1 or start_time is None:
        return False
    current = process_start_time(pid)
    if current is not None and current != start_time:
        return False
    if current is None and not (leftovers and group_alive(pid)):
        return False
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False


def terminate(pid: int, start_time: str | None, grace_s: float = 10.0, leftovers: bool = False) -> bool:
    """SIGTERM the run's group, then SIGKILL whatever is left after `grace_s` seconds; False if nothing was sent.

    Identity is checked before every signal (`signal_group`); `leftovers` as there.
    """
    if not signal_group(pid, start_time, signal.SIGTERM, leftovers):
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pid, start_time):
            return True
        time.sleep(0.1)
    signal_group(pid, start_time, signal.SIGKILL, leftovers=True)
    return True
