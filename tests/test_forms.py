"""The new-run form as data (no gradio): fields from the spec and TRL, form <-> spec <-> YAML, presets, errors."""

from __future__ import annotations

import dataclasses

import pytest

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.launch import runs
from grpo_dashboard.spec import form_layout, forms, presets, trl_fields
from grpo_dashboard.spec.run_spec import BackendSpec, DatasetSpec, ModelSpec, RunSpec

from .conftest import REPO


@pytest.fixture(scope="module")
def fields() -> dict[str, forms.FormField]:
    return forms.fields_by_key()


def test_groups_and_core_fields_present(fields: dict[str, forms.FormField]) -> None:
    groups = {f.group for f in fields.values()}
    assert groups == set(forms.GROUPS)
    core = [
        "num_generations",
        "epsilon",
        "epsilon_high",
        "beta",
        "loss_type",
        "scale_rewards",
        "learning_rate",
        "max_completion_length",
        "temperature",
        "max_steps",
        "num_iterations",
    ]
    for name in core:
        assert fields[f"training.{name}"].group == "GRPO core"
    assert fields["rewards"].widget == "rewards"
    assert fields["training.use_vllm"].group == "Generation / vLLM"
    assert fields["training.log_completions"].group == "Logging & eval"
    assert fields["training.loss_type"].choices == trl_fields.CHOICES["loss_type"]


def test_every_spec_dataclass_field_has_a_widget(fields: dict[str, forms.FormField]) -> None:
    for prefix, cls in (("model", ModelSpec), ("dataset", DatasetSpec), ("backend", BackendSpec)):
        for f in dataclasses.fields(cls):
            key = f"{prefix}.{f.name}"
            assert key in fields or key in form_layout.YAML_ONLY, f"{key} has no form field"


def test_defaults_and_help_come_from_trl_and_the_dataclasses(fields: dict[str, forms.FormField]) -> None:
    trl = trl_fields.grpo_fields()
    for f in fields.values():
        if f.is_training:
            name = f.key[len("training.") :]
            assert f.default == trl[name].default
            assert f.help and f.help.split()[0] in trl[name].help
    assert fields["model.dtype"].default == ModelSpec().dtype
    assert fields["dataset.prompt_column"].default == DatasetSpec().prompt_column
    assert fields["backend.num_processes"].default == BackendSpec().num_processes
    assert not any(k.startswith("training.") and k[9:] in trl_fields.RESERVED for k in fields)


def test_unset_training_fields_show_trl_defaults() -> None:
    values = forms.values_from_spec(RunSpec(name="x"))
    assert values["training.beta"] == trl_fields.default("beta")
    assert values["training.loss_type"] == trl_fields.default("loss_type")
    assert values["training.epsilon_high"] == ""  # an optional number is edited as text: empty means unset
    assert values["training.num_generations"] == str(trl_fields.default("num_generations"))
    assert values["training.bf16"] == forms.UNSET


@pytest.mark.parametrize("preset", presets.preset_names())
def test_presets_round_trip_through_the_form(preset: str) -> None:
    spec = presets.preset_spec(preset)
    values = forms.values_from_spec(spec)
    assert forms.spec_from_values(values, spec) == spec
    # without a base, only values that differ from TRL's defaults are written
    bare = forms.spec_from_values(values)
    assert all(v != trl_fields.default(k) for k, v in bare.training.items())
    assert {k: v for k, v in spec.training.items() if v != trl_fields.default(k)} == bare.training


@pytest.mark.parametrize("preset", presets.preset_names())
def test_a_form_pass_that_changes_nothing_leaves_the_yaml_text_as_written(preset: str) -> None:
    # A field the user only tabs through (a blur) sends the form again: the YAML keeps its defaults and layout.
    text = presets.preset_yaml(preset).replace("\ntraining:\n", "\ntraining:  # as written\n", 1)
    assert forms.yaml_from_values(forms.values_from_yaml(text), text) == text
    values = forms.values_from_yaml(text)
    values["training.max_steps"] = 123
    changed = forms.yaml_from_values(values, text)
    assert changed != text and "max_steps: 123" in changed


def test_form_edit_writes_only_what_changed_and_keeps_yaml_only_fields() -> None:
    base = presets.preset_spec(presets.DEFAULT_PRESET)
    base.health.thresholds = {"entropy_collapse.warn_ratio": 0.2}
    base.training["disable_dropout"] = True  # a TRL field the form does not show
    values = forms.values_from_spec(base)
    values["training.epsilon_high"] = 0.28
    values["training.temperature"] = trl_fields.default("temperature")  # unchanged default: not written
    values["model.lora"] = True
    values["model.lora.r"] = 8
    values["backend.gpus"] = "0, 1"
    values["training.bf16"] = "true"
    spec = forms.spec_from_values(values, base)
    assert spec.training["epsilon_high"] == 0.28
    assert "temperature" not in spec.training
    assert spec.training["bf16"] is True
    assert spec.training["disable_dropout"] is True
    assert spec.health.thresholds == {"entropy_collapse.warn_ratio": 0.2}
    assert spec.model.lora is not None and spec.model.lora.r == 8
    assert spec.backend.gpus == [0, 1]
    values["model.lora"] = False
    values["training.epsilon_high"] = None
    spec2 = forms.spec_from_values(values, spec)
    assert spec2.model.lora is None and "epsilon_high" not in spec2.training


def test_integer_valued_floats_stay_integers_in_yaml() -> None:
    base = presets.preset_spec(presets.DEFAULT_PRESET)
    values = forms.values_from_spec(base)
    values["training.logging_steps"] = 2.0  # what gr.Number returns
    values["training.max_steps"] = 300.0
    text = forms.yaml_from_values(values, base.to_yaml())
    assert "logging_steps: 2\n" in text and "max_steps: 300\n" in text


def test_yaml_to_values_and_back() -> None:
    text = presets.preset_yaml(presets.DEFAULT_PRESET).replace("num_generations: 8", "num_generations: 4")
    values = forms.values_from_yaml(text)
    assert values["training.num_generations"] == "4"
    assert values["rewards"] == [["letter_fraction", 1.0, "", "", '{"letter": "a"}']]
    assert RunSpec.from_yaml(forms.yaml_from_values(values, text)) == RunSpec.from_yaml(text)
    with pytest.raises(SpecError) as exc:
        forms.values_from_yaml("training: [1, 2\n")
    assert exc.value.errors[0].field == "(yaml)"


def test_reward_rows_parse_weights_params_and_skip_blank_rows() -> None:
    rows = [
        ["fmt", 0.5, "think_format", "", '{"strict": true}'],
        ["acc", None, "", "", ""],
        ["", None, "", "", ""],
        ["mine", "2", "", "my.py:f", "{a: 1}"],
    ]
    rewards = forms.rewards_from_rows(rows)
    assert [(r.name, r.weight, r.builtin, r.function, r.params) for r in rewards] == [
        ("fmt", 0.5, "think_format", None, {"strict": True}),
        ("acc", 1.0, None, None, {}),
        ("mine", 2.0, None, "my.py:f", {"a": 1}),
    ]
    with pytest.raises(SpecError) as exc:
        forms.rewards_from_rows([["a", "heavy", "", "", "[1]"]])
    assert [e.field for e in exc.value.errors] == ["rewards[0].weight", "rewards[0].params"]


def test_bad_number_is_reported_on_its_field() -> None:
    values = forms.values_from_spec(presets.preset_spec(presets.DEFAULT_PRESET))
    values["training.beta"] = "lots"
    with pytest.raises(SpecError) as exc:
        forms.spec_from_values(values)
    assert exc.value.errors[0].field == "training.beta"


def test_every_validation_error_lands_next_to_its_field(fields: dict[str, forms.FormField]) -> None:
    values = forms.values_from_spec(presets.preset_spec(presets.DEFAULT_PRESET))
    values.update(
        {
            "name": "",
            "training.num_generations": 1,
            "training.beta": -1.0,
            "dataset.prompt_column": "question",
            "rewards": [["no_such_reward", 1.0, "", "", ""]],
        }
    )
    spec = forms.spec_from_values(values)
    _, report = runs.check(spec, REPO)
    placed, unplaced = forms.place_errors(report.errors, list(fields))
    assert {"name", "training.num_generations", "training.beta", "dataset.prompt_column", "rewards"} <= set(placed)
    assert not unplaced
    assert "≥ 2" in " ".join(placed["training.num_generations"])


def test_errors_without_a_field_are_kept() -> None:
    errs = [
        FieldError("(yaml)", "x", "is not valid YAML"),
        FieldError("training.not_a_field", 1, "unknown"),
        FieldError("dataset", {}, "needs exactly one source"),
        FieldError("rewards[2].params.x", 1, "bad"),
    ]
    placed, unplaced = forms.place_errors(errs, ["rewards", "dataset.data_files", "training.beta"])
    assert placed == {"dataset.data_files": ["needs exactly one source"], "rewards": ["rewards[2].params.x: bad"]}
    assert len(unplaced) == 2


def test_presets_validate_offline() -> None:
    for name in presets.PRESETS:
        spec, report = runs.check(presets.preset_spec(name), REPO)
        assert not report.errors, (name, report.errors)
    dapo = presets.preset_spec("DAPO-style (clip-higher, no KL, on the smoke task)").training
    assert (dapo["epsilon_high"], dapo["beta"], dapo["loss_type"], dapo["mask_truncated_completions"]) == (
        0.28,
        0.0,
        "dapo",
        True,
    )
    math_spec = presets.preset_spec("math reasoning (Qwen2.5-0.5B-Instruct, GSM8K)")
    assert [r.name for r in math_spec.rewards] == ["think_format", "math_accuracy"]
    assert math_spec.dataset.path == "openai/gsm8k"
    _, report = runs.check(math_spec, REPO)
    assert any(w.field == "dataset.path" for w in report.warnings)  # offline: the Hub warning, not an error


def test_blank_preset_is_a_minimal_spec() -> None:
    spec = presets.preset_spec(presets.BLANK)
    assert spec.name == "my-run" and not spec.rewards and not spec.training
    with pytest.raises(KeyError):
        presets.preset_yaml("nope")


def test_short_help_cuts_at_a_sentence() -> None:
    text = "First sentence here. " * 30
    out = forms.short_help(text, 100)
    assert len(out) <= 100 and out.endswith(".")


def test_the_resumable_switch_sets_save_strategy_and_save_steps_together(fields: dict[str, forms.FormField]) -> None:
    """The switch stands for `save_strategy: steps` plus a `save_steps` (the field's own value, TRL's default unless
    edited); it shows as on for a spec that sets both, and off writes `save_strategy: "no"` and drops save_steps."""
    switch = fields["resumable"]
    assert switch.widget == "switch" and switch.group == fields["training.save_steps"].group
    smoke = presets.preset_yaml(presets.DEFAULT_PRESET)  # smoke: save_strategy "no"
    values = forms.values_from_yaml(smoke)
    assert values["resumable"] is False
    values["resumable"] = True  # flipped: wins over the save_strategy dropdown still showing "no"
    on = RunSpec.from_yaml(forms.yaml_from_values(values, smoke))
    assert on.training["save_strategy"] == "steps"
    assert on.training["save_steps"] == trl_fields.default("save_steps")  # written out, not re-typed
    assert forms.values_from_spec(on)["resumable"] is True
    values = forms.values_from_spec(on)
    values["training.save_steps"] = 7  # an edited value is the one kept
    edited = RunSpec.from_yaml(forms.yaml_from_values(values, on.to_yaml()))
    assert edited.training["save_steps"] == 7 and edited.training["save_strategy"] == "steps"
    values = forms.values_from_spec(edited)
    values["resumable"] = False
    off = RunSpec.from_yaml(forms.yaml_from_values(values, edited.to_yaml()))
    assert off.training["save_strategy"] == "no" and "save_steps" not in off.training
    assert all(w.field != "training.save_steps" for w in runs.check(off, REPO)[1].warnings)
    # Unflipped, the fields decide: save_strategy set to "no" in the dropdown turns the switch off.
    values = forms.values_from_spec(edited)
    values["training.save_strategy"] = "no"
    assert forms.values_from_yaml(forms.yaml_from_values(values, edited.to_yaml()))["resumable"] is False
    # A spec that already sets both shows as on (examples/math.yaml: steps, every 100).
    assert forms.values_from_yaml((REPO / "examples" / "math.yaml").read_text())["resumable"] is True
