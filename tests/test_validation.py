"""Validation before anything starts: one test per check TRL would only make inside the first training step.

Every rejected spec must launch nothing and write nothing: the data directory is not even created.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.launch.runs import check, launch

from .conftest import smoke_dict


def rejected(spec: dict[str, Any], data_dir: Path, base_dir: Path | None = None) -> dict[str, FieldError]:
    """Launch must raise SpecError and leave no trace; returns the errors by field."""
    with pytest.raises(SpecError) as info:
        launch(spec, base_dir=base_dir)
    assert not data_dir.exists(), "an invalid spec must not create the data directory, a run dir or a database"
    by_field: dict[str, FieldError] = {}
    for e in info.value.errors:
        prev = by_field.get(e.field)
        by_field[e.field] = e if prev is None else FieldError(e.field, e.value, f"{prev.message} | {e.message}")
    return by_field


def assert_names(err: FieldError, value: Any, *fragments: str) -> None:
    assert err.value == value
    text = str(err)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"


def test_smoke_spec_is_valid(tiny_model: Path) -> None:
    spec, report = check(smoke_dict(tiny_model))
    assert report.errors == []
    assert "prompt" in report.dataset.columns


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("loss_type", "foo", "'dapo'"),
        ("scale_rewards", "sometimes", "'group', 'batch', 'none'"),
        ("importance_sampling_level", "word", "'token', 'sequence'"),
        ("vllm_mode", "remote", "'colocate', 'server'"),
        ("multi_objective_aggregation", "mean", "'sum_then_normalize', 'normalize_then_sum'"),
    ],
)
def test_enum_fields_trl_checks_only_in_the_first_step(
    tiny_model: Path, data_dir: Path, field: str, value: str, allowed: str
) -> None:
    errors = rejected(smoke_dict(tiny_model, **{field: value}), data_dir)
    assert_names(errors[f"training.{field}"], value, "must be one of", allowed)


def test_prompt_column_missing(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["dataset"]["prompt_column"] = "question"
    errors = rejected(spec, data_dir)
    assert_names(
        errors["dataset.prompt_column"], "question", "not a column", "['prompt']", "Set `dataset.prompt_column`"
    )


def test_prompt_template_with_unknown_column(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["dataset"]["prompt_template"] = "Q: {question}"
    errors = rejected(spec, data_dir)
    assert_names(errors["dataset.prompt_template"], "Q: {question}", "['question']", "lacks")


def test_generation_batch_not_divisible_by_num_generations(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, per_device_train_batch_size=12, num_generations=8), data_dir)
    err = errors["training.per_device_train_batch_size"]
    assert_names(err, 12, "= 12 completions", "not divisible by num_generations (8)", "multiple of 8")


def test_divisibility_counts_processes_and_accumulation(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model, per_device_train_batch_size=3, num_generations=4, gradient_accumulation_steps=2)
    spec["backend"]["num_processes"] = 1
    errors = rejected(spec, data_dir)
    message = errors["training.per_device_train_batch_size"].message
    assert "(3) × processes (1) × steps_per_generation (2) = 6" in message
    spec["backend"]["num_processes"] = 2
    spec["backend"]["gpus"] = None
    _, report = check(spec)
    assert not any(e.field == "training.per_device_train_batch_size" for e in report.errors)


def test_explicit_generation_batch_size_checked(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, generation_batch_size=20), data_dir)
    assert "divisible by the global batch size" in errors["training.generation_batch_size"].message


def test_num_generations_below_two(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, num_generations=1, per_device_train_batch_size=8), data_dir)
    assert_names(errors["training.num_generations"], 1, "must be ≥ 2")


def test_reward_weights_are_per_reward_not_a_trl_list(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, reward_weights=[1.0, 2.0]), data_dir)
    assert_names(errors["training.reward_weights"], [1.0, 2.0], "give each entry of `rewards` its own `weight`")


def test_reward_reads_a_column_the_dataset_lacks(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["rewards"].append({"name": "acc", "builtin": "math_accuracy"})
    errors = rejected(spec, data_dir)
    assert_names(errors["rewards[1]"], "acc", "'solution'", "lacks", "Add the column")


def test_unknown_reward_and_duplicate_names(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["rewards"] = [
        {"name": "leter_fraction"},
        {"name": "x", "builtin": "constant"},
        {"name": "x", "builtin": "constant"},
    ]
    errors = rejected(spec, data_dir)
    assert "Did you mean 'letter_fraction'" in errors["rewards[0].name"].message
    assert "used twice" in errors["rewards[2].name"].message


def test_reward_params_are_checked(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["rewards"][0]["params"] = {"letter": "ab"}
    spec["rewards"].append({"name": "r", "builtin": "regex", "params": {"patern": "x"}})
    errors = rejected(spec, data_dir)
    assert "single character" in errors["rewards[0].params"].message
    assert "allowed: ['full', 'pattern']" in errors["rewards[1].params.patern"].message


def test_conversational_prompts_need_a_chat_template(tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    import shutil

    no_template = tmp_path / "model-without-template"
    shutil.copytree(tiny_model, no_template)
    cfg = no_template / "tokenizer_config.json"
    data = json.loads(cfg.read_text())
    data.pop("chat_template", None)
    cfg.write_text(json.dumps(data))
    (no_template / "chat_template.jinja").unlink(missing_ok=True)
    rows = tmp_path / "chat.jsonl"
    rows.write_text(
        "\n".join(json.dumps({"prompt": [{"role": "user", "content": f"say a {i}"}]}) for i in range(4)) + "\n"
    )
    spec = smoke_dict(no_template)
    spec["dataset"]["data_files"] = str(rows)
    errors = rejected(spec, data_dir)
    assert_names(errors["model.name_or_path"], str(no_template), "no chat template", "conversational")
    spec["model"]["name_or_path"] = str(tiny_model)
    assert check(spec)[1].errors == []


def test_system_prompt_makes_prompts_conversational(tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    import shutil

    no_template = tmp_path / "m"
    shutil.copytree(tiny_model, no_template)
    (no_template / "chat_template.jinja").unlink(missing_ok=True)
    cfg = no_template / "tokenizer_config.json"
    cfg.write_text(json.dumps({k: v for k, v in json.loads(cfg.read_text()).items() if k != "chat_template"}))
    spec = smoke_dict(no_template)
    spec["dataset"]["system_prompt"] = "Be brief."
    assert "model.name_or_path" in rejected(spec, data_dir)


def test_unknown_trl_field_suggests_the_real_name(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, num_generation=8), data_dir)
    assert_names(errors["training.num_generation"], 8, "not a GRPOConfig field", "'num_generations'")


def test_wrong_type_for_trl_field(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, max_completion_length="long"), data_dir)
    assert_names(errors["training.max_completion_length"], "long", "must be of type int")


def test_numeric_strings_are_accepted_for_numbers(tiny_model: Path) -> None:
    spec, report = check(smoke_dict(tiny_model, learning_rate="1e-3"))
    assert report.errors == []
    assert spec.training["learning_rate"] == pytest.approx(1e-3)


def test_ranges_and_cross_field_rules(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(
        smoke_dict(
            tiny_model,
            learning_rate=-1.0,
            temperature=0,
            auto_find_batch_size=True,
            sync_ref_model=True,
            log_completions_hub_repo="me/x",
        ),
        data_dir,
    )
    assert "must be > 0" in errors["training.learning_rate"].message
    assert "must be > 0" in errors["training.temperature"].message
    assert "not supported by GRPO" in errors["training.auto_find_batch_size"].message
    assert "needs beta > 0" in errors["training.sync_ref_model"].message
    assert "needs log_completions: true" in errors["training.log_completions_hub_repo"].message


def test_eval_needs_eval_data_and_divisible_eval_batch(tiny_model: Path, data_dir: Path) -> None:
    errors = rejected(smoke_dict(tiny_model, eval_strategy="steps", eval_steps=5), data_dir)
    assert "needs eval data" in errors["training.eval_strategy"].message
    spec = smoke_dict(tiny_model, eval_strategy="steps", eval_steps=5, per_device_eval_batch_size=6)
    spec["dataset"]["eval_data_files"] = spec["dataset"]["data_files"]
    errors = rejected(spec, data_dir)
    assert (
        "not divisible by num_generations_eval/num_generations (8)"
        in errors["training.per_device_eval_batch_size"].message
    )


def test_dataset_and_model_paths(tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["model"]["build_tiny"] = False
    spec["model"]["name_or_path"] = "./no/such/model"
    spec["dataset"]["data_files"] = str(tmp_path / "missing.jsonl")
    errors = rejected(spec, data_dir)
    assert "does not exist" in errors["model.name_or_path"].message
    assert "build_tiny" in errors["model.name_or_path"].message
    assert "does not exist" in errors["dataset.data_files"].message


def test_malformed_dataset_file(tiny_model: Path, data_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": oops}\n')
    spec = smoke_dict(tiny_model)
    spec["dataset"]["data_files"] = str(bad)
    errors = rejected(spec, data_dir)
    assert "line 2 is not valid JSON" in errors["dataset.data_files"].message


def test_backend_checks(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["backend"] = {"kind": "cloud", "num_processes": 3, "gpus": [0, 0], "accelerate_config": "zero9"}
    errors = rejected(spec, data_dir)
    assert "must be one of local" in errors["backend.kind"].message
    assert "TRL preset" in errors["backend.accelerate_config"].message
    assert "backend.gpus" not in errors  # a kind no backend runs gets no backend's checks, only its kind error
    spec["backend"]["kind"] = "local"
    errors = rejected(spec, data_dir)
    assert "distinct GPU indices" in errors["backend.gpus"].message
    assert "TRL preset" in errors["backend.accelerate_config"].message


def test_every_error_is_reported_at_once(tiny_model: Path, data_dir: Path) -> None:
    spec = smoke_dict(tiny_model, loss_type="foo", scale_rewards="x", num_generations=3)
    spec["dataset"]["prompt_column"] = "nope"
    errors = rejected(spec, data_dir)
    assert {
        "training.loss_type",
        "training.scale_rewards",
        "training.per_device_train_batch_size",
        "dataset.prompt_column",
    } <= set(errors)


def test_an_output_dir_the_job_could_not_create_launches_nothing(
    tiny_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    """The job would train, then fail to save: refused before anything starts."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for value, fragment in (
        (str(tmp_path / ("d" * 300)), "over 255 bytes"),
        (str(a_file / "out"), "which is a file, not a folder"),
    ):
        err = rejected({**smoke_dict(tiny_model), "output_dir": value}, data_dir)["output_dir"]
        assert_names(err, value, fragment)
