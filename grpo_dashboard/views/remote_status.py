"""Run-detail text for remote runs (pure: no gradio). Hugging Face Jobs runs: where the job runs, its timeout, the log
follower's state, and the job's latest GPU utilisation and memory (its newest system sample, from the Jobs metrics
stream). Slurm runs: the job's state, why it waits and where it runs."""

from __future__ import annotations

from typing import Any

from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.series import SYSTEM_SPLIT


def _num(v: Any, unit: str) -> str:
    return f"{v:.3g}{unit}" if isinstance(v, (int, float)) and v == v else "?"


def hf_job_markdown(run: Run, store: Store | None = None) -> str:
    """Markdown lines for an hf_jobs run (empty for a run without job details, follower or samples: other backends);
    with `store`, the job's latest system sample too (the System chart draws them all)."""
    from grpo_dashboard.checks.hardware import format_duration
    from grpo_dashboard.launch.backends import shared
    from grpo_dashboard.launch.hf_jobs.text import job_details

    lines = []
    d = job_details(run)
    if d:
        lines.append(f"**Job** [{run.external_id or 'job'}]({d.get('url', '')}) on `{d.get('flavor', '?')}`, timeout "
                     f"{format_duration(d['timeout_s']) if d.get('timeout_s') else '?'} "
                     f"({d.get('timeout_reason', '')})")
    state = shared().hf_jobs.follow_state(run.id)
    if state:
        extra = f", last error: {state['last_error']}" if state.get("last_error") else ""
        lines.append(f"**Log stream** {state.get('phase', '?')} (stage {state.get('stage', '?')}, "
                     f"{state.get('lines', 0)} lines, {state.get('reconnects', 0)} reconnects{extra})")
    now = store.latest_metrics(run.id, SYSTEM_SPLIT) if store is not None else {}
    if now:
        gpus = sorted({k.split("/")[1] for k in now if k.startswith("system/gpu")}, key=lambda g: int(g[3:]))
        parts = [f"GPU{g[3:]} {_num(now.get(f'system/{g}/utilization'), '%')} · "
                 f"{_num(now.get(f'system/{g}/memory_used_gb'), ' GB')} / "
                 f"{_num(now.get(f'system/{g}/memory_total_gb'), ' GB')}" for g in gpus]
        lines.append("**Hardware now** " + ("; ".join(parts) if parts else "no GPU reported") +
                     f"; CPU {_num(now.get('system/cpu/utilization'), '%')}")
    return "\n\n".join(lines)


def slurm_job_markdown(run: Run) -> str:
    """One line for a Slurm run: Slurm's last answer (why it waits, where it runs), partition, nodes, processes and
    the batch script (empty for other backends or before the job is submitted)."""
    from grpo_dashboard.launch import slurm

    if run.backend != slurm.KIND:
        return ""
    summary = slurm.job_summary(run)
    return f"**Slurm** {summary}" if summary else ""
