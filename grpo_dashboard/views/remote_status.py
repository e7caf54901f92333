"""Run-detail text for remote runs (pure: no gradio): each backend's own status lines (`Backend.status_markdown`;
Hugging Face Jobs: the job, its log follower and its hardware now; Slurm: the job's state, why it waits and where it
runs; local runs have none)."""

from __future__ import annotations

from grpo_dashboard.launch.backends import Backends, shared
from grpo_dashboard.store.db import Run, Store


def remote_markdown(run: Run, store: Store | None = None, backends: Backends | None = None) -> str:
    """The run's backend's status lines in Markdown ("" for a local or imported run, or a kind not run here)."""
    backends = backends or shared()
    if run.backend not in backends:
        return ""
    return backends.get(run.backend).status_markdown(run, store)
