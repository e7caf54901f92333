"""Property-based tests over the run spec and its YAML loader: no input crashes the validator, and every invalid
spec yields a clear error and launches nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.launch.runs import launch, validate
from grpo_dashboard.spec.run_spec import RunSpec

from .conftest import SMOKE_SPEC

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["", "0", "1e-3", "-1", "nan", "inf", "../../etc/passwd", "dapo", "group", "a" * 300]),
)
yaml_values = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=12), st.integers(0, 5)), kids, max_size=4),
    ),
    max_leaves=12,
)

SMOKE = yaml.safe_load(SMOKE_SPEC.read_text())
PATHS = [
    ("name",),
    ("model",),
    ("model", "name_or_path"),
    ("model", "dtype"),
    ("model", "lora"),
    ("dataset",),
    ("dataset", "data_files"),
    ("dataset", "prompt_column"),
    ("dataset", "prompt_template"),
    ("rewards",),
    ("rewards", 0),
    ("rewards", 0, "weight"),
    ("rewards", 0, "params"),
    ("rewards", 0, "name"),
    ("training",),
    ("training", "num_generations"),
    ("training", "loss_type"),
    ("training", "learning_rate"),
    ("training", "per_device_train_batch_size"),
    ("training", "max_steps"),
    ("training", "eval_strategy"),
    ("training", "generation_batch_size"),
    ("training", "epsilon_high"),
    ("backend",),
    ("backend", "gpus"),
    ("backend", "num_processes"),
    ("backend", "kind"),
    ("health",),
    ("output_dir",),
]


def smoke_with(path: tuple[Any, ...], value: Any) -> Any:
    """The smoke spec with the value at `path` replaced."""
    data = copy.deepcopy(SMOKE)
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def check_clean(errors: list[FieldError]) -> None:
    for e in errors:
        assert isinstance(e, FieldError) and e.field and e.message, e
        assert len(e.message) < 2000


def validate_any(data: Any) -> list[FieldError] | None:
    """Parse + validate; None when the spec is valid. Only SpecError may escape the parser."""
    try:
        spec = RunSpec.from_dict(data)
    except SpecError as exc:
        check_clean(exc.errors)
        return exc.errors
    report = validate(spec)
    check_clean(report.errors + report.warnings)
    return report.errors or None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=yaml_values)
def test_arbitrary_data_never_crashes_the_parser_or_validator(data: Any) -> None:
    validate_any(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=yaml_values)
def test_mutated_smoke_spec_is_valid_or_clearly_rejected(path: tuple[Any, ...], value: Any) -> None:
    data = smoke_with(path, value)
    validate_any(data)


@pytest.mark.parametrize("path", [("model", "name_or_path"), ("dataset", "data_files"), ("output_dir",)])
def test_a_tilde_path_of_no_known_user_is_a_clear_error(path: tuple[Any, ...]) -> None:
    data = smoke_with(path, "~no_such_user_grpo/x.jsonl")  # Path.expanduser raises RuntimeError for an unknown user
    validate_any(data)


@pytest.mark.parametrize(
    "path, value",
    [
        (("model", "name_or_path"), "a" * 300),
        (("model", "name_or_path"), "./" + "b" * 300),
        (("dataset", "data_files"), "c" * 300 + ".jsonl"),
        (("output_dir",), "/tmp/" + "d" * 300),
        (("backend", "accelerate_config"), "e" * 300 + ".yaml"),
    ],
)
def test_a_path_too_long_to_look_up_is_an_error_naming_its_field(path: tuple[Any, ...], value: str) -> None:
    data = smoke_with(path, value)
    errors = validate_any(data)
    assert errors and ".".join(path) in {e.field for e in errors}, errors


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_yaml_text_is_a_spec_or_a_spec_error(text: str) -> None:
    try:
        spec = RunSpec.from_yaml(text)
    except SpecError as exc:
        check_clean(exc.errors)
        return
    check_clean(validate(spec).errors)


@pytest.mark.parametrize("path", PATHS[:12])
def test_invalid_specs_launch_nothing(path: tuple[Any, ...], data_dir: Path) -> None:
    data = smoke_with(path, {"surely": ["not", "valid"]} if path[-1] != "params" else {"nope": 1})
    if validate_any(data) is None:
        pytest.skip(f"{path} accepts a mapping")
    with pytest.raises(SpecError):
        launch(data)
    assert not data_dir.exists()
