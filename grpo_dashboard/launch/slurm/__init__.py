"""The Slurm backend: one unit. `script` (the batch script, pure), `commands` (talking to Slurm, statelessly),
`text` (what the dashboard says about a job), `runner` (`SlurmBackend`, the `Backend` protocol with its cache of
Slurm's answers)."""

from grpo_dashboard.launch.slurm.commands import (
    CANCEL_WAIT_S,
    ENDED,
    JOB_INFO,
    KILLED,
    LABEL,
    POLL_S,
    STATE_FILE,
    UNREACHABLE,
    JobState,
    SlurmError,
    _add_slurms_word,
    _reason,
    _write_json,
    equivalent_command,
    job_state,
    labelled_jobs,
    metrics_path,
)
from grpo_dashboard.launch.slurm.runner import SlurmBackend
from grpo_dashboard.launch.slurm.script import BATCH_SCRIPT, batch_files, batch_script, launcher_command, shell_line
from grpo_dashboard.launch.slurm.text import job_summary
from grpo_dashboard.spec.run_spec import SLURM as KIND

__all__ = [
    "BATCH_SCRIPT", "CANCEL_WAIT_S", "ENDED", "JOB_INFO", "KILLED", "KIND", "LABEL", "POLL_S", "STATE_FILE",
    "UNREACHABLE", "JobState", "SlurmBackend", "SlurmError", "_add_slurms_word", "_reason", "_write_json",
    "batch_files", "batch_script", "equivalent_command", "job_state", "job_summary", "labelled_jobs",
    "launcher_command", "metrics_path", "shell_line",
]
