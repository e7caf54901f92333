"""Built-in reward functions for GRPO jobs, usable from a run spec by name, with parameters and a weight.

This module ships beside `grpo_job.py` and imports nothing from `grpo_dashboard`: the same file runs inside the
training job (locally or on Hugging Face Jobs) and is read by the dashboard for validation (names, parameters,
required dataset columns) and for the reward contract check. Every reward follows TRL's signature
`f(prompts, completions, **kwargs) -> list[float | None]`, accepts both standard (str) and conversational
(message list) completions, and returns one float or None (cannot judge) per completion. Heavy imports
(math_verify, trl, jsonschema) happen inside the functions.

Families (`RewardDef.kind`): format, accuracy, length, code, structured, custom. The code reward runs completions
with `grpo_sandbox.run_sandboxed` (a subprocess with time and memory limits, a minimal environment, a temporary
working directory and no network); text helpers live in `grpo_answers.py`. All `jobs/*.py` files ship together.
"""

from __future__ import annotations

import ast
import concurrent.futures
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_agents
import grpo_codeforces
import grpo_open_r1
import grpo_regex
from grpo_answers import (  # noqa: F401 - re-exported for the dashboard and tests
    _ANSWER_TAG,
    _FENCE,
    EXTRACT_MODES,
    extract_answer,
    extract_json,
    gold_answer,
    last_boxed,
    math_correct,
    normalize_text,
    parse_number,
    schema_validator,
)
from grpo_sandbox import (  # noqa: F401 - re-exported for the dashboard and tests
    SandboxResult,
    isolation_prefix,
    run_sandboxed,
    run_tests,
    sandbox_env,
)

RewardFunc = Callable[..., list[float | None]]
KINDS = ("format", "accuracy", "length", "code", "structured", "custom", "other")


def completion_text(completion: Any) -> str:
    """Return the text of a completion, standard (str) or conversational (list of messages)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, dict):
            return str(last.get("content") or "")
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    return "" if completion is None else str(completion)


@dataclass(frozen=True)
class RewardDef:
    """A built-in reward: a factory taking the spec's params and returning a TRL reward function.

    `params` holds every allowed parameter with its default; `help` one line per parameter; `kind` the family the
    contract check uses for its expectations; `columns` the dataset columns read with default params.
    """

    name: str
    factory: Callable[..., RewardFunc]
    description: str
    columns: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    kind: str = "other"
    help: dict[str, str] = field(default_factory=dict)


def _need(ok: bool, reward: str, param: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{reward}: params.{param} = {value!r} is invalid; it must be {allowed}.")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _float(v: Any) -> Any:
    """YAML 1.1 reads `1e-6` as a string: accept numeric strings for float parameters."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _column(kwargs: dict[str, Any], column: str, reward: str) -> list[Any]:
    values = kwargs.get(column)
    if values is None:
        have = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric", "completion_ids"))
        raise KeyError(
            f"{reward} reads the dataset column {column!r}, which was not passed (columns: {have}). "
            f"Add the column or set the reward's *_column parameter."
        )
    return list(values)


# ---------------------------------------------------------------- smoke / test rewards


def _letter_fraction(letter: str = "a") -> RewardFunc:
    _need(isinstance(letter, str) and len(letter) == 1, "letter_fraction", "letter", letter, "a single character")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c in completions:
            text = completion_text(c)
            out.append(text.count(letter) / len(text) if text else 0.0)
        return out

    return reward


def _constant(value: float = 0.0) -> RewardFunc:
    value = _float(value)
    _need(_is_num(value), "constant", "value", value, "a finite number")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [float(value)] * len(completions)

    return reward


# ---------------------------------------------------------------- format

_THINK_STRICT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>\n?$", re.DOTALL)
_THINK_LENIENT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)


def _think_format(strict: bool = False) -> RewardFunc:
    _need(isinstance(strict, bool), "think_format", "strict", strict, "true or false")
    pattern = _THINK_STRICT if strict else _THINK_LENIENT

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [1.0 if pattern.search(completion_text(c)) else 0.0 for c in completions]

    return reward


def _regex_match(pattern: str = "", full: bool = False) -> RewardFunc:
    _need(
        isinstance(pattern, str) and bool(pattern),
        "regex",
        "pattern",
        pattern,
        "a non-empty regular expression, e.g. '<answer>.*</answer>'",
    )
    _need(isinstance(full, bool), "regex", "full", full, "true or false")
    score = grpo_regex.timed_matcher(grpo_regex.compile_pattern(pattern), full)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return score([completion_text(c) for c in completions])

    return reward


def _as_messages(completions: list[Any]) -> list[list[dict[str, str]]]:
    return [c if isinstance(c, list) else [{"role": "assistant", "content": completion_text(c)}] for c in completions]


def _trl_think_format() -> RewardFunc:
    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import think_format_reward

        return think_format_reward(_as_messages(completions))

    return reward


# ---------------------------------------------------------------- accuracy


def _math_accuracy(solution_column: str = "solution") -> RewardFunc:
    _need(
        isinstance(solution_column, str) and bool(solution_column),
        "math_accuracy",
        "solution_column",
        solution_column,
        "a dataset column name",
    )

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        solutions = _column(kwargs, solution_column, "math_accuracy")
        verdicts = [math_correct(completion_text(c), s) for c, s in zip(completions, solutions, strict=True)]
        return [None if v is None else float(v) for v in verdicts]

    return reward


def _trl_accuracy(solution_column: str = "solution", reasoning: bool = False) -> RewardFunc:
    _need(
        isinstance(solution_column, str) and bool(solution_column),
        "trl_accuracy",
        "solution_column",
        solution_column,
        "a dataset column name",
    )

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import accuracy_reward, reasoning_accuracy_reward

        fn = reasoning_accuracy_reward if reasoning else accuracy_reward
        solutions = [str(s) for s in _column(kwargs, solution_column, "trl_accuracy")]
        return fn(_as_messages(completions), solutions)

    return reward


def _check_extract(name: str, extract: str) -> None:
    _need(extract in EXTRACT_MODES, name, "extract", extract, f"one of {list(EXTRACT_MODES)}")


def _exact_match(answer_column: str = "answer", normalize: bool = True, extract: str = "auto") -> RewardFunc:
    _need(
        isinstance(answer_column, str) and bool(answer_column),
        "exact_match",
        "answer_column",
        answer_column,
        "a dataset column name",
    )
    _need(isinstance(normalize, bool), "exact_match", "normalize", normalize, "true or false")
    _check_extract("exact_match", extract)
    norm = normalize_text if normalize else str.strip

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c, gold in zip(completions, _column(kwargs, answer_column, "exact_match"), strict=True):
            want = norm(gold_answer(gold))
            out.append(None if not want else float(norm(extract_answer(completion_text(c), extract)) == want))
        return out

    return reward


def _numeric_match(
    answer_column: str = "answer", rel_tol: float = 1e-6, abs_tol: float = 1e-9, extract: str = "auto"
) -> RewardFunc:
    rel_tol, abs_tol = _float(rel_tol), _float(abs_tol)
    _need(
        isinstance(answer_column, str) and bool(answer_column),
        "numeric_match",
        "answer_column",
        answer_column,
        "a dataset column name",
    )
    _need(_is_num(rel_tol) and rel_tol >= 0, "numeric_match", "rel_tol", rel_tol, "a number >= 0, e.g. 1e-6")
    _need(_is_num(abs_tol) and abs_tol >= 0, "numeric_match", "abs_tol", abs_tol, "a number >= 0, e.g. 0.01")
    _check_extract("numeric_match", extract)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c, gold in zip(completions, _column(kwargs, answer_column, "numeric_match"), strict=True):
            want = gold if _is_num(gold) else parse_number(gold_answer(gold))
            if want is None:
                out.append(None)
                continue
            got = parse_number(extract_answer(completion_text(c), extract))
            out.append(1.0 if got is not None and math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol) else 0.0)
        return out

    return reward


def _multiple_choice(answer_column: str = "answer", choices: str = "ABCD", extract: str = "auto") -> RewardFunc:
    _need(
        isinstance(answer_column, str) and bool(answer_column),
        "multiple_choice",
        "answer_column",
        answer_column,
        "a dataset column name",
    )
    _need(
        isinstance(choices, str)
        and choices.isalpha()
        and choices.isupper()
        and len(set(choices)) == len(choices)
        and len(choices) >= 2,
        "multiple_choice",
        "choices",
        choices,
        "distinct upper-case letters, e.g. 'ABCD'",
    )
    _check_extract("multiple_choice", extract)
    letters = re.escape(choices)
    alone = re.compile(rf"^\W*([{letters}])\W*$|^\(?([{letters}])[.:)]\s")
    stated = re.compile(rf"(?:answer|option|choice)\s*(?:is|:)?\s*:?\s*\(?([{letters}])\b")

    def letter(text: str) -> str | None:
        ans = extract_answer(text, extract).strip()
        m = alone.match(ans.upper() if len(ans) == 1 else ans) or stated.search(text)
        return next(g for g in m.groups() if g) if m else None

    def gold_letter(value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return choices[value] if 0 <= value < len(choices) else None
        text = gold_answer(value)
        if text.isdigit() and int(text) < len(choices) and text not in choices:
            return choices[int(text)]
        m = alone.match(text.upper())
        return next(g for g in m.groups() if g) if m else None

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c, gold in zip(completions, _column(kwargs, answer_column, "multiple_choice"), strict=True):
            want = gold_letter(gold)
            out.append(None if want is None else float(letter(completion_text(c)) == want))
        return out

    return reward


# ---------------------------------------------------------------- length

LENGTH_UNITS = ("tokens", "words", "chars")
_APPROX_TOKEN = re.compile(r"\w+|[^\w\s]")


def _units(completions: list[Any], kwargs: dict[str, Any], unit: str) -> list[list[Any]]:
    """Each completion as a list of units; tokens are TRL's completion_ids, or an approximation when absent."""
    ids = kwargs.get("completion_ids")
    if unit == "tokens" and ids is not None and len(ids) == len(completions):
        return [list(i) for i in ids]
    texts = [completion_text(c) for c in completions]
    if unit == "chars":
        return [list(t) for t in texts]
    if unit == "words":
        return [t.split() for t in texts]
    return [_APPROX_TOKEN.findall(t) for t in texts]


def _check_unit(name: str, unit: str) -> None:
    _need(unit in LENGTH_UNITS, name, "unit", unit, f"one of {list(LENGTH_UNITS)}")


def _target_length(target: int = 256, tolerance: int = 0, unit: str = "tokens") -> RewardFunc:
    _need(isinstance(target, int) and target > 0, "target_length", "target", target, "a positive integer")
    _need(isinstance(tolerance, int) and tolerance >= 0, "target_length", "tolerance", tolerance, "an integer >= 0")
    _check_unit("target_length", unit)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [
            1.0 - min(1.0, max(0, abs(len(u) - target) - tolerance) / target)
            for u in _units(completions, kwargs, unit)
        ]

    return reward


def _soft_overlong(max_completion_len: int = 256, soft_punish_cache: int = 64, unit: str = "tokens") -> RewardFunc:
    _need(
        isinstance(max_completion_len, int) and max_completion_len > 0,
        "soft_overlong",
        "max_completion_len",
        max_completion_len,
        "a positive integer (usually training.max_completion_length)",
    )
    _need(
        isinstance(soft_punish_cache, int) and 0 < soft_punish_cache <= max_completion_len,
        "soft_overlong",
        "soft_punish_cache",
        soft_punish_cache,
        f"an integer in 1..max_completion_len ({max_completion_len})",
    )
    _check_unit("soft_overlong", unit)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import get_soft_overlong_punishment

        fn = get_soft_overlong_punishment(max_completion_len, soft_punish_cache)
        return [float(v) for v in fn(completion_ids=_units(completions, kwargs, unit))]

    return reward


def _repetition_penalty(ngram_size: int = 3, max_penalty: float = -1.0, unit: str = "tokens") -> RewardFunc:
    max_penalty = _float(max_penalty)
    _need(
        isinstance(ngram_size, int) and ngram_size >= 1,
        "repetition_penalty",
        "ngram_size",
        ngram_size,
        "a positive integer, e.g. 3",
    )
    _need(
        _is_num(max_penalty) and max_penalty <= 0,
        "repetition_penalty",
        "max_penalty",
        max_penalty,
        "a number <= 0, e.g. -1.0",
    )
    _check_unit("repetition_penalty", unit)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import get_repetition_penalty_reward

        fn = get_repetition_penalty_reward(ngram_size=ngram_size, max_penalty=float(max_penalty))
        return [float(v) for v in fn(_units(completions, kwargs, unit))]

    return reward


def _cosine_scaled(
    max_len: int = 256,
    solution_column: str = "solution",
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    unit: str = "tokens",
) -> RewardFunc:
    min_value_wrong, max_value_wrong = _float(min_value_wrong), _float(max_value_wrong)
    min_value_correct, max_value_correct = _float(min_value_correct), _float(max_value_correct)
    _need(isinstance(max_len, int) and max_len > 0, "cosine_scaled", "max_len", max_len, "a positive integer")
    for pname, v in (
        ("min_value_wrong", min_value_wrong),
        ("max_value_wrong", max_value_wrong),
        ("min_value_correct", min_value_correct),
        ("max_value_correct", max_value_correct),
    ):
        _need(_is_num(v), "cosine_scaled", pname, v, "a finite number")
    _check_unit("cosine_scaled", unit)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import get_cosine_scaled_reward

        fn = get_cosine_scaled_reward(max_len, min_value_wrong, max_value_wrong, min_value_correct, max_value_correct)
        solutions = [str(s) for s in _column(kwargs, solution_column, "cosine_scaled")]
        return fn(_as_messages(completions), solutions, _units(completions, kwargs, unit))

    return reward


def _json_valid(schema: Any = None, schema_column: str | None = None, partial_credit: float = 0.5) -> RewardFunc:
    partial_credit = _float(partial_credit)
    _need(
        _is_num(partial_credit) and 0 <= partial_credit <= 1,
        "json_valid",
        "partial_credit",
        partial_credit,
        "a number in [0, 1] (the reward for valid JSON that fails the schema)",
    )
    _need(
        schema_column is None or isinstance(schema_column, str) and bool(schema_column),
        "json_valid",
        "schema_column",
        schema_column,
        "null or a dataset column holding one JSON schema per row",
    )
    fixed = schema_validator(schema) if schema is not None else None

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        schemas = _column(kwargs, schema_column, "json_valid") if schema_column else [None] * len(completions)
        out: list[float | None] = []
        for c, row_schema in zip(completions, schemas, strict=True):
            ok, value = extract_json(completion_text(c))
            check = schema_validator(row_schema) if row_schema not in (None, "") else fixed
            out.append(0.0 if not ok else 1.0 if check is None or not check(value) else float(partial_credit))
        return out

    return reward


# ---------------------------------------------------------------- code


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
    timeout_s = _float(timeout_s)
    _need(
        isinstance(tests_column, str) and bool(tests_column),
        "code_tests",
        "tests_column",
        tests_column,
        "a dataset column name",
    )
    _need(
        entry_point_column is None or isinstance(entry_point_column, str) and bool(entry_point_column),
        "code_tests",
        "entry_point_column",
        entry_point_column,
        "null or a dataset column name",
    )
    _need(_is_num(timeout_s) and 0 < timeout_s <= 600, "code_tests", "timeout_s", timeout_s, "seconds in (0, 600]")
    _need(isinstance(memory_mb, int) and memory_mb >= 64, "code_tests", "memory_mb", memory_mb, "an integer >= 64")
    _need(isinstance(max_cases, int) and max_cases >= 1, "code_tests", "max_cases", max_cases, "an integer >= 1")
    _need(isinstance(workers, int) and 1 <= workers <= 64, "code_tests", "workers", workers, "an integer in 1..64")

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
        tests = _column(kwargs, tests_column, "code_tests")
        entries = _column(kwargs, entry_point_column, "code_tests") if entry_point_column else [None] * len(tests)
        texts = [completion_text(c) for c in completions]
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, texts, tests, entries))

    return reward


# ---------------------------------------------------------------- custom code


def _python_inline(code: str = "", function: str = "reward", args: dict[str, Any] | None = None) -> RewardFunc:
    """Inline reward code. Building it only parses the code (never runs it); it runs on the first call, in the job."""
    _need(
        isinstance(code, str) and bool(code.strip()),
        "python",
        "code",
        code,
        "Python source defining a function with TRL's reward signature (completions, **kwargs)",
    )
    _need(isinstance(args, dict) or args is None, "python", "args", args, "a mapping of extra keyword arguments")
    try:
        tree = ast.parse(code, "<reward code>")
    except SyntaxError as exc:
        raise ValueError(f"python: params.code has a syntax error at line {exc.lineno}: {exc.msg}.") from exc
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names = set(defs) | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    _need(
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


# ---------------------------------------------------------------- registry

_EXTRACT_HELP = (
    "where the answer is: auto (<answer> tag, \\boxed{}, '####', 'answer is'), answer_tag, boxed, last_line, full"
)
_UNIT_HELP = "tokens (TRL's completion_ids), words or chars"
_SOL_HELP = "dataset column with the reference solution (GSM8K '... #### 42' is fine)"


def _def(
    name: str,
    factory: Callable[..., RewardFunc],
    kind: str,
    description: str,
    params: dict[str, tuple[Any, str]] | None = None,
    columns: tuple[str, ...] = (),
) -> RewardDef:
    params = params or {}
    return RewardDef(
        name,
        factory,
        description,
        columns,
        {k: v[0] for k, v in params.items()},
        kind,
        {k: v[1] for k, v in params.items()},
    )


REWARDS: dict[str, RewardDef] = {
    d.name: d
    for d in (
        _def(
            "letter_fraction",
            _letter_fraction,
            "other",
            "Fraction of the completion's characters equal to `letter` (smoke task).",
            {"letter": ("a", "the character to count")},
        ),
        _def(
            "constant",
            _constant,
            "other",
            "Always returns `value` (for tests: a reward with no signal).",
            {"value": (0.0, "the value returned for every completion")},
        ),
        _def(
            "think_format",
            _think_format,
            "format",
            "1.0 when the completion has <think>...</think> then "
            "<answer>...</answer> (strict: exactly that, with newlines around the contents), else 0.0.",
            {"strict": (False, "require the exact layout '<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>'")},
        ),
        _def(
            "trl_think_format",
            _trl_think_format,
            "format",
            "TRL's think_format_reward: 1.0 when the completion starts with one <think>...</think> block, else 0.0.",
        ),
        _def(
            "regex",
            _regex_match,
            "format",
            "1.0 when the completion matches `pattern` (search, or the whole text "
            "with full=true), else 0.0; None when the match takes over 0.1 s (1 s per call at most).",
            {
                "pattern": ("", "a Python regular expression (DOTALL), run by the `regex` package under a time limit"),
                "full": (False, "the whole completion must match"),
            },
        ),
        _def(
            "math_accuracy",
            _math_accuracy,
            "accuracy",
            "1.0 when math-verify finds the completion's answer (\\boxed{}, "
            "<answer> tag, LaTeX or a plain number) equal to the solution; None when the solution is unparseable.",
            {"solution_column": ("solution", _SOL_HELP)},
            ("solution",),
        ),
        _def(
            "trl_accuracy",
            _trl_accuracy,
            "accuracy",
            "TRL's accuracy_reward (reasoning=true: "
            "reasoning_accuracy_reward, only after </think>): math-verify on \\boxed{} answers.",
            {"solution_column": ("solution", _SOL_HELP), "reasoning": (False, "only judge the text after </think>")},
            ("solution",),
        ),
        _def(
            "exact_match",
            _exact_match,
            "accuracy",
            "1.0 when the extracted answer equals the answer column "
            "(normalised: case, punctuation, articles, spaces), else 0.0; None for an empty reference.",
            {
                "answer_column": ("answer", "dataset column with the reference answer"),
                "normalize": (True, "compare normalised text (false: exact after stripping spaces)"),
                "extract": ("auto", _EXTRACT_HELP),
            },
            ("answer",),
        ),
        _def(
            "numeric_match",
            _numeric_match,
            "accuracy",
            "1.0 when the last number in the extracted answer equals the "
            "reference number within tolerance (1,234 / 3/4 / \\frac{3}{4} understood); None if the reference has no "
            "number.",
            {
                "answer_column": ("answer", "dataset column with the reference answer"),
                "rel_tol": (1e-6, "relative tolerance"),
                "abs_tol": (1e-9, "absolute tolerance"),
                "extract": ("auto", _EXTRACT_HELP),
            },
            ("answer",),
        ),
        _def(
            "multiple_choice",
            _multiple_choice,
            "accuracy",
            "1.0 when the chosen letter equals the answer column (a letter, '(B)', or a 0-based index), else 0.0.",
            {
                "answer_column": ("answer", "dataset column with the correct letter or index"),
                "choices": ("ABCD", "the allowed letters"),
                "extract": ("auto", _EXTRACT_HELP),
            },
            ("answer",),
        ),
        _def(
            "cosine_scaled",
            _cosine_scaled,
            "accuracy",
            "TRL's cosine-scaled reward: math-verify correctness scaled by "
            "length (short correct answers score most, short wrong ones least).",
            {
                "max_len": (256, "length (in `unit`) where the schedule ends"),
                "solution_column": ("solution", _SOL_HELP),
                "min_value_wrong": (-1.0, "wrong answer, shortest"),
                "max_value_wrong": (-0.5, "wrong answer, longest"),
                "min_value_correct": (0.5, "correct answer, longest"),
                "max_value_correct": (1.0, "correct answer, shortest"),
                "unit": ("tokens", _UNIT_HELP),
            },
            ("solution",),
        ),
        _def(
            "target_length",
            _target_length,
            "length",
            "1 - |length - target| / target (clipped to [0, 1]): 1.0 at the target length.",
            {
                "target": (256, "the ideal length"),
                "tolerance": (0, "no penalty within this distance of the target"),
                "unit": ("tokens", _UNIT_HELP),
            },
        ),
        _def(
            "soft_overlong",
            _soft_overlong,
            "length",
            "DAPO soft overlong punishment (TRL): 0 up to max_completion_len "
            "- soft_punish_cache, then linearly down to -1 at max_completion_len, -1 beyond.",
            {
                "max_completion_len": (256, "usually training.max_completion_length"),
                "soft_punish_cache": (64, "length of the linear penalty zone"),
                "unit": ("tokens", _UNIT_HELP),
            },
        ),
        _def(
            "repetition_penalty",
            _repetition_penalty,
            "length",
            "TRL's n-gram repetition penalty: 0 without repeated "
            "n-grams, down to max_penalty for a fully repetitive completion.",
            {
                "ngram_size": (3, "n-gram size"),
                "max_penalty": (-1.0, "penalty of a fully repetitive completion (<= 0)"),
                "unit": ("tokens", _UNIT_HELP),
            },
        ),
        _def(
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
        _def(
            "json_valid",
            _json_valid,
            "structured",
            "1.0 for valid JSON (whole text, <answer> tag, ```json fence or "
            "outer braces) matching the schema if any; partial_credit for valid JSON failing it; 0.0 otherwise.",
            {
                "schema": (None, "a JSON schema (mapping or JSON text) every completion must match"),
                "schema_column": (None, "dataset column with one JSON schema per row"),
                "partial_credit": (0.5, "reward for valid JSON that fails the schema"),
            },
        ),
        *grpo_agents.process_rewards(_def),
        *grpo_open_r1.code_rewards(_def),
        *grpo_codeforces.cf_rewards(_def),
        _def(
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
    )
}


def required_columns(builtin: str, params: dict[str, Any]) -> list[str]:
    """Dataset columns a built-in reward reads, after its parameters are applied."""
    rdef = REWARDS[builtin]
    merged = {**rdef.params, **(params or {})}
    keys = [k for k in rdef.params if k.endswith("_column")]
    if not keys:
        return list(rdef.columns)
    return [str(merged[k]) for k in keys if merged.get(k)]


def load_custom(function: str, base_dir: str | None = None) -> Callable[..., Any]:
    """Load a user reward from `path/to/file.py:func` or `package.module:func` (or `package.module.func`).

    This executes the user's module: call it only in the job or the sandboxed reward worker.
    """
    if ":" in function:
        target, attr = function.rsplit(":", 1)
    else:
        target, _, attr = function.rpartition(".")
    if not target or not attr:
        raise ValueError(f"Reward function {function!r} must look like 'file.py:func' or 'module:func'.")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_absolute() and base_dir:
            path = Path(base_dir) / path
        if not path.is_file():
            raise FileNotFoundError(f"Reward file {str(path)!r} (from function={function!r}) does not exist.")
        mod_name = f"_grpo_custom_reward_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"Cannot import reward file {str(path)!r}.")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AttributeError(f"Reward function {function!r}: {attr!r} is not a callable in {target!r}.")
    return fn


def build_reward(
    name: str, builtin: str | None, function: str | None, params: dict[str, Any], base_dir: str | None = None
) -> RewardFunc:
    """Build the reward function for one spec entry, named `name` so TRL logs it as `rewards/<name>/mean`."""
    if function:
        inner = load_custom(function, base_dir)
        fn = inner if not params else _bind(inner, params)
    else:
        key = builtin or name
        if key not in REWARDS:
            raise KeyError(f"Unknown reward {key!r}; built-ins are {sorted(REWARDS)}.")
        fn = REWARDS[key].factory(**params)

    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):

        async def named_async(*args: Any, **kwargs: Any) -> list[float | None]:
            return await fn(*args, **kwargs)

        named_async.__name__ = named_async.__qualname__ = name
        return named_async

    return NamedReward(fn, name)


class NamedReward:
    """A reward function under its spec name (TRL logs `rewards/<__name__>/mean`); a top-level class, so it pickles
    whenever the function does (async GRPO sends rewards to a spawned rollout process)."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn, self.__name__ = fn, name

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        out = self.fn(*args, **kwargs)
        trace = os.environ.get(TRACE_ENV)
        if trace:
            record = {"reward": self.__name__, "prompts": kwargs.get("prompts"), "scores": out}
            with open(trace, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")
        return out


TRACE_ENV = "GRPO_REWARD_TRACE"  # a file: each reward call appends its prompts and scores (to compare two runs)


def _bind(fn: Callable[..., Any], params: dict[str, Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        async def abound(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **{**params, **kwargs})

        return abound

    def bound(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{**params, **kwargs})

    return bound
