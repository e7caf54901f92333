"""Estimates for clusters: memory per GPU sharded over every process of every node, ZeRO-3 communication, the weight
sync to vLLM and the generation length in the time per step, and the node count that fits a Slurm run."""

from __future__ import annotations

import copy
from typing import Any

from grpo_dashboard.checks import hardware
from grpo_dashboard.checks.model_shape import KNOWN
from grpo_dashboard.spec.run_spec import RunSpec

H100X4 = hardware.Flavor("h100x4", "H100", 4, 79.1, 0.0, 989, 3350)


def countdown(**backend: Any) -> RunSpec:
    """philschmid's Qwen2.5-1.5B countdown recipe (4×H100: 3 ZeRO-3 training processes + 1 vLLM GPU), in the TRL of
    the time's terms: each micro-batch generated its own 8 completions of one prompt (steps_per_generation 1)."""
    return RunSpec.from_dict(
        {
            "name": "countdown",
            "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "dtype": "bfloat16"},
            "dataset": {"path": "Jiayi-Pan/Countdown-Tasks-3to4"},
            "rewards": [{"name": "format"}],
            "training": {
                "per_device_train_batch_size": 8,
                "gradient_accumulation_steps": 8,
                "steps_per_generation": 1,
                "gradient_checkpointing": True,
                "beta": 0.04,
                "max_completion_length": 768,
                "num_generations": 8,
                "max_steps": 400,
                "bf16": True,
            },
            "backend": backend
            or {"kind": "local", "num_processes": 3, "accelerate_config": "zero3", "gpus": [0, 1, 2]},
            "generation": {"server_gpus": [3]},
        }
    )


def step(spec: RunSpec, flavor: hardware.Flavor = H100X4) -> hardware.TimeEstimate:
    shape = KNOWN["qwen2.5-1.5b"]
    return hardware.estimate_time(shape, hardware.workload(spec, shape, prompt_tokens=128), flavor)


def test_a_4xh100_zero3_run_lands_near_its_measured_45_to_60_s_per_step() -> None:
    t = step(countdown())
    # philschmid.de/mini-deepseek-r1, the recipe's source: "a single step takes around 45-60s" on 4x H100; within 30 %
    assert 45 * 0.7 <= t.step_s <= 60 * 1.3, t
    literal = countdown()  # the recipe's numbers read as today's TRL reads them: 1 completion per micro-batch
    literal.training.update(per_device_train_batch_size=1)
    del literal.training["steps_per_generation"]
    # One generation round instead of eight: less work than the authors' run (9 s here). It once passed the band
    # above only because the weight sync was charged 20 ms per tensor, which is not how TRL 1.16 syncs.
    assert step(literal).step_s < t.step_s
    assert t.parts["ZeRO-3/FSDP communication"] > 1.0
    # TRL 1.16: a few HTTP requests and one packed NCCL stream (3 GB over NVLink) after 339 ZeRO-3 gathers.
    assert 0.1 < t.parts["weight sync to vLLM"] < 1.0
    plain = countdown()
    plain.backend.accelerate_config = None
    assert "ZeRO-3/FSDP communication" not in step(plain).parts and step(plain).step_s < t.step_s


def test_generation_length_drives_the_step_time() -> None:
    short, long = countdown(), countdown()
    short.training["max_completion_length"], long.training["max_completion_length"] = 256, 4096
    assert step(long).parts["generation"] > 10 * step(short).parts["generation"]


def test_zero3_across_nodes_pays_the_network() -> None:
    one = countdown(kind="slurm", nodes=1, gpus_per_node=8, accelerate_config="zero3")
    one.generation = None
    two = countdown(kind="slurm", nodes=2, gpus_per_node=4, accelerate_config="zero3")
    two.generation = None
    flavor = hardware.Flavor("8xh100", "H100", 8, 79.1, 0.0, 989, 3350)
    assert step(two, flavor).parts["ZeRO-3/FSDP communication"] > step(one, flavor).parts["ZeRO-3/FSDP communication"]


def test_memory_is_sharded_over_every_process_of_every_node() -> None:
    spec = countdown(kind="slurm", nodes=2, gpus_per_node=8, accelerate_config="zero3")
    spec.generation = None
    shape = KNOWN["qwen2.5-7b"]
    w = hardware.workload(spec, shape, prompt_tokens=128)
    assert w.processes == 16 and w.zero == 3 and w.nodes == 2
    memory = hardware.estimate_memory(shape, w)
    assert abs(memory.parts["weights"] - shape.params * 2 / 16 / hardware.GIB) < 1e-6


def test_a_slurm_run_is_estimated_on_its_nodes_and_the_node_count_that_fits_is_named() -> None:
    spec = countdown(kind="slurm", nodes=1, gpus_per_node=8, accelerate_config="zero2", constraint="a100")
    spec.generation = None
    spec.model.name_or_path = "Qwen/Qwen2.5-14B-Instruct"
    report = hardware.estimate(spec, shape=KNOWN["qwen2.5-14b"], prompt_tokens=128)
    assert report.chosen is not None and report.chosen.name == "slurm 1×8 A100" and not report.chosen.fits
    assert report.recommended is not None and report.recommended.fits
    more = copy.deepcopy(spec)
    more.backend.nodes = int(report.recommended.name.split()[1].split("×")[0])
    assert more.backend.nodes > 1
    assert hardware.estimate(more, shape=KNOWN["qwen2.5-14b"], prompt_tokens=128).chosen.fits
    assert "Slurm nodes assumed to hold A100 GPUs" in report.to_text()


def test_a_server_node_is_counted_apart_from_the_training_nodes() -> None:
    spec = countdown(kind="slurm", nodes=3, gpus_per_node=8, accelerate_config="zero3")
    spec.generation.server_gpus, spec.generation.server_nodes = None, 1
    w = hardware.workload(spec, KNOWN["qwen2.5-1.5b"], prompt_tokens=128)
    assert (w.processes, w.server_gpus, w.nodes) == (16, 8, 2)
    report = hardware.estimate(spec, shape=KNOWN["qwen2.5-1.5b"], prompt_tokens=128)
    assert report.chosen.name == "slurm 3×8 H100" and report.chosen.fits
