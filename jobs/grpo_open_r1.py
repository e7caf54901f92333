"""open-r1's code rewards (`code`, `binary_code`) as built-ins that run in this job's own sandbox.

open-r1 (src/open_r1/rewards.py, `code_reward`) sends each completion's last ```python block to an E2B/Morph sandbox
with the row's `verification_info` ({"language": ..., "test_cases": [{"input", "output"}, ...]}): every case runs
as `python3 -c code` with the case's stdin and a 5 s limit; a case passes when the exit status is 0 and each line of
the stripped stdout equals the expected output's line at the same place (both stripped, compared up to the shorter
of the two, as its `zip` does); the reward is the fraction of cases passed. `binary_code` gives 1.0 above 0.99 of
them. Here the program runs in `grpo_sandbox.run_sandboxed` (time and memory limits, no network, no secrets)
instead of a remote provider, so no E2B key or router is needed. Ships beside `grpo_rewards.py`, which lists these.

Also open-r1's `length` reward (`len_reward`, after Kimi 1.5), which needs each completion's correctness.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_answers import math_correct
from grpo_reward_base import as_float, check_params, column, completion_text, is_name, is_num, need
from grpo_sandbox import run_sandboxed

BINARY_THRESHOLD = 0.99  # open-r1's binary_code_reward


def extract_code(text: str, language: str = "python") -> str:
    """open-r1's extract_code: the body of the last ```<language> fence ("" without one)."""
    matches = re.findall(rf"```{re.escape(language)}\n(.*?)```", text, re.DOTALL)
    return matches[-1] if matches else ""


def same_lines(stdout: str, expected: str) -> bool:
    """open-r1's comparison: stripped lines equal pairwise, up to the shorter of the two outputs."""
    return all(a.strip() == b.strip() for a, b in zip(stdout.strip().split("\n"), expected.split("\n"), strict=False))


def test_cases(value: Any) -> tuple[str, list[dict[str, Any]]]:
    """(language, cases) of a `verification_info` value (a mapping, or the same as JSON text)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict) or not isinstance(value.get("test_cases"), list):
        raise ValueError("verification_info must be a mapping with `test_cases`: [{input, output}, ...]")
    return str(value.get("language") or "python"), list(value["test_cases"])


def _code_reward(
    tests_column: str = "verification_info",
    binary: bool = False,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    workers: int = 2,
) -> Callable[..., list[float | None]]:
    timeout_s = as_float(timeout_s)
    check_params(
        "open_r1_code",
        ("tests_column", tests_column, is_name(tests_column), "a dataset column name"),
        ("binary", binary, isinstance(binary, bool), "true or false"),
        ("timeout_s", timeout_s, is_num(timeout_s) and 0 < timeout_s <= 600, "seconds in (0, 600]"),
        ("memory_mb", memory_mb, isinstance(memory_mb, int) and memory_mb >= 64, "an integer >= 64"),
        ("workers", workers, isinstance(workers, int) and 1 <= workers <= 64, "an integer in 1..64"),
    )

    def one(text: str, info: Any) -> float | None:
        try:
            language, cases = test_cases(info)
        except ValueError:
            return None
        if language != "python":
            return None  # the sandbox runs Python only; open-r1 sends other languages to E2B
        if not cases:
            return 0.0
        code = extract_code(text)
        passed = 0
        for case in cases:
            res = run_sandboxed(
                code, stdin=str(case.get("input", "")), timeout_s=float(timeout_s), memory_mb=memory_mb
            )
            passed += res.ok and same_lines(res.stdout, str(case.get("output", "")))
        rate = passed / len(cases)
        return (1.0 if rate > BINARY_THRESHOLD else 0.0) if binary else rate

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        infos = column(kwargs, tests_column, "open_r1_code", "tests_column")
        texts = [completion_text(c) for c in completions]
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, texts, infos))

    return reward


def length_scores(lengths: list[int], correct: list[bool]) -> list[float]:
    """open-r1's len_reward on lengths and verdicts: lambda = 0.5 - (len - min) / (max - min) for a correct
    completion, min(0, lambda) for a wrong one; 0.0 for all when every length is the same."""
    low, high = min(lengths, default=0), max(lengths, default=0)
    if high == low:
        return [0.0] * len(lengths)
    lambdas = [0.5 - (n - low) / (high - low) for n in lengths]
    return [lam if ok else min(0.0, lam) for lam, ok in zip(lambdas, correct, strict=True)]


def _length_reward(solution_column: str = "solution") -> Callable[..., list[float | None]]:
    need(is_name(solution_column), "open_r1_length", "solution_column", solution_column, "a dataset column name")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        solutions = column(kwargs, solution_column, "open_r1_length", "solution_column")
        texts = [completion_text(c) for c in completions]
        # open-r1 counts a completion whose gold answer does not parse as correct, so as not to penalise it.
        correct = [math_correct(t, s) is not False for t, s in zip(texts, solutions, strict=True)]
        return list(length_scores([len(t) for t in texts], correct))

    return reward


def code_rewards(define: Callable[..., Any]) -> list[Any]:
    """open-r1's code rewards as `grpo_rewards.RewardDef`s (`define` is grpo_rewards' own constructor)."""
    return [
        define(
            "open_r1_code",
            _code_reward,
            "code",
            "open-r1's `code` reward: the last ```python block run on the row's verification_info test cases "
            "(stdin → stdout, line by line) in the sandbox; the fraction passed (binary: 1.0 above 0.99).",
            {
                "tests_column": ("verification_info", "column with {language, test_cases: [{input, output}]}"),
                "binary": (False, "open-r1's binary_code: 1.0 when more than 99 % of the cases pass, else 0.0"),
                "timeout_s": (5.0, "seconds per test case (open-r1: 5)"),
                "memory_mb": (512, "address-space limit per run"),
                "workers": (2, "completions tested in parallel (open-r1's parallel_code_exec_per_proc)"),
            },
            ("verification_info",),
        ),
        define(
            "open_r1_length",
            _length_reward,
            "length",
            "open-r1's `length` reward (Kimi 1.5): with lambda = 0.5 - (len - min) / (max - min) over the batch's "
            "lengths in characters, lambda for a correct answer (math-verify, as math_accuracy; an unparseable "
            "solution counts as correct), min(0, lambda) for a wrong one; 0.0 for all when the lengths are equal.",
            {"solution_column": ("solution", "dataset column with the reference solution")},
            ("solution",),
        ),
    ]
