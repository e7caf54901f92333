"""The accuracy rewards of the built-in registry: math-verify (ours and TRL's), exact and numeric match of an extracted
answer, and multiple choice.

Ships beside `grpo_rewards.py`, which lists these (`accuracy_rewards`); imports nothing from `grpo_dashboard`; the
answer helpers are `grpo_answers.py`'s.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_answers import EXTRACT_MODES, extract_answer, gold_answer, math_correct, normalize_text, parse_number
from grpo_reward_base import (
    SOLUTION_HELP,
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

EXTRACT_HELP = (
    "where the answer is: auto (<answer> tag, \\boxed{}, '####', 'answer is'), answer_tag, boxed, last_line, full"
)


def _math_accuracy(solution_column: str = "solution") -> RewardFunc:
    need(is_name(solution_column), "math_accuracy", "solution_column", solution_column, "a dataset column name")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        solutions = column(kwargs, solution_column, "math_accuracy")
        verdicts = [math_correct(completion_text(c), s) for c, s in zip(completions, solutions, strict=True)]
        return [None if v is None else float(v) for v in verdicts]

    return reward


def _trl_accuracy(solution_column: str = "solution", reasoning: bool = False) -> RewardFunc:
    need(is_name(solution_column), "trl_accuracy", "solution_column", solution_column, "a dataset column name")

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        from trl.rewards import accuracy_reward, reasoning_accuracy_reward

        fn = reasoning_accuracy_reward if reasoning else accuracy_reward
        solutions = [str(s) for s in column(kwargs, solution_column, "trl_accuracy")]
        return fn(as_messages(completions), solutions)

    return reward


def _check_extract(name: str, extract: str) -> None:
    need(extract in EXTRACT_MODES, name, "extract", extract, f"one of {list(EXTRACT_MODES)}")


def _exact_match(answer_column: str = "answer", normalize: bool = True, extract: str = "auto") -> RewardFunc:
    need(is_name(answer_column), "exact_match", "answer_column", answer_column, "a dataset column name")
    need(isinstance(normalize, bool), "exact_match", "normalize", normalize, "true or false")
    _check_extract("exact_match", extract)
    norm = normalize_text if normalize else str.strip

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c, gold in zip(completions, column(kwargs, answer_column, "exact_match"), strict=True):
            want = norm(gold_answer(gold))
            out.append(None if not want else float(norm(extract_answer(completion_text(c), extract)) == want))
        return out

    return reward


def _numeric_match(
    answer_column: str = "answer", rel_tol: float = 1e-6, abs_tol: float = 1e-9, extract: str = "auto"
) -> RewardFunc:
    rel_tol, abs_tol = as_float(rel_tol), as_float(abs_tol)
    need(is_name(answer_column), "numeric_match", "answer_column", answer_column, "a dataset column name")
    need(is_num(rel_tol) and rel_tol >= 0, "numeric_match", "rel_tol", rel_tol, "a number >= 0, e.g. 1e-6")
    need(is_num(abs_tol) and abs_tol >= 0, "numeric_match", "abs_tol", abs_tol, "a number >= 0, e.g. 0.01")
    _check_extract("numeric_match", extract)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c, gold in zip(completions, column(kwargs, answer_column, "numeric_match"), strict=True):
            want = gold if is_num(gold) else parse_number(gold_answer(gold))
            if want is None:
                out.append(None)
                continue
            got = parse_number(extract_answer(completion_text(c), extract))
            out.append(1.0 if got is not None and math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol) else 0.0)
        return out

    return reward


def _multiple_choice(answer_column: str = "answer", choices: str = "ABCD", extract: str = "auto") -> RewardFunc:
    need(is_name(answer_column), "multiple_choice", "answer_column", answer_column, "a dataset column name")
    need(
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
        for c, gold in zip(completions, column(kwargs, answer_column, "multiple_choice"), strict=True):
            want = gold_letter(gold)
            out.append(None if want is None else float(letter(completion_text(c)) == want))
        return out

    return reward


def accuracy_rewards() -> list[RewardDef]:
    """The accuracy family's registry entries."""
    return [
        define(
            "math_accuracy",
            _math_accuracy,
            "accuracy",
            "1.0 when math-verify finds the completion's answer (\\boxed{}, "
            "<answer> tag, LaTeX or a plain number) equal to the solution; None when the solution is unparseable.",
            {"solution_column": ("solution", SOLUTION_HELP)},
            ("solution",),
        ),
        define(
            "trl_accuracy",
            _trl_accuracy,
            "accuracy",
            "TRL's accuracy_reward (reasoning=true: "
            "reasoning_accuracy_reward, only after </think>): math-verify on \\boxed{} answers.",
            {
                "solution_column": ("solution", SOLUTION_HELP),
                "reasoning": (False, "only judge the text after </think>"),
            },
            ("solution",),
        ),
        define(
            "exact_match",
            _exact_match,
            "accuracy",
            "1.0 when the extracted answer equals the answer column "
            "(normalised: case, punctuation, articles, spaces), else 0.0; None for an empty reference.",
            {
                "answer_column": ("answer", "dataset column with the reference answer"),
                "normalize": (True, "compare normalised text (false: exact after stripping spaces)"),
                "extract": ("auto", EXTRACT_HELP),
            },
            ("answer",),
        ),
        define(
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
                "extract": ("auto", EXTRACT_HELP),
            },
            ("answer",),
        ),
        define(
            "multiple_choice",
            _multiple_choice,
            "accuracy",
            "1.0 when the chosen letter equals the answer column (a letter, '(B)', or a 0-based index), else 0.0.",
            {
                "answer_column": ("answer", "dataset column with the correct letter or index"),
                "choices": ("ABCD", "the allowed letters"),
                "extract": ("auto", EXTRACT_HELP),
            },
            ("answer",),
        ),
    ]
