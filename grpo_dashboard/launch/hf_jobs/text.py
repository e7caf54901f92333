"""What the dashboard says about a Hugging Face Jobs run (pure: no gradio): what was submitted (`hf_job.json` in
the run directory), one summary line, and the run-detail status (the job, its log follower's state, the job's latest
GPU utilisation and memory from the Jobs metrics stream)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.series import SYSTEM_SPLIT

JOB_INFO = "hf_job.json"


def job_details(run: Run) -> dict[str, Any]:
    """What was submitted: job id, URL, flavor, timeout (and why), bucket folder, command ({} if not submitted)."""
    try:
        return json.loads((Path(run.run_dir) / JOB_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def job_summary(run: Run) -> str | None:
    """Where the run's job went: its URL, flavor, timeout (and why) and outputs; None before it was submitted."""
    from grpo_dashboard.checks.hardware import format_duration

    d = job_details(run)
    if not d:
        return None
    timeout = format_duration(d["timeout_s"]) if d.get("timeout_s") else "?"
    return (
        f"job {d.get('url', '?')} on {d.get('flavor', '?')}, timeout {timeout} ({d.get('timeout_reason', '')}); "
        f"outputs in {d.get('output', '?')}"
    )


def status_markdown(run: Run, store: Store | None = None, state: dict[str, Any] | None = None) -> str:
    """Markdown lines for an hf_jobs run: where the job runs and its timeout, its follower's connection `state`
    (`HfJobsBackend.follow_state`) and, with `store`, the job's latest system sample (the System chart draws them
    all). Empty for a run without job details, follower or samples."""
    from grpo_dashboard.checks.hardware import format_duration

    lines = []
    d = job_details(run)
    if d:
        lines.append(
            f"**Job** [{run.external_id or 'job'}]({d.get('url', '')}) on `{d.get('flavor', '?')}`, timeout "
            f"{format_duration(d['timeout_s']) if d.get('timeout_s') else '?'} "
            f"({d.get('timeout_reason', '')})"
        )
    if state:
        extra = f", last error: {state['last_error']}" if state.get("last_error") else ""
        lines.append(
            f"**Log stream** {state.get('phase', '?')} (stage {state.get('stage', '?')}, "
            f"{state.get('lines', 0)} lines, {state.get('reconnects', 0)} reconnects{extra})"
        )
    now = store.latest_metrics(run.id, SYSTEM_SPLIT) if store is not None else {}
    if now:
        lines.append("**Hardware now** " + hardware_now(now))
    return "\n\n".join(lines)


def _known(v: Any) -> bool:
    return isinstance(v, (int, float)) and v == v


def hardware_now(now: dict[str, Any]) -> str:
    """One line from a run's latest `system/...` values: each GPU's utilisation and memory, then the CPU and memory.
    The CPU is the job's (Jobs metrics stream) where it was sampled, else the training process's own (the job's
    sampler, in % of one core); a figure nobody sampled is left out rather than shown as "?"."""
    gpus = sorted({k.split("/")[1] for k in now if k.startswith("system/gpu")}, key=lambda g: int(g[3:]))
    parts = []
    for g in gpus:
        util, used, total = (now.get(f"system/{g}/{k}") for k in ("utilization", "memory_used_gb", "memory_total_gb"))
        text = f"GPU{g[3:]}" + (f" {util:.3g}%" if _known(util) else "")
        if _known(used):
            text += f" · {used:.3g} GB" + (f" / {total:.3g} GB" if _known(total) else "")
        parts.append(text)
    if not parts:
        parts.append("no GPU reported")
    job_cpu, proc_cpu = now.get("system/cpu/utilization"), now.get("system/process/cpu_pct")
    if _known(job_cpu):
        parts.append(f"CPU {job_cpu:.3g}%")
    elif _known(proc_cpu):
        parts.append(f"CPU {proc_cpu:.3g}% of one core (training process)")
    ram, rss = now.get("system/memory/used_gb"), now.get("system/process/rss_gb")
    if _known(ram):
        parts.append(f"RAM {ram:.3g} GB")
    elif _known(rss):
        parts.append(f"RAM {rss:.3g} GB (training process)")
    return "; ".join(parts)
