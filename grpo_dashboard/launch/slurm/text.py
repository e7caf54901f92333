"""What the dashboard says about a Slurm run: one summary line from the run directory (the submitted job and Slurm's
latest answer, as the backend recorded them)."""

from __future__ import annotations

from pathlib import Path

from grpo_dashboard.launch.slurm.commands import JOB_INFO, STATE_FILE, _read_json
from grpo_dashboard.store.db import Run


def job_summary(run: Run) -> str | None:
    """Where the job went and what Slurm last said (why it waits, where it runs), from the run directory."""
    info = _read_json(Path(run.run_dir) / JOB_INFO)
    if not info:
        return None
    state = _read_json(Path(run.run_dir) / STATE_FILE)
    where = f"partition {info['partition']}, " if info.get("partition") else ""
    text = (state or {}).get("summary") or f"Slurm job {info['job_id']}"
    return (
        f"{text} ({where}{info.get('nodes', 1)} node(s), {info.get('world_size', 1)} process(es)); "
        f"script {info.get('script')}"
    )


def status_markdown(run: Run) -> str:
    """One line for a Slurm run: Slurm's last answer (why it waits, where it runs), partition, nodes, processes and
    the batch script (empty before the job is submitted)."""
    summary = job_summary(run)
    return f"**Slurm** {summary}" if summary else ""
