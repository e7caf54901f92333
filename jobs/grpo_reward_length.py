"""The length rewards of the built-in registry: target length, DAPO's soft overlong punishment, TRL's n-gram
repetition penalty and TRL's cosine-scaled accuracy, each counting tokens (TRL's completion_ids), words or chars.

Ships beside `grpo_rewards.py`, which lists these (`length_rewards`); imports nothing from `grpo_dashboard`; TRL is
imported only inside the rewards.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_reward_base import (
    SOLUTION_HELP,
    RewardDef,
    RewardFunc,
    as_float,
    as_messages,
    column,
    completion_text,
    define,
    is_num,
    need,
)

LENGTH_UNITS = ("tokens", "words", "chars")
UNIT_HELP = "tokens (TRL's completion_ids), words or chars"
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
    need(unit in LENGTH_UNITS, name, "unit", unit, f"one of {list(LENGTH_UNITS)}")


def _target_length(target: int = 256, tolerance: int = 0, unit: str = "tokens") -> RewardFunc:
    need(isinstance(target, int) and target > 0, "target_length", "target", target, "a positive integer")
    need(isinstance(tolerance, int) and tolerance >= 0, "target_length", "tolerance", tolerance, "an integer >= 0")
    _check_unit("target_length", unit)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [
            1.0 - min(1.0, max(0, abs(len(u) - target) - tolerance) / target)
            for u in _units(completions, kwargs, unit)
        ]

    return reward


def _soft_overlong(max_completion_len: int = 256, soft_punish_cache: int = 64, unit: str = "tokens") -> RewardFunc:
    need(
        isinstance(max_completion_len, int) and max_completion_len > 0,
        "soft_overlong",
        "max_completion_len",
        max_completion_len,
        "a positive integer (usually training.max_completion_length)",
    )
    need(
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
    max_penalty = as_float(max_penalty)
    need(
        isinstance(ngram_size, int) and ngram_size >= 1,
        "repetition_penalty",
        "ngram_size",
        ngram_size,
        "a positive integer, e.g. 3",
    )
    need(
        is_num(max_penalty) and max_penalty <= 0,
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
    min_value_wrong, max_value_wrong = as_float(min_value_wrong), as_float(max_value_wrong)
    min_value_correct, max_value_correct = as_float(min_value_correct), as_float(max_value_correct)
    need(isinstance(max_len, int) and max_len > 0, "cosine_scaled", "max_len", max_len, "a positive integer")
    for pname, v in (
        ("min_value_wrong", min_value_wrong),
        ("max_value_wrong", max_value_wrong),
        ("min_value_correct", min_value_correct),
        ("max_value_correct", max_value_correct),
    ):
        need(is_num(v), "cosine_scaled", pname, v, "a finite number")
    _check_unit("cosine_scaled", unit)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import get_cosine_scaled_reward

        fn = get_cosine_scaled_reward(max_len, min_value_wrong, max_value_wrong, min_value_correct, max_value_correct)
        solutions = [str(s) for s in column(kwargs, solution_column, "cosine_scaled")]
        return fn(as_messages(completions), solutions, _units(completions, kwargs, unit))

    return reward


def length_rewards() -> list[RewardDef]:
    """The length family's registry entries (with cosine_scaled, an accuracy reward scaled by length)."""
    return [
        define(
            "cosine_scaled",
            _cosine_scaled,
            "accuracy",
            "TRL's cosine-scaled reward: math-verify correctness scaled by "
            "length (short correct answers score most, short wrong ones least).",
            {
                "max_len": (256, "length (in `unit`) where the schedule ends"),
                "solution_column": ("solution", SOLUTION_HELP),
                "min_value_wrong": (-1.0, "wrong answer, shortest"),
                "max_value_wrong": (-0.5, "wrong answer, longest"),
                "min_value_correct": (0.5, "correct answer, longest"),
                "max_value_correct": (1.0, "correct answer, shortest"),
                "unit": ("tokens", UNIT_HELP),
            },
            ("solution",),
        ),
        define(
            "target_length",
            _target_length,
            "length",
            "1 - |length - target| / target (clipped to [0, 1]): 1.0 at the target length.",
            {
                "target": (256, "the ideal length"),
                "tolerance": (0, "no penalty within this distance of the target"),
                "unit": ("tokens", UNIT_HELP),
            },
        ),
        define(
            "soft_overlong",
            _soft_overlong,
            "length",
            "DAPO soft overlong punishment (TRL): 0 up to max_completion_len "
            "- soft_punish_cache, then linearly down to -1 at max_completion_len, -1 beyond.",
            {
                "max_completion_len": (256, "usually training.max_completion_length"),
                "soft_punish_cache": (64, "length of the linear penalty zone"),
                "unit": ("tokens", UNIT_HELP),
            },
        ),
        define(
            "repetition_penalty",
            _repetition_penalty,
            "length",
            "TRL's n-gram repetition penalty: 0 without repeated "
            "n-grams, down to max_penalty for a fully repetitive completion.",
            {
                "ngram_size": (3, "n-gram size"),
                "max_penalty": (-1.0, "penalty of a fully repetitive completion (<= 0)"),
                "unit": ("tokens", UNIT_HELP),
            },
        ),
    ]
