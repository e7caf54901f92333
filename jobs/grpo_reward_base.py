"""What every built-in reward family shares: the `RewardDef` record and its constructor, the completion's text, the
dataset column a reward reads, and the parameter checks whose errors name the reward, the parameter, the value and
what is allowed.

Ships beside `grpo_rewards.py` (which assembles the registry from the family modules) and imports nothing from
`grpo_dashboard`, nor anything heavy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RewardFunc = Callable[..., list[float | None]]
KINDS = ("format", "accuracy", "length", "code", "structured", "custom", "other")
# kwargs TRL passes every reward that are not dataset columns (left out of a missing column's list)
_NOT_COLUMNS = ("trainer_state", "log_extra", "log_metric", "completion_ids", "prompts", "completions")


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


def as_messages(completions: list[Any]) -> list[list[dict[str, str]]]:
    """Completions in TRL's conversational form, as TRL's own rewards read them."""
    return [c if isinstance(c, list) else [{"role": "assistant", "content": completion_text(c)}] for c in completions]


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


def define(
    name: str,
    factory: Callable[..., RewardFunc],
    kind: str,
    description: str,
    params: dict[str, tuple[Any, str]] | None = None,
    columns: tuple[str, ...] = (),
) -> RewardDef:
    """A `RewardDef` from `params` given as {name: (default, help)}."""
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


def need(ok: bool, reward: str, param: str, value: Any, allowed: str) -> None:
    """ValueError naming the reward, the parameter, its value and what is allowed, unless `ok`."""
    if not ok:
        raise ValueError(f"{reward}: params.{param} = {value!r} is invalid; it must be {allowed}.")


def check_params(reward: str, *checks: tuple[str, Any, bool, str]) -> None:
    """`need` for each (param, value, ok, allowed), in order: the first wrong parameter is the error."""
    for param, value, ok, allowed in checks:
        need(ok, reward, param, value, allowed)


def is_num(v: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_name(v: Any) -> bool:
    """A non-empty string, such as a dataset column's name."""
    return isinstance(v, str) and bool(v)


def as_float(v: Any) -> Any:
    """YAML 1.1 reads `1e-6` as a string: accept numeric strings for float parameters."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def column(kwargs: dict[str, Any], name: str, reward: str, param: str = "*_column") -> list[Any]:
    """The dataset column `name` TRL passed to `reward`; KeyError naming it, the columns passed and the parameter
    that chooses it."""
    values = kwargs.get(name)
    if values is None:
        have = sorted(k for k in kwargs if k not in _NOT_COLUMNS)
        raise KeyError(
            f"{reward} reads the dataset column {name!r}, which was not passed (columns: {have}). "
            f"Add the column or set the reward's {param} parameter."
        )
    return list(values)


SOLUTION_HELP = "dataset column with the reference solution (GSM8K '... #### 42' is fine)"
