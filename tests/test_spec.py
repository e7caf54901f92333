"""Run spec: YAML in and out, round-trip exact, structural errors that name the field."""

from __future__ import annotations

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.spec.run_spec import LoraSpec, RewardSpec, RunSpec

from .conftest import SMOKE_SPEC


def test_smoke_example_round_trips_exactly() -> None:
    spec = RunSpec.from_file(SMOKE_SPEC)
    text = spec.to_yaml()
    again = RunSpec.from_yaml(text)
    assert again == spec
    assert again.to_yaml() == text
    assert spec.rewards[0].params == {"letter": "a"}
    assert spec.training["num_generations"] == 8


def test_full_spec_round_trip_keeps_every_section() -> None:
    spec = RunSpec(name="full")
    spec.model.name_or_path = "Qwen/Qwen2.5-0.5B-Instruct"
    spec.model.dtype = "bfloat16"
    spec.model.lora = LoraSpec(r=8, target_modules=["q_proj", "v_proj"])
    spec.dataset.path = "openai/gsm8k"
    spec.dataset.config = "main"
    spec.dataset.eval_split = "test"
    spec.dataset.prompt_template = "Solve: {question}"
    spec.dataset.system_prompt = "Think step by step."
    spec.rewards = [
        RewardSpec(name="fmt", builtin="think_format", weight=0.5, params={"strict": True}),
        RewardSpec(name="acc", builtin="math_accuracy", weight=2.0),
    ]
    spec.training = {
        "epsilon_high": 0.28,
        "beta": 0.0,
        "loss_type": "dapo",
        "learning_rate": 1e-6,
        "mask_truncated_completions": True,
        "eval_strategy": "steps",
        "eval_steps": 50,
    }
    spec.backend.gpus = [0, 1]
    spec.backend.num_processes = 2
    spec.backend.accelerate_config = "zero2"
    spec.health.thresholds = {"entropy_collapse.warn_ratio": 0.4}
    text = spec.to_yaml()
    assert RunSpec.from_yaml(text) == spec
    assert RunSpec.from_yaml(text).to_yaml() == text


def test_yaml_scientific_notation_without_dot_is_a_number_where_a_number_is_expected() -> None:
    spec = RunSpec.from_yaml("name: x\nrewards:\n  - {name: a, weight: 1e-1}\n")
    assert spec.rewards[0].weight == pytest.approx(0.1)


def test_unknown_keys_are_reported_with_a_suggestion() -> None:
    with pytest.raises(SpecError) as info:
        RunSpec.from_yaml("name: x\nmodle: {name_or_path: a}\nbackend: {num_proceses: 2}\n")
    fields = {e.field: e.message for e in info.value.errors}
    assert "Did you mean 'model'" in fields["modle"]
    assert "Did you mean 'num_processes'" in fields["backend.num_proceses"]


def test_wrong_types_name_field_value_and_expected_type() -> None:
    with pytest.raises(SpecError) as info:
        RunSpec.from_yaml("name: x\nbackend: {num_processes: many}\nrewards: oops\n")
    by_field = {e.field: e for e in info.value.errors}
    assert by_field["backend.num_processes"].value == "many"
    assert "must be int" in by_field["backend.num_processes"].message
    assert "list of RewardSpec" in by_field["rewards"].message


def test_invalid_yaml_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        RunSpec.from_yaml("name: [unclosed\n")


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(SpecError, match="must be a mapping"):
        RunSpec.from_yaml("- just\n- a list\n")
