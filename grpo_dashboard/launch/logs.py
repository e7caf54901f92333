"""Reading a job's log: where it is, its tail, and the line that best says why it ended (shared by the backends)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_dashboard.spec.jobfiles import job_module

if TYPE_CHECKING:
    from grpo_dashboard.store.db import Run


def log_path(run: Run) -> Path:
    """The job's combined stdout/stderr, for every backend (a remote job's log is copied there as it arrives)."""
    return Path(run.run_dir) / "job.log"


def _read_end(path: Path, max_bytes: int) -> str | None:
    """The last `max_bytes` of a file as text (undecodable bytes replaced); None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return None


def last_error_line(path: Path, max_bytes: int = 65536) -> str | None:
    """The most informative last line of a job log: the last exception line, else the last non-empty line."""
    text = _read_end(path, max_bytes)
    if text is None:
        return None
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    marker = job_module().MARKER.strip()
    lines = [ln for ln in lines if not ln.startswith(marker)]
    for ln in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", ln) or ln.startswith("Killed"):
            return ln[:500]
    return lines[-1][:500] if lines else None


def tail(path: Path, n: int = 50, max_bytes: int = 262144) -> str:
    """The last n lines of a log file (empty string if absent)."""
    text = _read_end(path, max_bytes)
    if text is None:
        return ""
    text = text.replace("\r", "\n")
    return "\n".join([ln for ln in text.splitlines() if ln.strip()][-n:])
