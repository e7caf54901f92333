"""What the dashboard says about a Hugging Face Jobs run: what was submitted (`hf_job.json` in the run directory),
one summary line, and the live connection state of its follower as a status line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_dashboard.store.db import Run

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
    return (f"job {d.get('url', '?')} on {d.get('flavor', '?')}, timeout {timeout} ({d.get('timeout_reason', '')}); "
            f"outputs in {d.get('output', '?')}")
