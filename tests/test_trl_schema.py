"""The TRL schema the dashboard reads instead of importing trl (spec/trl_schema.py) is the real GRPOConfig's, and the
cross-field rules validation re-implements agree with the real GRPOConfig's own `__post_init__` checks.

This test process imports trl on purpose: it compares against the real classes."""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec import forms, trl_fields, trl_schema
from grpo_dashboard.spec.run_spec import RunSpec

from .conftest import REPO, SMOKE_DATA, smoke_dict


def _json(value: Any) -> Any:
    return json.loads(trl_schema.dumps(value))


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    return _json(trl_schema.build())


def test_the_schema_in_use_is_the_installed_trls(built: dict[str, Any]) -> None:
    assert trl_schema.schema()["configs"] == built["configs"]
    assert sorted(built["configs"]) == ["AsyncGRPOConfig", "GRPOConfig"]
    assert built["versions"] == trl_schema.installed_versions()


def test_installed_versions_are_a_loaded_modules_own_else_the_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata
    import types

    monkeypatch.setitem(sys.modules, "trl", types.SimpleNamespace(__version__="9.9.9"))
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    versions = trl_schema.installed_versions()
    assert versions == {"trl": "9.9.9", "transformers": importlib.metadata.version("transformers")}


def test_the_shipped_schema_is_the_pinned_trls(built: dict[str, Any]) -> None:
    shipped = json.loads(trl_schema.SHIPPED.read_text(encoding="utf-8"))
    if shipped["versions"] != built["versions"]:
        pytest.skip(
            f"the shipped schema is for {shipped['versions']}, this environment has {built['versions']}; "
            f"the schema in use is built for it (checked above)"
        )
    assert trl_schema.SHIPPED.read_text(encoding="utf-8") == trl_schema.dumps(built)
    installed = trl_schema.trl_dir()
    assert installed is not None
    for preset in (installed / "accelerate_configs").glob("*.yaml"):
        assert (trl_schema.PRESETS / preset.name).read_bytes() == preset.read_bytes(), preset.name


def test_fields_have_the_real_classes_python_types_defaults_and_choices() -> None:
    import dataclasses
    import enum

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    fields = trl_fields.grpo_fields()
    real = [f for f in dataclasses.fields(GRPOConfig) if f.init]
    assert list(fields) == [f.name for f in real]
    for f in real:
        ours = fields[f.name]
        kinds = trl_schema._flatten(hints[f.name])
        assert [getattr(k, "__name__", str(k)) for k in kinds] == [k.__name__ for k in ours.types], f.name
        for basic in (int, float, str, bool, list, dict, type(None)):
            assert (basic in kinds) == (basic in ours.types), f.name
        enums = [k for k in kinds if isinstance(k, type) and issubclass(k, enum.Enum)]
        if enums:
            assert [s.__members__ for s in ours.types if s.__name__ == enums[0].__name__] == [
                {str(e.value): e.value for e in enums[0]}
            ]
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        assert ours.default == (default.value if isinstance(default, enum.Enum) else default), f.name
    assert fields["lr_scheduler_type"].choices[0] == "linear" and fields["loss_type"].choices[0] == "grpo"
    assert forms._widget(fields["optim"].types, fields["optim"].choices) == "choice"
    assert forms._widget(fields["max_grad_norm"].types, None) == "float"


def test_a_schema_for_another_trl_is_built_once_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built: dict[str, Any]
) -> None:
    shipped = tmp_path / "shipped.json"
    other = {**built, "versions": {"trl": "0.0.1", "transformers": "0.0.1"}, "configs": {"GRPOConfig": []}}
    shipped.write_text(trl_schema.dumps(other), encoding="utf-8")
    monkeypatch.setattr(trl_schema, "SHIPPED", shipped)
    monkeypatch.setenv(trl_schema.CACHE_ENV, str(tmp_path / "cache"))
    trl_schema.schema.cache_clear()
    try:
        first = trl_schema.schema()  # the installed versions differ from the "shipped" ones: built in a subprocess
        assert first["configs"] == built["configs"]
        (cached,) = (tmp_path / "cache").glob("*.json")
        assert json.loads(cached.read_text(encoding="utf-8"))["versions"] == trl_schema.installed_versions()
        trl_schema.schema.cache_clear()

        def no_build() -> dict[str, Any]:
            raise AssertionError("built again instead of reading the cache")

        monkeypatch.setattr(trl_schema, "_build_in_subprocess", no_build)
        assert trl_schema.schema() == first
    finally:
        trl_schema.schema.cache_clear()


# Training sections and whether the real GRPOConfig accepts them (with the smoke preset's other settings, one
# process). Each one our validator must judge the same way: its re-implemented rules cannot drift from TRL's.
CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("the smoke preset", {}, True),
    ("batch not divisible by the group", {"per_device_train_batch_size": 12, "num_generations": 8}, False),
    ("batch divisible by the group", {"per_device_train_batch_size": 12, "num_generations": 6}, True),
    ("a group of one", {"num_generations": 1, "per_device_train_batch_size": 4}, False),
    ("generation batch and steps both", {"generation_batch_size": 32, "steps_per_generation": 2}, False),
    ("generation batch a multiple of the batch", {"generation_batch_size": 32}, True),
    ("generation batch not a multiple of the batch", {"generation_batch_size": 24}, False),
    ("steps per generation", {"steps_per_generation": 3}, True),
    ("auto batch size", {"auto_find_batch_size": True}, False),
    ("completions to the Hub without logging them", {"log_completions_hub_repo": "a/b"}, False),
    ("completions to the Hub, logged", {"log_completions_hub_repo": "a/b", "log_completions": True}, True),
    (
        "importance-sampling clip min above max",
        {"vllm_importance_sampling_clip_min": 3.0, "vllm_importance_sampling_clip_max": 2.0},
        False,
    ),
    (
        "importance-sampling clip min below max",
        {"vllm_importance_sampling_clip_min": 0.5, "vllm_importance_sampling_clip_max": 2.0},
        True,
    ),
    (
        "eval batch not divisible by the group",
        {"eval_strategy": "steps", "eval_steps": 5, "per_device_eval_batch_size": 3},
        False,
    ),
    (
        "eval batch divisible by the group",
        {"eval_strategy": "steps", "eval_steps": 5, "per_device_eval_batch_size": 16},
        True,
    ),
    (
        "eval group of its own",
        {"eval_strategy": "steps", "eval_steps": 5, "per_device_eval_batch_size": 3, "num_generations_eval": 3},
        True,
    ),
]


@pytest.mark.parametrize(("what", "training", "accepted"), CASES, ids=[c[0] for c in CASES])
def test_validation_and_the_real_grpoconfig_agree(
    what: str, training: dict[str, Any], accepted: bool, tmp_path: Path
) -> None:
    from trl import GRPOConfig

    spec_dict = smoke_dict(tmp_path / "tiny-not-built")
    spec_dict["model"] = {"name_or_path": str(tmp_path / "tiny"), "build_tiny": True, "dtype": "float32"}
    spec_dict["dataset"]["data_files"] = str(SMOKE_DATA)
    if "eval_strategy" in training:
        spec_dict["dataset"]["eval_data_files"] = str(SMOKE_DATA)
    spec_dict["training"].update(training)
    spec = RunSpec.from_dict(spec_dict)
    ours = [e for e in validate(spec, REPO).errors if e.field.startswith("training.")]
    try:
        GRPOConfig(output_dir=str(tmp_path / "out"), **spec_dict["training"])
        theirs = None
    except ValueError as exc:
        theirs = str(exc)
    assert (theirs is None) == accepted, (what, theirs)
    assert (not ours) == accepted, (what, [str(e) for e in ours])
