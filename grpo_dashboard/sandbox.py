"""Sandboxed subprocesses for the dashboard: the same sandbox the code reward uses inside jobs.

The implementation lives in `jobs/grpo_rewards.py` (jobs cannot import this package); this module reaches it through
`jobfiles.rewards_module()` and adds what the dashboard needs: running one of our own modules (the reward worker)
inside the sandbox with the repository importable. Custom reward code is only ever executed this way.
"""

from __future__ import annotations

from typing import Any

from .jobfiles import JOBS_DIR, rewards_module

REPO_ROOT = JOBS_DIR.parent


def run_sandboxed(code: str, **kwargs: Any) -> Any:
    """Run Python `code` in the sandbox; see `run_sandboxed` in jobs/grpo_rewards.py for the arguments."""
    return rewards_module().run_sandboxed(code, **kwargs)


def run_module(module: str, stdin: str = "", *, timeout_s: float = 60.0, memory_mb: int | None = 4096,
               allow_subprocess: bool = False, extra_path: list[str] | None = None) -> Any:
    """Run `python -m module` in the sandbox with this repository (and `extra_path`) on sys.path."""
    code = f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    return run_sandboxed(code, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb,
                         allow_subprocess=allow_subprocess, sys_path=[str(REPO_ROOT), *(extra_path or [])])


def isolation() -> str:
    """How the sandbox isolates children on this machine (the `unshare` flags, or 'audit hook only')."""
    prefix = rewards_module().isolation_prefix()
    return "unshare " + " ".join(prefix[1:]) if prefix else "audit hook only"
