"""A run's spec from the resolved config a logger or callback recorded (TRL's `GRPOConfig.to_dict()`, as
transformers' trackio and W&B callbacks and our own callback store it), so an external run shows the same
settings panels, doctor context (`beta`, `max_completion_length`...) and Compare config diff as a launched one.
"""

from __future__ import annotations

from typing import Any

from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.run_spec import ModelSpec, RunSpec


def training_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """The GRPOConfig fields of `config` whose values differ from TRL's defaults (what a launched spec holds)."""
    fields = trl_fields.grpo_fields()
    out: dict[str, Any] = {}
    for key, value in config.items():
        field = fields.get(key)
        if field is None or key in trl_fields.RESERVED or "token" in key.lower():
            continue
        if not isinstance(value, (int, float, str, bool)) or value == field.default:
            continue
        if not isinstance(value, field.types) and not (isinstance(value, int) and float in field.types):
            continue
        out[key] = value
    return out


def spec_from_config(config: dict[str, Any], **fields: Any) -> RunSpec:
    """A RunSpec with the config's GRPOConfig fields as `training` and its model (`_name_or_path` or
    `model_name_or_path`) as the model; `fields` are the spec's other fields (name, tags, description)."""
    return _checked(config, fields)[0]


def spec_yaml_from_config(config: dict[str, Any], **fields: Any) -> str:
    """`spec_from_config`'s spec as run.yaml text."""
    return _checked(config, fields)[1]


def _checked(config: dict[str, Any], fields: dict[str, Any]) -> tuple[RunSpec, str]:
    """The spec and its YAML, checked by parsing the YAML back; when the spec refuses a value, the spec of `fields`
    alone (the run keeps its metrics, with TRL's defaults shown)."""
    model = config.get("model_name_or_path") or config.get("_name_or_path")
    spec = RunSpec(training=training_from_config(config), **fields)
    if isinstance(model, str) and model:
        spec.model = ModelSpec(name_or_path=model)
    text = spec.to_yaml()
    try:
        return RunSpec.from_yaml(text), text
    except ValueError:
        bare = RunSpec(**fields)
        return bare, bare.to_yaml()
