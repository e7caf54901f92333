"""Local backend: the job script as a subprocess (argument list, never a shell) in its own process group.

Several processes go through `accelerate launch --num_processes N`; GPUs are chosen with CUDA_VISIBLE_DEVICES.
A process is identified by pid plus its start time (`local_process`), so a reused pid is never mistaken for the
run, and never signalled. A job gets an allow-listed environment (`JOB_ENV_NAMES`), never the dashboard's secrets.
The jobs this process started are kept (`_children`) to read their exit codes; any other process finds a job again
by its pid and start time, so nothing needs reattaching after a restart.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_dashboard.checks.cluster_checks import gpu_count
from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.launch import vllm_server
from grpo_dashboard.launch.hub_client import saved_token
from grpo_dashboard.launch.local_process import (  # re-exported for callers and tests
    group_alive,
    is_alive,
    is_ours,
    pid_reused,
    process_start_time,
    signal_group,
)
from grpo_dashboard.launch.logs import last_error_line, log_path
from grpo_dashboard.settings import on_space
from grpo_dashboard.spec import trl_schema
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT
from grpo_dashboard.spec.run_spec import BackendSpec, RunSpec
from grpo_dashboard.store.db import TERMINAL, Run, RunStatus, Store
from grpo_dashboard.store.ingest import ingest_file

KIND = "local"
CANCEL_GRACE_S = 10.0
STALLED = "stalled"
LINGER_S = 30.0  # a job that reported its end but has not exited by then is killed
_children: dict[str, subprocess.Popen | None] = {}
_children_lock = threading.Lock()
_stall_limits: dict[str, float | None] = {}
# Runs whose job this process saw alive (as the very process that was started) at its latest check: when such a
# job's leader has vanished, what is left of its process group is still the run's (`signal_group`).
_seen_alive: set[str] = set()


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
    "GRPO_JOB_SYSTEM_INTERVAL_S", "GRPO_JOB_SYSTEM_GPUS",  # the job's system sampler (GPU samples between logs)
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


def start(spec: RunSpec, run_dir: Path, config_path: Path, metrics_path: Path, token: str | None = None
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
        popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=str(run_dir), env=job_environment(spec, token), start_new_session=True)
    finally:
        log.close()
    return LocalProcess(popen.pid, process_start_time(popen.pid), popen)


def metrics_path(run: Run) -> Path:
    """Where the job of a local run writes its records."""
    return Path(run.run_dir) / "metrics.jsonl"


# --- the backend interface (launch/__init__.py) ---------------------------------------------------------------
def launch_token(token: str | None = None) -> str | None:
    """The token a local job gets as its HF_TOKEN: the launching user's, else the saved login (None: no token)."""
    return token or saved_token()


def submit(store: Store, run: Run, spec: RunSpec, token: str | None, base_dir: Path | None = None) -> Run:
    """Start the job of a queued run from its run.yaml (`spec` is its resolved spec; `base_dir` is not needed).

    A job that cannot be started is a failed run.
    """
    run_dir = Path(run.run_dir)
    try:
        proc = start(spec, run_dir, run_dir / "run.yaml", metrics_path(run), token=token)
    except OSError as exc:
        store.finish_run(run.id, RunStatus.FAILED, error=f"could not start the job: {exc}")
        return store.get_run(run.id)
    with _children_lock:
        _children[run.id] = proc.popen
        _seen_alive.add(run.id)
    store.update_run(run.id, pid=proc.pid, pid_start=proc.start_time)
    return store.get_run(run.id)


def refresh(store: Store, run: Run) -> Run:
    """Ingest new records of an active run and settle its status if its process has ended."""
    if run.status in TERMINAL:
        return _reap(store, run)
    ingest_file(store, run.id, metrics_path(run))
    run = store.get_run(run.id)
    if run.status in TERMINAL:
        return _reap(store, run)
    exit_code, alive = _poll(run)
    if alive:
        if run.cancel_requested_at and time.time() - run.cancel_requested_at > CANCEL_GRACE_S and run.pid:
            signal_group(run.pid, run.pid_start, signal.SIGKILL)
        elif not run.cancel_requested_at:
            _kill_if_stalled(store, run)
        return run
    _kill_leftovers(run)  # leader gone, workers left: no orphans
    ingest_file(store, run.id, metrics_path(run))
    run = store.get_run(run.id)
    if run.status in TERMINAL:
        if exit_code is not None:
            store.update_run(run.id, exit_code=exit_code)
        return store.get_run(run.id)
    if run.cancel_requested_at and run.error and run.error.startswith(STALLED):
        store.finish_run(run.id, RunStatus.FAILED, exit_code=exit_code)
    elif run.cancel_requested_at:
        store.finish_run(run.id, RunStatus.CANCELED, error="canceled by user (process killed)", exit_code=exit_code)
    elif run.pid is None:
        return run
    else:
        store.finish_run(run.id, RunStatus.FAILED, error=_vanished(run, exit_code), exit_code=exit_code)
    return store.get_run(run.id)


def _vanished(run: Run, exit_code: int | None) -> str:
    """Why a job that never reported its end is gone, with the last line of its log."""
    if exit_code is not None and exit_code < 0:
        reason = f"job was killed by {signal.Signals(-exit_code).name} (signal {-exit_code})"
    elif exit_code is not None:
        reason = f"job exited with code {exit_code}"
    else:
        reason = f"job process {run.pid} vanished"
    reason += " without reporting an end"
    if pid_reused(run.pid, run.pid_start):
        reason += f" (pid {run.pid} now belongs to another process, which was not signalled)"
    last = last_error_line(log_path(run))
    return f"{reason}. Last log line: {last}" if last else reason


def stall_timeout(run: Run) -> float | None:
    """The run's `backend.stall_timeout_s` (None: never), read once from its spec."""
    if run.id not in _stall_limits:
        try:
            _stall_limits[run.id] = RunSpec.from_yaml(run.spec_yaml).backend.stall_timeout_s
        except Exception:  # a run without a readable spec keeps the default
            _stall_limits[run.id] = BackendSpec().stall_timeout_s
    return _stall_limits[run.id]


def _kill_if_stalled(store: Store, run: Run) -> None:
    """A job silent (no log, no record) for longer than its stall timeout is hung: kill its group, mark it failed."""
    limit = stall_timeout(run)
    if not limit or not run.pid:
        return
    last = max([run.started_at or run.created_at] + [p.stat().st_mtime for p in (log_path(run), metrics_path(run))
                                                       if p.exists()])
    silent = time.time() - last
    if silent <= limit:
        return
    if not is_ours(run.pid, run.pid_start):
        return  # not provably the job (a reused pid is found vanished by the next refresh): never signalled
    reason = (f"{STALLED}: no output for {silent:.0f} s (backend.stall_timeout_s = {limit:g}); the job was killed. "
              f"Last log line: {last_error_line(log_path(run)) or '(none)'}")
    store.update_run(run.id, error=reason, cancel_requested_at=time.time())
    signal_group(run.pid, run.pid_start, signal.SIGKILL)


def _poll(run: Run) -> tuple[int | None, bool]:
    with _children_lock:
        popen = _children.get(run.id)
    if popen is not None:
        code = popen.poll()
        alive = code is None
    else:
        code, alive = None, is_alive(run.pid, run.pid_start)
    if alive:
        with _children_lock:
            _seen_alive.add(run.id)
    return code, alive


def _kill_leftovers(run: Run) -> None:
    """SIGKILL what is left of the group of a job whose leader has exited, if the group is provably still the run's.

    It is when this process saw the leader alive at its previous check (`_seen_alive`); a dashboard that finds the
    leader long gone leaves the group alone, as its pid may since belong to an unrelated process group.
    """
    with _children_lock:
        seen = run.id in _seen_alive
        _seen_alive.discard(run.id)
    if run.pid and group_alive(run.pid, run.pid_start):
        signal_group(run.pid, run.pid_start, signal.SIGKILL, leftovers=seen)


def _reap(store: Store, run: Run) -> Run:
    """After the job reported its end: record the exit code once the process is gone, never blocking."""
    with _children_lock:
        popen = _children.get(run.id)
    if popen is None:
        return run
    code = popen.poll()
    if code is None:
        with _children_lock:
            _seen_alive.add(run.id)
        if run.ended_at and time.time() - run.ended_at > LINGER_S and run.pid:
            signal_group(run.pid, run.pid_start, signal.SIGKILL)  # reported its end but hangs in teardown
        return run
    with _children_lock:
        _children.pop(run.id, None)
    _stall_limits.pop(run.id, None)  # per live run only: a dashboard that runs for months must not keep them all
    _kill_leftovers(run)
    if run.exit_code is None:
        store.update_run(run.id, exit_code=code)
    return store.get_run(run.id)


def reap(store: Store) -> None:
    """Record the exit codes of jobs this process started whose runs have ended (they are not refreshed again)."""
    with _children_lock:
        ids = list(_children)
    for run_id in ids:
        try:
            run = store.get_run(run_id)
        except RunNotFound:  # a child launched against another store (another data dir) in this process
            continue
        if run.status in TERMINAL:
            _reap(store, run)


def await_exit(store: Store, run: Run) -> Run:
    """Give a job that reported its end a moment to exit, so its exit code is recorded."""
    deadline = time.monotonic() + LINGER_S + 5
    while time.monotonic() < deadline:
        with _children_lock:
            if run.id not in _children:
                return store.get_run(run.id)
        time.sleep(0.1)
        run = refresh(store, store.get_run(run.id))
    return run


def cancel(store: Store, run: Run, wait: bool = False, token: str | None = None, grace_s: float | None = None
           ) -> Run:
    """Ask a run to stop: SIGTERM to its process group, SIGKILL after `grace_s` (default CANCEL_GRACE_S) seconds.

    `token` is not needed. With `wait`, return once the job has stopped and the run is settled.
    """
    if run.status in TERMINAL:
        return run
    store.update_run(run.id, cancel_requested_at=time.time())
    alive = is_alive(run.pid, run.pid_start)
    if not (alive and signal_group(run.pid, run.pid_start, signal.SIGTERM)):
        error = "canceled by user"
        if pid_reused(run.pid, run.pid_start):
            error += f" (its job had already ended; pid {run.pid} now belongs to another process, not signalled)"
        elif alive:
            error += f" (process {run.pid} could not be verified as the job's start, so it was not signalled)"
        store.finish_run(run.id, RunStatus.CANCELED, error=error)
        return store.get_run(run.id)
    if not wait:
        return store.get_run(run.id)
    deadline = time.monotonic() + (CANCEL_GRACE_S if grace_s is None else grace_s)
    while time.monotonic() < deadline:
        run = refresh(store, store.get_run(run.id))
        if run.status in TERMINAL and not group_alive(run.pid or 0, run.pid_start):
            return await_exit(store, run)
        time.sleep(0.2)
    signal_group(run.pid, run.pid_start, signal.SIGKILL, leftovers=True)
    for _ in range(50):
        run = refresh(store, store.get_run(run.id))
        if run.status in TERMINAL:
            break
        time.sleep(0.1)
    return run


def resume(store: Store, run: Run, token: str | None) -> bool:
    """Nothing to resume after a restart: `refresh` finds a local job's process again by its pid and start time."""
    return False


def reattach(store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None
             ) -> list[Run]:
    """Nothing to find after a restart: every local run is in the store, and `refresh` follows it again."""
    return []


def job_summary(run: Run) -> str | None:
    """Nothing beyond the run itself: a local job runs here, its files are in the run directory."""
    return None
