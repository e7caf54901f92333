"""Locations of the job scripts in `jobs/` and access to their reward registry (one source of truth for both sides)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

JOBS_DIR = Path(__file__).resolve().parent.parent.parent / "jobs"
JOB_SCRIPT = JOBS_DIR / "grpo_job.py"
REWARDS_MODULE = JOBS_DIR / "grpo_rewards.py"


def job_files() -> list[Path]:
    """Every file a job needs beside its run.yaml: the script and its sibling modules (all `jobs/*.py`)."""
    return sorted(JOBS_DIR.glob("*.py"))


@functools.cache
def rewards_module() -> ModuleType:
    """The job's `grpo_rewards` module, imported from `jobs/` (light: no torch or trl at import)."""
    name = "grpo_rewards"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(REWARDS_MODULE):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REWARDS_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
