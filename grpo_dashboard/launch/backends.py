"""The backend table: the one place where a run's `backend.kind` picks the module that runs it.

Every module here provides the interface launch/__init__.py describes (local, hf_jobs, slurm); another backend is a
sibling module providing it, added to the tuple below.
"""

from __future__ import annotations

from types import ModuleType

from grpo_dashboard.errors import BackendError
from grpo_dashboard.launch import hf_jobs, local, slurm

BACKENDS: dict[str, ModuleType] = {backend.KIND: backend for backend in (local, hf_jobs, slurm)}


def backend_for(kind: str) -> ModuleType:
    """The module that runs runs of this `backend.kind`; BackendError naming the known kinds for any other."""
    try:
        return BACKENDS[kind]
    except KeyError:
        known = ", ".join(repr(k) for k in BACKENDS)
        raise BackendError(f"Unknown backend {kind!r} (backend.kind): this dashboard runs {known} runs. A run of "
                           f"another backend was made by another version of the dashboard; open it there.") from None
