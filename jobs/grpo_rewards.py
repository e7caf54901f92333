"""Built-in reward functions for GRPO jobs, usable from a run spec by name.

This module ships beside `grpo_job.py` and imports nothing from `grpo_dashboard`: the same file runs inside the
training job (locally or on Hugging Face Jobs) and is read by the dashboard for validation (names, parameters,
required dataset columns). Every reward follows TRL's signature
`f(prompts, completions, **kwargs) -> list[float | None]` and accepts both standard (str) and conversational
(message list) completions.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RewardFunc = Callable[..., list[float | None]]


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
    """A built-in reward: a factory taking the spec's params and returning a TRL reward function."""

    name: str
    factory: Callable[..., RewardFunc]
    description: str
    columns: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)


def _letter_fraction(letter: str = "a") -> RewardFunc:
    if not isinstance(letter, str) or len(letter) != 1:
        raise ValueError(f"letter_fraction: params.letter must be a single character, got {letter!r}.")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c in completions:
            text = completion_text(c)
            out.append(text.count(letter) / len(text) if text else 0.0)
        return out

    return reward


def _constant(value: float = 0.0) -> RewardFunc:
    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [float(value)] * len(completions)

    return reward


_THINK_STRICT = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>\n?$", re.DOTALL)
_THINK_LENIENT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)


def _think_format(strict: bool = False) -> RewardFunc:
    pattern = _THINK_STRICT if strict else _THINK_LENIENT

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [1.0 if pattern.search(completion_text(c)) else 0.0 for c in completions]

    return reward


def _regex_match(pattern: str = "", full: bool = False) -> RewardFunc:
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"regex: params.pattern {pattern!r} is not a valid regular expression: {exc}.") from exc

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        match = compiled.fullmatch if full else compiled.search
        return [1.0 if match(completion_text(c)) else 0.0 for c in completions]

    return reward


def _math_accuracy(solution_column: str = "solution") -> RewardFunc:
    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from math_verify import LatexExtractionConfig, parse, verify

        solutions = kwargs.get(solution_column)
        if solutions is None:
            raise KeyError(f"math_accuracy needs the dataset column {solution_column!r}; it was not passed.")
        out: list[float | None] = []
        for c, sol in zip(completions, solutions, strict=True):
            gold = parse(str(sol), extraction_mode="first_match")
            if not gold:
                gold = parse(f"${sol}$", extraction_mode="first_match")
            if not gold:
                out.append(None)
                continue
            pred = parse(completion_text(c), extraction_config=[LatexExtractionConfig()],
                         extraction_mode="first_match")
            out.append(1.0 if pred and verify(gold, pred) else 0.0)
        return out

    return reward


REWARDS: dict[str, RewardDef] = {
    "letter_fraction": RewardDef(
        "letter_fraction", _letter_fraction, "Fraction of the completion's characters equal to `letter` (smoke task).",
        params={"letter": "a"},
    ),
    "constant": RewardDef(
        "constant", _constant, "Always returns `value` (for tests: a reward with no signal).", params={"value": 0.0},
    ),
    "think_format": RewardDef(
        "think_format", _think_format,
        "1.0 when the completion has <think>...</think> then <answer>...</answer> (strict: exact newlines).",
        params={"strict": False},
    ),
    "regex": RewardDef(
        "regex", _regex_match, "1.0 when the completion matches `pattern` (search, or full match with full=true).",
        params={"pattern": "", "full": False},
    ),
    "math_accuracy": RewardDef(
        "math_accuracy", _math_accuracy,
        "1.0 when math-verify finds the completion's answer equal to the solution column (None if unparseable gold).",
        columns=("solution",), params={"solution_column": "solution"},
    ),
}


def required_columns(builtin: str, params: dict[str, Any]) -> list[str]:
    """Dataset columns a built-in reward reads, after its parameters are applied."""
    rdef = REWARDS[builtin]
    if "solution_column" in rdef.params:
        return [str(params.get("solution_column", rdef.params["solution_column"]))]
    return list(rdef.columns)


def load_custom(function: str, base_dir: str | None = None) -> Callable[..., Any]:
    """Load a user reward from `path/to/file.py:func` or `package.module:func` (or `package.module.func`)."""
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


def build_reward(name: str, builtin: str | None, function: str | None, params: dict[str, Any],
                 base_dir: str | None = None) -> RewardFunc:
    """Build the reward function for one spec entry, named `name` so TRL logs it as `rewards/<name>/mean`."""
    if function:
        inner = load_custom(function, base_dir)
        fn = inner if not params else _bind(inner, params)
    else:
        key = builtin or name
        if key not in REWARDS:
            raise KeyError(f"Unknown reward {key!r}; built-ins are {sorted(REWARDS)}.")
        fn = REWARDS[key].factory(**params)

    if inspect.iscoroutinefunction(fn):
        async def named_async(*args: Any, **kwargs: Any) -> list[float | None]:
            return await fn(*args, **kwargs)

        named_async.__name__ = named_async.__qualname__ = name
        return named_async

    def named(*args: Any, **kwargs: Any) -> list[float | None]:
        return fn(*args, **kwargs)

    named.__name__ = named.__qualname__ = name
    return named


def _bind(fn: Callable[..., Any], params: dict[str, Any]) -> Callable[..., Any]:
    def bound(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{**params, **kwargs})

    return bound
