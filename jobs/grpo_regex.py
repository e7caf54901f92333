"""The built-in `regex` reward's matching: users' patterns run under a time limit (the `regex` package, a
transformers dependency), so a pattern that backtracks catastrophically (`^(.|..)*!$`, `(a+)+$`) costs at most
MATCH_TIMEOUT_S per completion and CALL_BUDGET_S per reward call, and says so, instead of burning a core.

Ships beside `grpo_rewards.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

MATCH_TIMEOUT_S = 0.1  # one completion (the `regex` package may overshoot it by a few tens of ms)
CALL_BUDGET_S = 1.0  # one reward call: once used up, the call's remaining completions are not matched


def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled with DOTALL by the `regex` package (Python `re` syntax and more).

    ValueError when it is not a valid expression or the package is missing (both say what to do).
    """
    try:
        import regex
    except ImportError as exc:
        raise ValueError(
            "regex: running a user's pattern under a time limit needs the `regex` package (installed "
            "with transformers); pip install regex."
        ) from exc
    try:
        return regex.compile(pattern, regex.DOTALL)
    except (regex.error, ValueError, TypeError) as exc:
        raise ValueError(f"regex: params.pattern = {pattern!r} is not a valid regular expression ({exc}).") from exc


def timed_matcher(compiled: Any, full: bool) -> Callable[[list[str]], list[float | None]]:
    """A function scoring texts 1.0 (match), 0.0 (no match) or None (not decided within the time limits).

    Each match may take MATCH_TIMEOUT_S; a call stops matching once CALL_BUDGET_S has passed, and every text it did
    not decide gets None (TRL then leaves that completion's reward out) and is counted in one message on stderr.
    """
    match = compiled.fullmatch if full else compiled.search

    def score(texts: list[str]) -> list[float | None]:
        out: list[float | None] = []
        deadline = time.monotonic() + CALL_BUDGET_S
        undecided = 0
        for text in texts:
            left = deadline - time.monotonic()
            if left <= 0:
                out.append(None)
                undecided += 1
                continue
            try:
                out.append(1.0 if match(text, timeout=min(MATCH_TIMEOUT_S, left)) else 0.0)
            except TimeoutError:
                out.append(None)
                undecided += 1
        if undecided:
            print(
                f"regex reward: pattern {compiled.pattern[:80]!r} was stopped on {undecided} of {len(texts)} "
                f"completion(s) after {MATCH_TIMEOUT_S:g} s each ({CALL_BUDGET_S:g} s per call at most); they score "
                f"None (not judged). The pattern backtracks catastrophically (nested or overlapping repeats such "
                f"as (a|aa)* or (a+)+): rewrite it without them.",
                file=sys.stderr,
                flush=True,
            )
        return out

    return score
