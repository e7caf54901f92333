"""Validation as named checks: every check leaves the spec as it was, names are unique, each problem carries the
fields its check involves, and the form marks fields from that list (not from words in the message)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from grpo_dashboard.checks import validation
from grpo_dashboard.checks.named import CheckInput, run_checks
from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.launch import backends, runs
from grpo_dashboard.spec import forms
from grpo_dashboard.spec.run_spec import RunSpec

from .conftest import REPO, SMOKE_SPEC

SMOKE = yaml.safe_load(SMOKE_SPEC.read_text())


def smoke_with(**sections: Any) -> dict[str, Any]:
    """The smoke spec with some sections updated (dicts merged, other values replaced)."""
    data = copy.deepcopy(SMOKE)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


BAD_SPECS = {
    "bad training values": smoke_with(
        training={
            "learning_rate": "1e-3",
            "num_generations": 3,
            "beta": 0,
            "sync_ref_model": True,
            "top_p": 2,
            "max_steps": "10",
            "auto_find_batch_size": True,
            "num_generation": 4,
            "loss_type": "nope",
            "seed": "x",
            "eval_strategy": "steps",
            "vllm_importance_sampling_clip_min": 3.0,
            "output_dir": "/x",
            "use_vllm": True,
        }
    ),
    "explicit generation batch": smoke_with(training={"generation_batch_size": "10", "epsilon_high": 0.1}),
    "eval data": smoke_with(
        dataset={"eval_data_files": SMOKE["dataset"]["data_files"], "prompt_template": "{nope"},
        training={"per_device_eval_batch_size": 3, "eval_strategy": "steps"},
    ),
    "model and rewards": smoke_with(
        name="",
        model={"name_or_path": "./no/such/dir", "dtype": "float8", "chat_template": "{% if %}"},
        rewards=[
            {"name": "x y"},
            {"name": "dup", "builtin": "nope"},
            {"name": "dup", "function": "missing.py:f"},
            {"name": "rm", "model": "../not a model"},
        ],
    ),
    "hf_jobs": smoke_with(
        backend={"kind": "hf_jobs", "flavor": "a10g-larg", "timeout": "1m", "gpus": [0]},
        training={"push_to_hub": True, "hub_token": "hf_x"},
    ),
    "slurm": smoke_with(backend={"kind": "slurm", "nodes": 0, "time": "forever"}),
    "mixture": smoke_with(
        dataset={"mixture": [{"path": "a/b", "fraction": 0.5}, {"bad": 1}], "streaming": True},
        health={"guard_persist": 0, "webhook_url": "ftp://x"},
        tags=["", "ok"],
    ),
    "environment": smoke_with(backend={"env": {"MY_TOKEN": "x", "1BAD": "y"}, "secrets": ["HF_TOKEN", "NOT_SET_X"]}),
}


def spec_cases() -> list[tuple[str, dict[str, Any]]]:
    examples = [(p.name, yaml.safe_load(p.read_text())) for p in sorted((REPO / "examples").glob("*.yaml"))]
    return examples + list(BAD_SPECS.items())


@pytest.mark.parametrize(("name", "data"), spec_cases(), ids=[n for n, _ in spec_cases()])
def test_no_check_changes_the_spec(name: str, data: dict[str, Any]) -> None:
    spec = RunSpec.from_dict(data)
    given = repr(spec)
    inp = CheckInput(validation.typed_view(spec), REPO)
    for check in validation.checks_with(backends.checks_for(spec.backend.kind)):
        seen = repr(inp.spec)
        list(check.run(inp))
        assert repr(inp.spec) == seen, f"{check.name} changed the spec it checks ({name})"
    assert repr(spec) == given, name


def test_validate_reads_typed_values_but_leaves_them_as_given() -> None:
    spec = RunSpec.from_dict(smoke_with(training={"learning_rate": "1e-3", "max_steps": "2"}))
    assert runs.validate(spec, REPO).errors == []
    assert spec.training["learning_rate"] == "1e-3" and spec.training["max_steps"] == "2"


def test_bad_specs_are_rejected_and_left_as_given() -> None:
    """The bad specs above really are bad (the unchanged-spec test ran checks that found something), and
    validate leaves each as it was."""
    for name, data in BAD_SPECS.items():
        try:
            spec = RunSpec.from_dict(data)
        except SpecError as exc:  # a bad case must get past the parser to reach the checks
            raise AssertionError(f"{name}: {exc}") from exc
        given = repr(spec)
        assert runs.validate(spec, REPO).errors, name
        assert repr(spec) == given, name


@pytest.mark.parametrize("kind", backends.KINDS)
def test_check_names_are_unique_and_fields_are_spec_paths(kind: str) -> None:
    every = validation.checks_with(backends.checks_for(kind))
    names = [c.name for c in every]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    roots = {
        "name",
        "model",
        "dataset",
        "rewards",
        "agent",
        "training",
        "backend",
        "generation",
        "health",
        "tags",
        "save_model",
        "output_dir",
    }
    for check in every:
        assert all(f.split(".")[0].split("[")[0] in roots for f in check.fields), (check.name, check.fields)


def test_each_backend_check_is_named_for_its_backend() -> None:
    """A backend's checks come from its package (names prefixed by its kind); the generic list names none."""
    for kind in backends.KINDS:
        assert all(c.name.startswith(f"{kind}.") for c in backends.checks_for(kind)), kind
    generic = {c.name.split(".")[0] for c in validation.CHECKS}
    assert not generic & set(backends.KINDS), generic


def test_each_problem_carries_its_checks_fields() -> None:
    spec = RunSpec.from_dict(smoke_with(training={"num_generations": 3}))
    errors, _ = run_checks(validation.CHECKS, CheckInput(validation.typed_view(spec), REPO))
    batch = next(e for e in errors if "not divisible by num_generations (3)" in e.message)
    assert batch.field == "training.per_device_train_batch_size"
    assert {"training.num_generations", "training.gradient_accumulation_steps"} <= set(batch.involves)
    placed, unplaced = forms.place_errors(errors, [f.key for f in forms.form_fields()])
    assert not unplaced
    assert any("num_generations (3)" in m for m in placed["training.per_device_train_batch_size"])
    pointer = "see training.per_device_train_batch_size: the problem there involves this field"
    assert pointer in placed["training.num_generations"]
    assert pointer in placed["training.gradient_accumulation_steps"]


def test_the_form_marks_involved_fields_not_words_in_the_message() -> None:
    keys = ["training.beta", "training.sync_ref_model", "training.num_generations", "agent", "agent.tools"]
    named_only = FieldError("training.sync_ref_model", True, "needs beta > 0 and num_generations")
    involved = FieldError(
        "training.sync_ref_model",
        True,
        "needs a reference model",
        involves=("training.sync_ref_model", "training.beta"),
    )
    in_section = FieldError("agent.tools[0]", "x.py:f", "points at x.py", involves=("agent",))
    placed, unplaced = forms.place_errors([named_only, involved, in_section], keys)
    assert placed == {
        "training.sync_ref_model": ["needs beta > 0 and num_generations", "needs a reference model"],
        "training.beta": ["see training.sync_ref_model: the problem there involves this field"],
        "agent.tools": ["points at x.py"],
    }
    assert unplaced == []


def test_a_problem_off_the_form_is_shown_once_on_the_first_field_it_involves() -> None:
    keys = ["training.beta", "training.num_generations"]
    off_form = FieldError(
        "training.vllm_mode", "x", "needs more generations", involves=("training.num_generations", "training.beta")
    )
    placed, unplaced = forms.place_errors([off_form], keys)
    assert placed == {
        "training.num_generations": ["training.vllm_mode: needs more generations"],
        "training.beta": ["see training.num_generations: the problem there involves this field"],
    }
    assert unplaced == []
