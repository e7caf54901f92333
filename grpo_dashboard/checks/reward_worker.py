"""Runs one reward function on prepared completion batches. `main()` runs only inside the sandbox (`reward_check`
starts it with `sandbox.run_module("grpo_dashboard.checks.reward_worker", stdin=...)`); importing this module runs
no reward.

stdin: one JSON object `{"reward": {name, builtin, function, params}, "base_dir": str, "batches": [{"case",
"format", "completions", "prompts", "columns": {column: [values]}}]}`.
Results go to the sandbox's report channel (the fd named by GRPO_SANDBOX_REPORT_FD, `run_module(...,
report=True)`), never to stdout, where the reward's own prints go (to stderr, in fact): one JSON line per batch,
written as each finishes (so a timeout keeps the earlier ones): `{"build_error": str}` or `{"case", "format",
"values", "error", "missing_column", "seconds"}`. A reward that prints a result line (its completions may hold one)
cannot pass it off as the worker's.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
import sys
import time
import traceback
from typing import Any

_COLUMN_IN_MESSAGE = re.compile(r"column '([^']+)'")


def _error(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:500]}{where}"


def _missing_column(exc: BaseException, columns: dict[str, Any]) -> str | None:
    if not isinstance(exc, KeyError) or not exc.args or not isinstance(exc.args[0], str):
        return None
    key = exc.args[0]
    m = _COLUMN_IN_MESSAGE.search(key)
    name = m.group(1) if m else key
    return name if name not in columns and " " not in name.strip() else None


def approx_completion_ids(texts: list[str]) -> list[list[int]]:
    """Stand-in token ids (one per word or punctuation mark) for rewards that read `completion_ids`."""
    vocab: dict[str, int] = {}
    return [[vocab.setdefault(t, len(vocab)) for t in re.findall(r"\w+|[^\w\s]", s)] for s in texts]


def _text(c: Any) -> str:
    if isinstance(c, list) and c and isinstance(c[-1], dict):
        return str(c[-1].get("content") or "")
    return c if isinstance(c, str) else ""


def _check_values(out: Any, n: int) -> list[float | None]:
    if not isinstance(out, (list, tuple)):
        raise TypeError(f"returned {type(out).__name__}, not a list of floats/None (one per completion)")
    if len(out) != n:
        raise ValueError(f"returned {len(out)} values for {n} completions; return exactly one per completion")
    values: list[float | None] = []
    for v in out:
        if hasattr(v, "item"):
            v = v.item()
        if v is None or (isinstance(v, float) and math.isnan(v)):
            values.append(None)
        elif isinstance(v, (int, float)):
            values.append(float(v))
        else:
            raise TypeError(f"returned a {type(v).__name__} ({v!r:.60}); each value must be a float or None")
    return values


def run_batch(fn: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """Call the reward once on one batch, TRL-style (keywords only), and describe the outcome."""
    completions = batch["completions"]
    columns = batch.get("columns") or {}
    kwargs = {
        **columns,
        "prompts": batch["prompts"],
        "completions": completions,
        "completion_ids": approx_completion_ids([_text(c) for c in completions]),
        "trainer_state": None,
        "log_extra": lambda *a, **k: None,
        "log_metric": lambda *a, **k: None,
    }
    result: dict[str, Any] = {
        "case": batch["case"],
        "format": batch["format"],
        "values": None,
        "error": None,
        "missing_column": None,
    }
    start = time.perf_counter()
    try:
        out = fn(**kwargs)
        if inspect.isawaitable(out):
            out = asyncio.run(_await(out))
        result["values"] = _check_values(out, len(completions))
    except BaseException as exc:  # the user's reward may raise anything, SystemExit included
        result["error"] = _error(exc)
        result["missing_column"] = _missing_column(exc, columns)
    result["seconds"] = time.perf_counter() - start
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def main() -> int:
    """Read the request from stdin, run every batch, write one JSON line per result to the report channel."""
    from grpo_dashboard.checks.sandbox import report_channel

    out = report_channel("reward_worker")
    request = json.loads(sys.stdin.read())
    sys.stdout = sys.stderr  # the reward's own prints go to the log tail

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, default=repr) + "\n")
        out.flush()

    from grpo_dashboard.spec.jobfiles import rewards_module

    r = request["reward"]
    try:
        fn = rewards_module().build_reward(
            r["name"], r.get("builtin"), r.get("function"), dict(r.get("params") or {}), request.get("base_dir")
        )
    except BaseException as exc:
        emit({"build_error": _error(exc)})
        return 0
    batches = request["batches"]
    if batches and request.get("warmup", True):
        first = batches[0]
        run_batch(
            fn,
            {
                **first,
                "completions": first["completions"][:1],
                "prompts": first["prompts"][:1],
                "columns": {k: v[:1] for k, v in (first.get("columns") or {}).items()},
            },
        )
    for batch in batches:
        emit(run_batch(fn, batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
