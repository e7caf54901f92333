"""Sandboxed subprocesses for the dashboard: the same sandbox the code reward uses inside jobs.

The implementation lives in `jobs/grpo_sandbox.py` (jobs cannot import this package); this module reaches it through
`jobfiles.rewards_module()` and adds what the dashboard needs: running one of our own modules (the reward worker)
inside the sandbox, where only this package and `jobs/` are importable. Custom reward code is only ever executed
this way.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo_dashboard.spec.jobfiles import JOBS_DIR, rewards_module

REPO_ROOT = JOBS_DIR.parent
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def sandbox_module() -> ModuleType:
    """The job's `grpo_sandbox` module (imported beside `grpo_rewards`, from `jobs/`)."""
    rewards_module()
    return importlib.import_module("grpo_sandbox")


def run_sandboxed(code: str, **kwargs: Any) -> Any:
    """Run Python `code` in the sandbox; see `run_sandboxed` in jobs/grpo_sandbox.py for the arguments."""
    return sandbox_module().run_sandboxed(code, **kwargs)


def run_module(
    module: str,
    stdin: str = "",
    *,
    timeout_s: float = 60.0,
    memory_mb: int | None = 4096,
    allow_subprocess: bool = False,
    extra_path: list[str] | None = None,
    read_only: list[str] | None = None,
    report: bool = False,
) -> Any:
    """Run `python -m module` in the sandbox with this package and `jobs/` (and `extra_path`) on sys.path.

    Of this repository the sandbox sees only `grpo_dashboard/` and `jobs/`, read-only at their own paths. Beside
    them it sees `read_only` (host paths, read-only); None shows the `extra_path` entries themselves. `report`:
    give the module a report channel of its own (see `run_sandboxed`), returned as the result's `report`.
    """
    code = f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    extra = list(extra_path or [])
    visible = [str(PACKAGE_DIR), str(JOBS_DIR), *(extra if read_only is None else read_only)]
    return run_sandboxed(
        code,
        stdin=stdin,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        allow_subprocess=allow_subprocess,
        sys_path=[str(REPO_ROOT), *extra],
        read_only=visible,
        report=report,
    )


def report_channel(worker: str) -> Any:
    """Inside a worker run with `run_module(..., report=True)`: its report channel, as a line-buffered text file the
    sandboxed code does not hold as stdout (a print cannot forge a result); SystemExit when there is none."""
    name = sandbox_module().REPORT_FD_ENV
    fd = os.environ.pop(name, "")
    if not fd.isdigit():
        raise SystemExit(
            f"{worker}: no report channel ({name} is not set); it runs only through "
            f"grpo_dashboard.checks.sandbox.run_module(..., report=True)."
        )
    os.set_inheritable(int(fd), False)
    return open(int(fd), "w", encoding="utf-8", buffering=1)  # the worker's channel for its life


def reward_paths(function: str | None, base_dir: str | Path) -> list[str]:
    """What the reward worker must see of the host for a spec's `function` (resolved like `load_custom` does).

    `file.py:fn`: that file alone (not its directory, which may hold data). `package.module:fn`: the package (or
    module file) under `base_dir`; one installed in the Python environment is visible anyway.
    """
    if not function:
        return []
    target = function.rsplit(":", 1)[0] if ":" in function else function.rpartition(".")[0]
    base = Path(base_dir)
    if target.endswith(".py"):
        path = Path(target)
        path = path if path.is_absolute() else base / path
        return [str(path)] if path.is_file() else []
    top = target.split(".", 1)[0]
    return [str(p) for p in (base / top, base / f"{top}.py") if top and p.exists()]


def boundary() -> str | None:
    """The real isolation boundary on this machine (bubblewrap's namespaces, or Landlock where user namespaces are
    refused; both with seccomp and bounded tasks), or None.

    None means only the weak fallback (`unshare` namespaces or the audit hook, plus seccomp) is available, which does
    not stop code that means harm; `no_boundary_reason` says why.
    """
    return sandbox_module().bwrap_boundary()


def no_boundary_reason() -> str:
    """Why no boundary can be made on this machine (what bubblewrap and Landlock each lack, and what to do), or ""."""
    return sandbox_module().no_boundary_reason()


def isolation() -> str:
    """How the sandbox isolates children on this machine: the boundary, else the fallback's description."""
    return sandbox_module().current_isolation()


def weak_sandbox_warning() -> str:
    """What a user must know when custom code runs here without a boundary (the weak fallback), or "" when a
    boundary holds or the code already runs inside one."""
    if boundary() is not None or sandbox_module()._inside_boundary():
        return ""
    return (
        f"Custom code runs here without an isolation boundary: {no_boundary_reason()}. The fallback ({isolation()}) "
        "limits time and memory but does not stop code that means harm: run only reward and tool code you trust."
    )
