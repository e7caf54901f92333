"""What a local job is: its command line, its allow-listed environment, and its start as a detached process group.

Stateless: the `LocalBackend` (runner.py) keeps what it started. Slurm's batch script and Hugging Face Jobs' payload
reuse the command and the accelerate preset resolution.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grpo_dashboard.checks.cluster_checks import gpu_count
from grpo_dashboard.launch import vllm_server
from grpo_dashboard.launch.local.process import process_start_time
from grpo_dashboard.settings import on_space
from grpo_dashboard.spec import trl_schema
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run


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
    preset = trl_schema.accelerate_preset(name)  # the installed TRL's file, or our copy where trl is missing
    if preset is not None:
        return str(preset)
    return str(Path(name).expanduser().resolve())


# The job's environment is built from these names only, never from the whole of `os.environ`: the dashboard's own
# environment holds secrets (OAUTH_CLIENT_SECRET, the owner's HF_TOKEN on a Space, cloud keys, WANDB_API_KEY, ...)
# that must not reach a job, which may run a user's code. What passes is what Python, torch, CUDA, accelerate and the
# Hub client need to run and find their caches, plus the job's own switches; none of it is a credential (proxy
# URLs are passed as they are, because the job cannot reach the Hub without them). The token a job gets is handed
# explicitly (`job_environment(..., token=)`); other variables pass only when the owner names them in
# GRPO_DASHBOARD_JOB_ENV.
JOB_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_RUNTIME_DIR",
        "SYSTEMROOT",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "LD_LIBRARY_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "TOKENIZERS_PARALLELISM",
        "NUMEXPR_MAX_THREADS",
        "HF_HOME",
        "HF_ENDPOINT",
        "HF_ASSETS_CACHE",
        "HF_MODULES_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
        "TRANSFORMERS_VERBOSITY",
        "DO_NOT_TRACK",
        "TRACKIO_DIR",
        "GRPO_JOB_NO_CALLBACK",
        "GRPO_SANDBOX_NO_UNSHARE",
        "GRPO_JOB_SYSTEM_INTERVAL_S",
        "GRPO_JOB_SYSTEM_GPUS",  # the job's system sampler (GPU samples between logs)
        "GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE",  # set on a Space: the job refuses webhooks to private addresses
    }
)
JOB_ENV_PREFIXES = (
    "LC_",
    "PYTHON",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "CUBLAS_",
    "CUDNN_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "HIP_",
    "ROCM_",
    "HSA_",
    "ACCELERATE_",
    "HF_HUB_",
    "HF_DATASETS_",
    "HF_XET_",
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
    if not on_space():  # the spec's named secrets are the launching user's own variables (never on a Space)
        extra.extend(spec.backend.secrets)
    env.update({n: os.environ[n] for n in extra if n in os.environ})
    env.update({str(k): str(v) for k, v in spec.backend.env.items()})
    env["PYTHONUNBUFFERED"] = "1"
    if on_space():
        env["GRPO_DASHBOARD_WEBHOOK_BLOCK_PRIVATE"] = "1"  # alerts must not reach the Space host's own network
    if token:
        env["HF_TOKEN"] = token
    if spec.backend.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.backend.gpus)
    return env


def start(
    spec: RunSpec, run_dir: Path, config_path: Path, metrics_path: Path, token: str | None = None
) -> LocalProcess:
    """Start the job detached in a new session (its own process group); output goes to run_dir/job.log.

    `token`: the launching user's Hugging Face token, the job's HF_TOKEN (see `job_environment`).
    """
    cmd = build_command(spec, config_path, metrics_path)
    if spec.generation is not None:  # vLLM server mode: the supervisor starts the server, then this command
        served = build_command(spec, run_dir / vllm_server.SERVED_CONFIG, metrics_path)
        plan = vllm_server.local_plan(spec, run_dir, served, metrics_path, gpu_count())
        plan.write(run_dir / vllm_server.PLAN)
        cmd = vllm_server.supervisor_command(run_dir / vllm_server.PLAN)
    log = open(run_dir / "job.log", "ab")  # handed to the child, closed here after spawn
    try:
        popen = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(run_dir),
            env=job_environment(spec, token),
            start_new_session=True,
        )
    finally:
        log.close()
    return LocalProcess(popen.pid, process_start_time(popen.pid), popen)


def metrics_path(run: Run) -> Path:
    """Where the job of a local run writes its records."""
    return Path(run.run_dir) / "metrics.jsonl"
