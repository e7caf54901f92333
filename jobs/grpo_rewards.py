"""Built-in reward functions for GRPO jobs, usable from a run spec by name, with parameters and a weight.

This module ships beside `grpo_job.py` and imports nothing from `grpo_dashboard`: the same file runs inside the
training job (locally or on Hugging Face Jobs) and is read by the dashboard for validation (names, parameters,
required dataset columns) and for the reward contract check. Every reward follows TRL's signature
`f(prompts, completions, **kwargs) -> list[float | None]`, accepts both standard (str) and conversational
(message list) completions, and returns one float or None (cannot judge) per completion. Heavy imports
(math_verify, trl, jsonschema) happen inside the functions.

Families (`RewardDef.kind`): format, accuracy, length, code, structured, custom. This module holds the smoke,
format and structured rewards and assembles the registry (`REWARDS`) from the family modules beside it:
`grpo_reward_accuracy`, `grpo_reward_length`, `grpo_reward_code` (the unit-test reward runs completions with
`grpo_sandbox.run_sandboxed`: a subprocess with time and memory limits, a minimal environment, a temporary working
directory and no network; and the inline custom reward), `grpo_agents` (process rewards), `grpo_open_r1` and
`grpo_codeforces`; what they share is `grpo_reward_base`, text helpers are `grpo_answers`. All `jobs/*.py` files
ship together.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_agents
import grpo_codeforces
import grpo_open_r1
import grpo_regex
import grpo_reward_accuracy
import grpo_reward_code
import grpo_reward_length
from grpo_answers import (  # noqa: F401 - re-exported for the dashboard and tests
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
from grpo_reward_base import (  # noqa: F401 - re-exported for the dashboard and tests
    KINDS,
    RewardDef,
    RewardFunc,
    as_float,
    as_messages,
    column,
    completion_text,
    define,
    is_name,
    is_num,
    need,
)
from grpo_reward_code import extract_code, parse_tests  # noqa: F401 - re-exported for the dashboard and tests
from grpo_sandbox import (  # noqa: F401 - re-exported for the dashboard and tests
    SandboxResult,
    isolation_prefix,
    run_sandboxed,
    run_tests,
    sandbox_env,
)


def _letter_fraction(letter: str = "a") -> RewardFunc:
    need(isinstance(letter, str) and len(letter) == 1, "letter_fraction", "letter", letter, "a single character")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c in completions:
            text = completion_text(c)
            out.append(text.count(letter) / len(text) if text else 0.0)
        return out

    return reward


def _constant(value: float = 0.0) -> RewardFunc:
    value = as_float(value)
    need(is_num(value), "constant", "value", value, "a finite number")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [float(value)] * len(completions)

    return reward


# ---------------------------------------------------------------- format

_THINK_STRICT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>\n?$", re.DOTALL)
_THINK_LENIENT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)


def _think_format(strict: bool = False) -> RewardFunc:
    need(isinstance(strict, bool), "think_format", "strict", strict, "true or false")
    pattern = _THINK_STRICT if strict else _THINK_LENIENT

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [1.0 if pattern.search(completion_text(c)) else 0.0 for c in completions]

    return reward


def _regex_match(pattern: str = "", full: bool = False) -> RewardFunc:
    need(is_name(pattern), "regex", "pattern", pattern, "a non-empty regular expression, e.g. '<answer>.*</answer>'")
    need(isinstance(full, bool), "regex", "full", full, "true or false")
    score = grpo_regex.timed_matcher(grpo_regex.compile_pattern(pattern), full)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return score([completion_text(c) for c in completions])

    return reward


def _trl_think_format() -> RewardFunc:
    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import think_format_reward

        return think_format_reward(as_messages(completions))

    return reward


def _json_valid(schema: Any = None, schema_column: str | None = None, partial_credit: float = 0.5) -> RewardFunc:
    partial_credit = as_float(partial_credit)
    need(
        is_num(partial_credit) and 0 <= partial_credit <= 1,
        "json_valid",
        "partial_credit",
        partial_credit,
        "a number in [0, 1] (the reward for valid JSON that fails the schema)",
    )
    need(
        schema_column is None or is_name(schema_column),
        "json_valid",
        "schema_column",
        schema_column,
        "null or a dataset column holding one JSON schema per row",
    )
    fixed = schema_validator(schema) if schema is not None else None

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        schemas = column(kwargs, schema_column, "json_valid") if schema_column else [None] * len(completions)
        out: list[float | None] = []
        for c, row_schema in zip(completions, schemas, strict=True):
            ok, value = extract_json(completion_text(c))
            check = schema_validator(row_schema) if row_schema not in (None, "") else fixed
            out.append(0.0 if not ok else 1.0 if check is None or not check(value) else float(partial_credit))
        return out

    return reward


REWARDS: dict[str, RewardDef] = {
    d.name: d
    for d in (
        define(
            "letter_fraction",
            _letter_fraction,
            "other",
            "Fraction of the completion's characters equal to `letter` (smoke task).",
            {"letter": ("a", "the character to count")},
        ),
        define(
            "constant",
            _constant,
            "other",
            "Always returns `value` (for tests: a reward with no signal).",
            {"value": (0.0, "the value returned for every completion")},
        ),
        define(
            "think_format",
            _think_format,
            "format",
            "1.0 when the completion has <think>...</think> then "
            "<answer>...</answer> (strict: exactly that, with newlines around the contents), else 0.0.",
            {"strict": (False, "require the exact layout '<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>'")},
        ),
        define(
            "trl_think_format",
            _trl_think_format,
            "format",
            "TRL's think_format_reward: 1.0 when the completion starts with one <think>...</think> block, else 0.0.",
        ),
        define(
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
        *grpo_reward_accuracy.accuracy_rewards(),
        *grpo_reward_length.length_rewards(),
        *grpo_reward_code.code_rewards(),
        define(
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
        *grpo_agents.process_rewards(define),
        *grpo_open_r1.code_rewards(define),
        *grpo_codeforces.cf_rewards(define),
        *grpo_reward_code.inline_rewards(),
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
