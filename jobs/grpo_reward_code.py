"""The code rewards of the built-in registry: `code_tests` (the completion's Python against the row's unit tests,
in the sandbox) and `python` (the user's own reward written inline in the spec).

Ships beside `grpo_rewards.py`, which lists these (`code_rewards`, `inline_rewards`); imports nothing from
`grpo_dashboard`.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_answers import _ANSWER_TAG, _FENCE
from grpo_reward_base import RewardDef, RewardFunc, as_float, column, completion_text, define, is_name, is_num, need
from grpo_sandbox import run_tests


def extract_code(text: str) -> str:
    """The program in a completion: the last ```python fence (else the last fence), else the text if it looks like
    code, else an empty string."""
    blocks = _FENCE.findall(text)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3", "")]
    if python or blocks:
        return (python or [body for _, body in blocks])[-1]
    tag = _ANSWER_TAG.findall(text)
    body = tag[-1] if tag else text
    return body if re.search(r"^\s*(def |class |import |from \S+ import |print\()", body, re.MULTILINE) else ""


def parse_tests(value: Any, entry_point: str | None = None) -> tuple[str, list[Any]]:
    """Unit tests from a dataset value: ('asserts', [code, ...]) or ('io', [(stdin, expected_stdout), ...]).

    Accepts a code string (HumanEval `check(...)` with `entry_point`), a list of assert strings (MBPP `test_list`),
    a list of {input, output} cases, {inputs: [...], outputs: [...]} (APPS), or any of these as a JSON string.
    """
    if value is None or value == "" or value == []:
        return "none", []
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "[{":
            try:
                return parse_tests(json.loads(text), entry_point)
            except ValueError:
                pass
        return "asserts", [text + (f"\ncheck({entry_point})" if entry_point else "")]
    if isinstance(value, dict):
        if "inputs" in value and "outputs" in value:
            return "io", [(str(i), str(o)) for i, o in zip(value["inputs"], value["outputs"], strict=False)]
        if "input" in value and "output" in value:
            return "io", [(str(value["input"]), str(value["output"]))]
    if isinstance(value, (list, tuple)):
        if all(isinstance(t, str) for t in value):
            return "asserts", list(value)
        if all(isinstance(t, dict) and "input" in t and "output" in t for t in value):
            return "io", [(str(t["input"]), str(t["output"])) for t in value]
    raise ValueError(
        f"unsupported tests value of type {type(value).__name__}: give assert strings, a test script, "
        f"[{{input, output}}, ...] or {{inputs, outputs}}."
    )


def _code_tests(
    tests_column: str = "tests",
    entry_point_column: str | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_cases: int = 20,
    workers: int = 4,
) -> RewardFunc:
    timeout_s = as_float(timeout_s)
    need(is_name(tests_column), "code_tests", "tests_column", tests_column, "a dataset column name")
    need(
        entry_point_column is None or is_name(entry_point_column),
        "code_tests",
        "entry_point_column",
        entry_point_column,
        "null or a dataset column name",
    )
    need(is_num(timeout_s) and 0 < timeout_s <= 600, "code_tests", "timeout_s", timeout_s, "seconds in (0, 600]")
    need(isinstance(memory_mb, int) and memory_mb >= 64, "code_tests", "memory_mb", memory_mb, "an integer >= 64")
    need(isinstance(max_cases, int) and max_cases >= 1, "code_tests", "max_cases", max_cases, "an integer >= 1")
    need(isinstance(workers, int) and 1 <= workers <= 64, "code_tests", "workers", workers, "an integer in 1..64")

    def one(text: str, tests_value: Any, entry: Any) -> float | None:
        try:
            kind, tests = parse_tests(tests_value, str(entry) if entry else None)
        except ValueError:
            return None
        if not tests:
            return None
        code = extract_code(text)
        if not code.strip():
            return 0.0
        return run_tests(code, kind, tests[:max_cases], float(timeout_s), memory_mb)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        tests = column(kwargs, tests_column, "code_tests")
        entries = column(kwargs, entry_point_column, "code_tests") if entry_point_column else [None] * len(tests)
        texts = [completion_text(c) for c in completions]
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, texts, tests, entries))

    return reward


# ---------------------------------------------------------------- custom code


def _python_inline(code: str = "", function: str = "reward", args: dict[str, Any] | None = None) -> RewardFunc:
    """Inline reward code. Building it only parses the code (never runs it); it runs on the first call, in the job."""
    need(
        isinstance(code, str) and bool(code.strip()),
        "python",
        "code",
        code,
        "Python source defining a function with TRL's reward signature (completions, **kwargs)",
    )
    need(isinstance(args, dict) or args is None, "python", "args", args, "a mapping of extra keyword arguments")
    try:
        tree = ast.parse(code, "<reward code>")
    except SyntaxError as exc:
        raise ValueError(f"python: params.code has a syntax error at line {exc.lineno}: {exc.msg}.") from exc
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names = set(defs) | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    need(
        function in names,
        "python",
        "function",
        function,
        f"a name defined at the top level of params.code (found {sorted(names) or 'none'})",
    )
    state: dict[str, Any] = {}

    def load() -> Callable[..., Any]:
        if "fn" not in state:
            namespace: dict[str, Any] = {"__name__": "grpo_inline_reward"}
            exec(compile(tree, "<reward code>", "exec"), namespace)  # the user's own reward, in the job
            state["fn"] = namespace[function]
        return state["fn"]

    if isinstance(defs.get(function), ast.AsyncFunctionDef):

        async def areward(*a: Any, **kw: Any) -> list[float | None]:
            return await load()(*a, **{**(args or {}), **kw})

        return areward

    def reward(*a: Any, **kw: Any) -> list[float | None]:
        return load()(*a, **{**(args or {}), **kw})

    return reward


def code_rewards() -> list[RewardDef]:
    """The unit-test reward's registry entry."""
    return [
        define(
            "code_tests",
            _code_tests,
            "code",
            "Runs the completion's Python (last ```python block) against the row's "
            "unit tests in a sandbox (time and memory limits, no network, no secrets): the fraction passed; None "
            "without tests.",
            {
                "tests_column": ("tests", "dataset column with asserts, a test script, or io cases"),
                "entry_point_column": (None, "column naming the function for HumanEval's check()"),
                "timeout_s": (5.0, "seconds per completion (per case for io tests)"),
                "memory_mb": (512, "address-space limit per run"),
                "max_cases": (20, "at most this many tests per row"),
                "workers": (4, "completions tested in parallel"),
            },
            ("tests",),
        ),
    ]


def inline_rewards() -> list[RewardDef]:
    """The inline custom reward's registry entry."""
    return [
        define(
            "python",
            _python_inline,
            "custom",
            "Your own reward written inline: `code` defines `function` with TRL's "
            "signature (completions, **kwargs) -> list[float | None]; runs only in the job.",
            {
                "code": ("", "Python source"),
                "function": ("reward", "the function's name in the code"),
                "args": (None, "extra keyword arguments passed to it"),
            },
        ),
    ]
