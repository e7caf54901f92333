"""TRL's parser and TRL's own config checks on a visitor's recipe, in a limited subprocess of the sandbox.

`TrlParse`'s code (spec/trl_isolated.py) is TRL's and transformers' on text a visitor sent: it opens files the recipe
names, imports modules, allocates. Here it runs as `python -m grpo_dashboard.spec.trl_isolated` inside the sandbox
(checks/sandbox.py: bubblewrap, or Landlock where user namespaces are refused) with a time limit, an address-space
limit, no network and an environment without secrets or proxies. A local user's own recipe goes to the same module
in a plain subprocess with the time limit (`parse_local`): the dashboard process never imports trl. Answers are
cached by the request (the same recipe gives the same answer with the same TRL).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from grpo_dashboard.errors import shorten
from grpo_dashboard.spec.trl_isolated import MARK, MEMORY_MB, TIMEOUT_ENV, TrlParse, parsed, refusal, timeout_s

_CACHE_SIZE = 64
_cache: OrderedDict[str, str] = OrderedDict()
_lock = threading.Lock()


def parse_isolated(config: dict[str, Any], check_overrides: dict[str, Any] | None = None) -> TrlParse:
    """TRL's parse and check of `config` in the limited subprocess (SpecError when it fails or takes too long)."""
    return _parse(config, check_overrides, sandboxed=True)


def parse_local(config: dict[str, Any], check_overrides: dict[str, Any] | None = None) -> TrlParse:
    """TRL's parse and check of the local user's own recipe in a plain subprocess with the time limit, so the
    dashboard process never imports trl (it sees this machine's files, as the user's own `import-trl` does)."""
    return _parse(config, check_overrides, sandboxed=False)


def _run_plain(request: str, limit: float) -> Any:
    """`python -m grpo_dashboard.spec.trl_isolated` as a child of this process, this package importable."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    from grpo_dashboard.checks.sandbox import REPO_ROOT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "grpo_dashboard.spec.trl_isolated"],
            input=request,
            capture_output=True,
            text=True,
            timeout=limit,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return SimpleNamespace(timed_out=True)
    return SimpleNamespace(
        timed_out=False, ok=done.returncode == 0, stdout=done.stdout, stderr=done.stderr, memory_exceeded=False
    )


def _parse(config: dict[str, Any], check_overrides: dict[str, Any] | None, sandboxed: bool) -> TrlParse:
    from grpo_dashboard.checks import sandbox

    request = json.dumps({"config": config, "check_overrides": check_overrides or {}}, sort_keys=True, default=str)
    key = f"{sandboxed}:{request}"
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        limit = timeout_s()
        # torch loads its libraries with ctypes, which the sandbox counts with process spawning: allowed here, the
        # boundary (namespaces, no network, limits) stays.
        result = (
            sandbox.run_module(
                "grpo_dashboard.spec.trl_isolated",
                stdin=request,
                timeout_s=limit,
                memory_mb=MEMORY_MB,
                allow_subprocess=True,
            )
            if sandboxed
            else _run_plain(request, limit)
        )
        if result.timed_out:
            raise refusal(
                f"took longer than {limit:g} s and was stopped (it runs in a limited subprocess). Try "
                f"again, or import the recipe with `python -m grpo_dashboard import-trl`; the dashboard's "
                f"owner can raise the limit with {TIMEOUT_ENV}."
            )
        line = next((x for x in reversed(result.stdout.splitlines()) if x.startswith(MARK)), None)
        if not result.ok or line is None:
            if result.memory_exceeded:
                raise refusal(f"needed more than {MEMORY_MB} MB and was stopped. Check the recipe's values.")
            last = next((x for x in reversed(result.stderr.strip().splitlines()) if x.strip()), "no output")
            raise refusal(f"failed: {shorten(last.strip(), 300)}. Fix the recipe's values.")
        hit = line[len(MARK) :]
        with _lock:
            _cache[key] = hit
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return parsed(hit)
