"""TRL's GRPOConfig as data: field names, types, defaults, help text and allowed values, from the installed TRL."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

# Fields TRL accepts at construction but only checks inside the first training step, plus
# string options whose values TRL documents; we validate them up front.
CHOICES: dict[str, tuple[Any, ...]] = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none", True, False),
    "importance_sampling_level": ("token", "sequence"),
    "vllm_mode": ("colocate", "server"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm_importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
    "vllm_model_impl": ("vllm", "transformers"),
}

# Fields the dashboard sets itself; a user value would be ignored or break the contract with the job.
RESERVED: dict[str, str] = {
    "output_dir": "set the spec's top-level `output_dir` instead",
    "reward_weights": "give each entry of `rewards` its own `weight` instead",
    "logging_nan_inf_filter": "the job always sets it to false so NaN/Inf losses reach the dashboard",
}


@dataclass(frozen=True)
class TrlField:
    """One GRPOConfig field."""

    name: str
    types: tuple[Any, ...]
    default: Any
    help: str
    choices: tuple[Any, ...] | None


def _flatten(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_flatten(arg))
        return tuple(out)
    origin = typing.get_origin(annotation)
    return (origin if origin is not None else annotation,)


@functools.cache
def grpo_fields() -> dict[str, TrlField]:
    """All GRPOConfig fields of the installed TRL (imports trl on first call: a few seconds)."""
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    out: dict[str, TrlField] = {}
    for f in dataclasses.fields(GRPOConfig):
        if not f.init:
            continue
        kinds = _flatten(hints.get(f.name, f.type))
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        choices = CHOICES.get(f.name)
        if choices is None:
            enums = [k for k in kinds if isinstance(k, type) and issubclass(k, enum.Enum)]
            if enums:
                choices = tuple(e.value for e in enums[0])
        if isinstance(default, enum.Enum):
            default = default.value
        out[f.name] = TrlField(f.name, kinds, default, str(f.metadata.get("help", "")).strip(), choices)
    return out


def default(name: str) -> Any:
    """TRL's default for a GRPOConfig field."""
    return grpo_fields()[name].default


def effective(training: dict[str, Any], name: str) -> Any:
    """The value a field will have: the user's, else TRL's default."""
    return training[name] if name in training else default(name)
