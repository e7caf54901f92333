"""Locations of the job scripts in `jobs/` and access to their reward registry (one source of truth for both sides)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PACKAGE = Path(__file__).resolve().parent.parent
_BUNDLED = _PACKAGE / "_project"  # an installed package's copies of jobs/ and examples/ (pyproject.toml maps them)
# Where jobs/ and examples/ are: the top of a git checkout, or beside the modules of an installed package.
PROJECT_ROOT = _BUNDLED if (_BUNDLED / "jobs").is_dir() else _PACKAGE.parent
JOBS_DIR = PROJECT_ROOT / "jobs"
JOB_SCRIPT = JOBS_DIR / "grpo_job.py"
REWARDS_MODULE = JOBS_DIR / "grpo_rewards.py"
AGENTS_MODULE = JOBS_DIR / "grpo_agents.py"


def job_files() -> list[Path]:
    """Every file a job needs beside its run.yaml: the script and its sibling modules (all `jobs/*.py`)."""
    return sorted(JOBS_DIR.glob("*.py"))


def _load(name: str, path: Path) -> ModuleType:
    """The job module `name` from `path`, imported once under its own name (as the job itself imports it)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@functools.cache
def rewards_module() -> ModuleType:
    """The job's `grpo_rewards` module, imported from `jobs/` (light: no torch or trl at import)."""
    return _load("grpo_rewards", REWARDS_MODULE)


@functools.cache
def agents_module() -> ModuleType:
    """The job's `grpo_agents` module (built-in tools, environments, process rewards, trajectory reading; light)."""
    rewards_module()  # puts jobs/ on sys.path, where grpo_rewards imported grpo_agents
    return _load("grpo_agents", AGENTS_MODULE)


@functools.cache
def job_module() -> ModuleType:
    """The job script `grpo_job` itself, imported from `jobs/` (light: torch, trl and datasets load only inside its
    functions). It defines what both sides of the job contract use: `MARKER` (the stdout line-protocol prefix),
    `DATA_FILE_TYPES` (local data files by suffix), `prompt_renderer` (one row's prompt) and `wants_job_health`
    (whether the job runs the health rules, so needs them shipped)."""
    return _load("grpo_job", JOB_SCRIPT)
