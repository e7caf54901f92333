"""TRL's GRPOConfig as data: field names, types, defaults, help text and allowed values of the installed TRL, read
from its schema (spec/trl_schema.py) without importing trl."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec import trl_schema

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


def _field(entry: dict[str, Any], choices: tuple[Any, ...] | None) -> TrlField:
    return TrlField(entry["name"], trl_schema.python_types(entry), entry["default"], entry["help"], choices)


@functools.cache
def grpo_fields() -> dict[str, TrlField]:
    """All GRPOConfig fields of the installed TRL, from its schema (spec/trl_schema.py: trl is not imported)."""
    out: dict[str, TrlField] = {}
    for entry in trl_schema.entries("GRPOConfig"):
        enum_values = entry.get("enum_values")
        choices = CHOICES.get(entry["name"], tuple(enum_values) if enum_values else None)
        out[entry["name"]] = _field(entry, choices)
    return out


@functools.cache
def async_fields() -> dict[str, TrlField]:
    """All AsyncGRPOConfig fields of the installed TRL (ImportError when this TRL has no async_grpo trainer)."""
    try:
        found = trl_schema.entries("AsyncGRPOConfig")
    except KeyError:
        raise ImportError("trl.experimental.async_grpo.AsyncGRPOConfig is not in this TRL") from None
    return {entry["name"]: _field(entry, None) for entry in found}


def default(name: str) -> Any:
    """TRL's default for a GRPOConfig field."""
    return grpo_fields()[name].default


def effective(training: dict[str, Any], name: str) -> Any:
    """The value a field will have: the user's, else TRL's default."""
    return training[name] if name in training else default(name)


_TRUE, _FALSE = ("yes", "true", "t", "y", "1"), ("no", "false", "f", "n", "0")  # transformers' string_to_bool


def value_errors(config: dict[str, Any]) -> list[FieldError]:
    """Text values of GRPOConfig's number and switch fields that TRL's parser would refuse (it converts text with
    float, int and string_to_bool), one error each."""
    fields = grpo_fields()
    errors = []
    for key, value in config.items():
        f = fields.get(key)
        if f is None or not isinstance(value, str):
            continue
        kinds = set(f.types) - {type(None)}
        if kinds == {bool}:
            if value.lower() not in _TRUE + _FALSE:
                errors.append(FieldError(key, value, "must be true or false: TRL's parser reads nothing else."))
        elif kinds in ({int}, {float}, {int, float}):
            kind = "a whole number" if kinds == {int} else "a number"
            try:
                (int if kinds == {int} else float)(value)
            except ValueError:
                example = f", e.g. {f.default!r} (TRL's default)" if f.default is not None else ""
                errors.append(FieldError(key, value, f"must be {kind}{example}: TRL's parser reads nothing else."))
    return errors
