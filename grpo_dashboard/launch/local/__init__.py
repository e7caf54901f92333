"""The local backend: one unit. `job` (command line, environment, start), `process` (process identity), `runner`
(`LocalBackend`, the `Backend` protocol with the processes it started)."""

from grpo_dashboard.launch.local.job import (
    JOB_ENV_EXTRA,
    JOB_ENV_NAMES,
    JOB_ENV_PREFIXES,
    LocalProcess,
    accelerate_config_path,
    allowed_job_variable,
    build_command,
    job_environment,
    metrics_path,
    start,
)
from grpo_dashboard.launch.local.process import (
    group_alive,
    is_alive,
    is_ours,
    pid_reused,
    process_start_time,
    signal_group,
)
from grpo_dashboard.launch.local.runner import CANCEL_GRACE_S, LINGER_S, STALLED, LocalBackend
from grpo_dashboard.spec.run_spec import LOCAL as KIND

__all__ = [
    "CANCEL_GRACE_S", "JOB_ENV_EXTRA", "JOB_ENV_NAMES", "JOB_ENV_PREFIXES", "KIND", "LINGER_S", "STALLED",
    "LocalBackend", "LocalProcess", "accelerate_config_path", "allowed_job_variable", "build_command",
    "group_alive", "is_alive", "is_ours", "job_environment", "metrics_path", "pid_reused", "process_start_time",
    "signal_group", "start",
]
