"""The memory, time and cost estimator against known configurations, and the hf_jobs checks of validation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.checks import hardware
from grpo_dashboard.checks.model_shape import KNOWN, from_config, from_directory, from_name, model_shape
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.run_spec import LoraSpec, RunSpec

from .conftest import REPO, SMOKE_DATA, smoke_dict, write_spec

QWEN25_05B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def hub_spec(model: str, flavor: str = "a100-large", **training: object) -> RunSpec:
    spec = RunSpec(name="est")
    spec.model.name_or_path = model
    spec.training.update(training)
    spec.backend.kind, spec.backend.flavor, spec.backend.namespace = "hf_jobs", flavor, "alice"
    return spec


def test_parameter_counts_match_the_published_sizes() -> None:
    assert KNOWN["qwen2.5-0.5b"].params == 494_032_768  # Qwen2.5-0.5B's model card: 0.49B
    assert abs(KNOWN["qwen2.5-7b"].params - 7.62e9) < 0.01e9
    assert abs(KNOWN["llama-3.1-8b"].params - 8.03e9) < 0.01e9
    shape = from_config(QWEN25_05B_CONFIG, "test")
    assert shape is not None and shape.params == KNOWN["qwen2.5-0.5b"].params and shape.dtype == "bfloat16"


def test_a_local_directory_gives_the_exact_count_from_safetensors_headers(tiny_model: Path) -> None:
    from safetensors import safe_open

    exact = 0
    with safe_open(str(tiny_model / "model.safetensors"), "pt") as f:
        for key in f.keys():  # safe_open has no __iter__
            exact += _numel(f.get_slice(key).get_shape())
    shape = from_directory(tiny_model)
    assert shape is not None and shape.params == exact and "safetensors" in shape.source
    assert model_shape(str(tiny_model)) == shape


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_offline_lookups_fall_back_to_the_table_then_to_the_name() -> None:
    assert from_name("Qwen/Qwen2.5-0.5B-Instruct").params == KNOWN["qwen2.5-0.5b"].params
    rough = from_name("someone/my-finetune-3B")
    assert rough is not None and rough.params == 3_000_000_000 and rough.source.startswith("rough")
    assert from_name("someone/no-size-here") is None
    assert model_shape("someone/no-size-here") is None  # HF_HUB_OFFLINE=1: no network, no guess


def test_half_billion_full_fine_tune_fits_a_24_gb_card_with_small_batches() -> None:
    spec = hub_spec(
        "Qwen/Qwen2.5-0.5B-Instruct",
        "a10g-large",
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=256,
        max_steps=100,
    )
    report = hardware.estimate(spec, prompt_tokens=128)
    assert report.memory is not None and report.chosen is not None
    parts = report.memory.parts
    p = KNOWN["qwen2.5-0.5b"].params
    assert parts["weights"] == pytest.approx(p * 2 / 2**30) and parts["gradients"] == parts["weights"]
    assert parts["optimizer (AdamW moments)"] == pytest.approx(2 * parts["weights"])
    assert report.memory.total < 10 and report.chosen.fits
    for name in ("l4x1", "a10g-small", "a10g-large"):
        assert report.memory.fits(hardware.BUILTIN_FLAVORS[name]), name
    assert report.recommended is not None and report.recommended.fits
    assert hardware.BUILTIN_FLAVORS[report.recommended.name].is_gpu  # a 0.5B model is not recommended a CPU
    assert "cheapest" in report.reason and report.recommended.name in report.reason


def test_seven_billion_full_fine_tune_does_not_fit_80_gb_without_lora_or_zero() -> None:
    recipe = {
        "num_generations": 8,
        "per_device_train_batch_size": 8,
        "max_completion_length": 1024,
        "use_vllm": True,
        "max_steps": 200,
    }  # the usual GRPO setup: vLLM colocated for generation
    full = hardware.estimate(hub_spec("Qwen/Qwen2.5-7B-Instruct", "a100-large", **recipe), prompt_tokens=256)
    assert full.chosen is not None and not full.chosen.fits
    assert any("does not fit" in w for w in full.warnings)
    assert any(s.startswith("LoRA") for s in full.suggestions) and any("ZeRO-3" in s for s in full.suggestions)
    # Weights + gradients + AdamW alone take 8 bytes per parameter in bf16: 57 GiB of the card's 79.
    m = full.memory
    assert m is not None
    states = m.parts["weights"] + m.parts["gradients"] + m.parts["optimizer (AdamW moments)"]
    assert states == pytest.approx(KNOWN["qwen2.5-7b"].params * 8 / 2**30)
    # Without vLLM it is still over 80 % of the card, and in fp32 it is far over.
    plain = hardware.estimate(hub_spec("Qwen/Qwen2.5-7B-Instruct", "a100-large", max_steps=200), prompt_tokens=256)
    assert plain.memory is not None and plain.memory.total > 0.8 * hardware.BUILTIN_FLAVORS["a100-large"].memory_gib
    fp32 = hub_spec("Qwen/Qwen2.5-7B-Instruct", "a100-large", max_steps=200)
    fp32.model.dtype = "float32"
    assert not hardware.estimate(fp32, prompt_tokens=256).chosen.fits  # type: ignore[union-attr]

    lora = hub_spec("Qwen/Qwen2.5-7B-Instruct", "a100-large", **recipe)
    lora.model.lora = LoraSpec(r=16)
    with_lora = hardware.estimate(lora, prompt_tokens=256)
    assert with_lora.chosen is not None and with_lora.chosen.fits
    zero = hub_spec("Qwen/Qwen2.5-7B-Instruct", "a100x4", **recipe)
    zero.backend.num_processes, zero.backend.accelerate_config = 4, "zero3"
    sharded = hardware.estimate(zero, prompt_tokens=256)
    assert sharded.chosen is not None and sharded.chosen.fits
    assert sharded.memory is not None and sharded.memory.parts["weights"] == pytest.approx(m.parts["weights"] / 4)


def test_recommendation_is_the_cheapest_fitting_flavor_and_cost_follows_price_and_time() -> None:
    spec = hub_spec("Qwen/Qwen2.5-1.5B-Instruct", "h200", max_steps=300)
    report = hardware.estimate(spec, prompt_tokens=200)
    fitting = [f for f in report.fits if f.fits and hardware.BUILTIN_FLAVORS[f.name].is_gpu]
    assert report.recommended is not None
    assert report.recommended.cost_usd == min(f.cost_usd for f in fitting if f.cost_usd is not None)
    for f in report.fits:
        assert f.hours is not None and f.cost_usd == pytest.approx(f.hours * f.price_per_hour)
    h200 = next(f for f in report.fits if f.name == "h200")
    h200x2 = next(f for f in report.fits if f.name == "h200x2")
    assert h200x2.cost_usd == pytest.approx(2 * h200.cost_usd)  # one process: the second GPU only costs


def test_timeout_is_the_estimated_run_time_with_a_buffer_and_a_given_one_is_checked() -> None:
    spec = hub_spec("Qwen/Qwen2.5-0.5B-Instruct", "l4x1", max_steps=2000)
    report = hardware.estimate(spec, prompt_tokens=128)
    assert report.chosen is not None and report.chosen.hours is not None
    expected = report.chosen.hours * 3600
    assert report.timeout_s >= expected * hardware.TIMEOUT_BUFFER and report.timeout_s % 900 == 0
    assert report.timeout_s < expected * hardware.TIMEOUT_BUFFER + 900
    assert "× 1.5" in report.timeout_reason and "Timeout:" in report.to_text()
    spec.backend.timeout = "30m"
    short = hardware.estimate(spec, prompt_tokens=128)
    assert short.timeout_s == 1800 and any("shorter than the estimated run time" in w for w in short.warnings)
    unknown = hardware.estimate(hub_spec("Qwen/Qwen2.5-0.5B-Instruct", "l4x1"), prompt_tokens=128)
    assert unknown.timeout_s == hardware.UNKNOWN_TIMEOUT_S and "unknown" in unknown.timeout_reason


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (7200, 7200),
        ("90m", 5400),
        ("2h", 7200),
        ("1.5h", 5400),
        ("1d", 86400),
        ("300s", 300),
        ("600", 600),
        (None, None),
    ],
)
def test_parse_timeout(value: object, seconds: int | None) -> None:
    assert hardware.parse_timeout(value) == seconds  # type: ignore[arg-type]


def test_parse_timeout_rejects_other_forms() -> None:
    with pytest.raises(ValueError, match="90m"):
        hardware.parse_timeout("two hours")


def test_flavors_offline_are_the_built_in_table() -> None:
    table = hardware.flavors(live=True)  # HF_HUB_OFFLINE=1: falls back at once
    assert table["a100-large"].price_per_hour == 2.50 and table["a100-large"].source == "built-in"
    assert table["h200x8"].gpus == 8 and not table["cpu-basic"].is_gpu


def _hf_spec_dict(tmp_path: Path, tiny: Path, **backend: object) -> dict:
    spec = smoke_dict(tiny)
    spec["model"] = {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}
    spec["training"] = {"max_steps": 50, "per_device_train_batch_size": 8, "num_generations": 8}
    spec["backend"] = {"kind": "hf_jobs", "flavor": "l4x1", "namespace": "alice", **backend}
    return spec


@pytest.mark.parametrize(
    ("backend", "field", "needle"),
    [
        ({"flavor": "a100-larg"}, "backend.flavor", "a100-large"),
        ({"flavor": "h100"}, "backend.flavor", "must be a Jobs flavor"),
        ({"timeout": "soon"}, "backend.timeout", "90m"),
        ({"timeout": 60}, "backend.timeout", "under 5 minutes"),
        ({"namespace": None}, "backend.namespace", "is required"),
        ({"num_processes": 2}, "backend.num_processes", "1 GPU"),
        ({"gpus": [0]}, "backend.gpus", "only applies to local"),
    ],
)
def test_validation_of_hf_jobs_backends(
    tmp_path: Path, tiny_model: Path, backend: dict, field: str, needle: str
) -> None:
    report = validate(RunSpec.from_dict(_hf_spec_dict(tmp_path, tiny_model, **backend)), REPO)
    assert [e for e in report.errors if e.field == field and needle in e.message], report.errors


def test_validation_accepts_a_good_hf_jobs_spec_and_warns_when_memory_does_not_fit(
    tmp_path: Path, tiny_model: Path
) -> None:
    good = validate(RunSpec.from_dict(_hf_spec_dict(tmp_path, tiny_model)), REPO)
    assert good.ok, good.errors
    big = _hf_spec_dict(tmp_path, tiny_model, flavor="a10g-large")
    big["model"] = {"name_or_path": "Qwen/Qwen2.5-7B-Instruct"}
    report = validate(RunSpec.from_dict(big), REPO)
    assert report.ok
    (warning,) = [w for w in report.warnings if w.field == "backend.flavor"]
    assert "does not fit" in warning.message and "LoRA" in warning.message


def test_validation_rejects_tokens_and_local_models_for_jobs(tmp_path: Path, tiny_model: Path) -> None:
    spec = _hf_spec_dict(tmp_path, tiny_model)
    spec["model"] = {"name_or_path": str(tiny_model)}
    spec["training"]["hub_token"] = "hf_" + "x" * 20
    spec["training"]["push_to_hub"] = True
    fields = {e.field: e for e in validate(RunSpec.from_dict(spec), REPO).errors}
    assert "Push it to the Hub" in fields["model.name_or_path"].message
    assert fields["training.hub_token"].value == "***"
    assert "training.hub_model_id" in fields


def test_hardware_cli_prints_the_estimate(tmp_path: Path, tiny_model: Path) -> None:
    spec = _hf_spec_dict(tmp_path, tiny_model)
    spec["dataset"]["data_files"] = str(SMOKE_DATA)
    path = write_spec(tmp_path / "spec.yaml", spec)
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "hardware", str(path), "--all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Memory per GPU" in proc.stdout and "Recommended:" in proc.stdout and "Timeout:" in proc.stdout
    assert "a100-large" in proc.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "hardware", str(path), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(as_json.stdout)
    assert data["recommended"]["fits"] and data["timeout_s"] >= hardware.MIN_TIMEOUT_S
