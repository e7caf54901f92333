"""Each backend's `backend:` fields live in its package (`launch/<kind>/options.py`); the spec's `BackendSpec` is
their union, computed from the light table launch/kinds.py, so a new field or backend needs no spec edit."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing
from dataclasses import dataclass, field

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch import kinds
from grpo_dashboard.spec import forms
from grpo_dashboard.spec.run_spec import BackendSpec, RunSpec, backend_doc, backend_fields

COMMON = ("kind", "env", "secrets")


def test_backend_spec_is_the_common_fields_around_every_kinds_options() -> None:
    names = [f.name for f in dataclasses.fields(BackendSpec)]
    union: list[str] = []
    for options in kinds.OPTIONS.values():
        union += [f.name for f in dataclasses.fields(options) if f.name not in union]
    assert names == ["kind", *union, "env", "secrets"]
    for options in kinds.OPTIONS.values():  # each kind's fields with its own types and defaults
        hints, spec_hints = typing.get_type_hints(options), typing.get_type_hints(BackendSpec)
        for f in dataclasses.fields(options):
            assert spec_hints[f.name] == hints[f.name]
            assert getattr(BackendSpec(), f.name) == getattr(options(), f.name)


def test_every_backend_field_has_help_and_the_form_and_docstring_show_it() -> None:
    shown = {f.key: f.help for f in forms.form_fields() if f.key.startswith("backend.")}
    assert shown  # the form shows backend fields
    for f in dataclasses.fields(BackendSpec):
        text = f.metadata.get("help", "")
        assert isinstance(text, str) and text.strip(), f"backend.{f.name} has no help"
        assert f"`{f.name}`: {text}" in (BackendSpec.__doc__ or "")
        if f"backend.{f.name}" in shown:
            assert shown[f"backend.{f.name}"] == text


@dataclass
class KubernetesOptions:
    """`kubernetes`: a pod in `k8s_namespace` (a made-up fourth backend)."""

    k8s_namespace: str | None = field(default=None, metadata={"help": "kubernetes: the namespace of the pod."})
    num_processes: int = field(default=1, metadata={"help": "Processes (one per GPU) started by accelerate."})


def test_a_new_backend_or_field_needs_no_spec_edit() -> None:
    table = {**kinds.OPTIONS, "kubernetes": KubernetesOptions}
    fields = backend_fields(table)
    names = [name for name, _, _ in fields]
    assert names == [f.name for f in dataclasses.fields(BackendSpec)][:-2] + ["k8s_namespace", "env", "secrets"]
    k8s = {name: f for name, _, f in fields}["k8s_namespace"]
    assert k8s.default is None and k8s.metadata["help"] == "kubernetes: the namespace of the pod."
    assert "a made-up fourth backend" in backend_doc(table)
    spec_class = dataclasses.make_dataclass("BackendSpec", fields)
    assert spec_class(kind="kubernetes", k8s_namespace="ml").k8s_namespace == "ml"  # type: ignore[call-arg]


def test_a_shared_field_must_agree_across_kinds() -> None:
    @dataclass
    class Clashing:
        num_processes: int = 8

    with pytest.raises(TypeError, match=r"backend\.num_processes: clash's Options .* = 8, local's as int = 1"):
        backend_fields({**kinds.OPTIONS, "clash": Clashing})


def test_parsing_errors_name_the_backend_fields_as_before() -> None:
    with pytest.raises(SpecError) as info:
        RunSpec.from_dict({"name": "x", "model": {"name_or_path": "m"}, "backend": {"nodse": 2, "flavor": 3}})
    text = str(info.value)
    assert "backend.nodse" in text and "Did you mean 'nodes'?" in text
    assert "backend.flavor" in text and "must be str or null, not int" in text
    spec = RunSpec.from_dict({"name": "x", "backend": {"kind": "slurm", "nodes": 2, "extra_sbatch": ["--mem=0"]}})
    assert spec.to_dict()["backend"] == {"kind": "slurm", "nodes": 2, "extra_sbatch": ["--mem=0"]}
    assert RunSpec.from_yaml(spec.to_job_yaml()) == spec


def test_the_options_and_the_spec_import_no_launch_code() -> None:
    code = (
        "import sys, json; import grpo_dashboard.spec.run_spec; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('grpo_dashboard.launch'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == sorted(
        [
            "grpo_dashboard.launch",
            "grpo_dashboard.launch.kinds",
            *(f"grpo_dashboard.launch.{kind}{leaf}" for kind in kinds.KINDS for leaf in ("", ".options")),
        ]
    )
