"""Checks of where a run's processes go that hold for every backend, and the parts the backends' own checks share
(`launch/<kind>/checks.py` use them): world size, accelerate presets, the vLLM server.

Each problem is a FieldError naming the field, the value, what is allowed and the fix, found before anything is
written or submitted. Nothing here knows a backend by its kind: a backend's checks come with its package.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

from grpo_dashboard.checks import gpu_probe
from grpo_dashboard.checks.named import CheckInput, collected
from grpo_dashboard.checks.spec_paths import resolve as _resolve
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.run_spec import (
    ACCELERATE_CONFIGS,
    BACKENDS,
    SLURM,
    GenerationSpec,
    RunSpec,
    training_nodes,
    world_size,
)

FSDP_PRESETS = ("fsdp1", "fsdp2")


def backend_settings(inp: CheckInput) -> list[FieldError]:
    """The backend fields every backend reads: a known kind, the stall timeout, the process count, the accelerate
    config."""
    b = inp.spec.backend
    found: list[FieldError] = []
    err = found.append
    if b.kind not in BACKENDS:
        err(FieldError("backend.kind", b.kind, f"must be one of {', '.join(BACKENDS)}."))
    if b.stall_timeout_s is not None and not (math.isfinite(b.stall_timeout_s) and b.stall_timeout_s > 0):
        err(
            FieldError(
                "backend.stall_timeout_s",
                b.stall_timeout_s,
                "must be a positive number of seconds (e.g. 1800), or null to never call a silent job hung.",
            )
        )
    if b.num_processes < 1:
        err(FieldError("backend.num_processes", b.num_processes, "must be ≥ 1."))
    if b.accelerate_config and b.accelerate_config not in ACCELERATE_CONFIGS:
        if not _resolve(inp.base, b.accelerate_config).is_file():
            err(
                FieldError(
                    "backend.accelerate_config",
                    b.accelerate_config,
                    f"must be a TRL preset ({', '.join(ACCELERATE_CONFIGS)}) or an existing accelerate config file.",
                )
            )
    return found


def single_process_on_cpu(inp: CheckInput) -> list[FieldError]:
    """training.use_cpu with more than one process (for backends where each process is one GPU)."""
    b = inp.spec.backend
    if b.num_processes > 1 and inp.spec.training.get("use_cpu"):
        return [
            FieldError(
                "backend.num_processes",
                b.num_processes,
                "must be 1 with training.use_cpu: accelerate launches one process per GPU, and a CPU run "
                "is a single process. Remove use_cpu to train on GPUs, or set num_processes: 1.",
            )
        ]
    return []


def fsdp_preset(inp: CheckInput) -> list[FieldError]:
    """An FSDP preset needs torch.distributed where the job runs (the dashboard's own torch: local and Slurm)."""
    acc = inp.spec.backend.accelerate_config
    if acc in FSDP_PRESETS and not _fsdp_available():
        return [
            FieldError(
                "backend.accelerate_config",
                acc,
                "is an FSDP preset, but torch.distributed is not "
                "available in this torch build. Install a torch build with distributed support, or choose "
                "multi_gpu.",
            )
        ]
    return []


def server_needed(inp: CheckInput) -> list[FieldError]:
    """Server mode asked for without a `generation` section to start a server nor a server to use."""
    return collected(lambda err, _: _server_needed(inp.spec, err))


def _server_needed(spec: RunSpec, err: Any) -> None:
    g, t = spec.generation, spec.training
    eff = lambda name: trl_fields.effective(t, name)  # noqa: E731
    if g is None:
        if (
            eff("use_vllm")
            and eff("vllm_mode") == "server"
            and not (t.get("vllm_server_base_url") or t.get("vllm_server_host"))
        ):
            err(
                FieldError(
                    "training.vllm_mode",
                    "server",
                    "needs a vLLM server, but nothing starts one and none is "
                    "given: the job would wait vllm_server_timeout seconds and die with a connection error. "
                    "Add a `generation:` section (server_gpus locally, server_nodes on Slurm) so the backend "
                    "starts `trl vllm-serve`, or set training.vllm_server_base_url to a running server.",
                )
            )


def generation_common(spec: RunSpec, g: GenerationSpec, err: Any) -> bool:
    """The `generation` section's fields every server-starting backend reads; False when the rest cannot be
    checked (no tensor_parallel_size)."""
    t = spec.training
    eff = lambda name: trl_fields.effective(t, name)  # noqa: E731
    if eff("use_vllm") and eff("vllm_mode") == "colocate" and "vllm_mode" in t:
        err(
            FieldError(
                "training.vllm_mode",
                "colocate",
                "contradicts the generation section, which starts a vLLM "
                "server. Remove training.vllm_mode (the backend sets server mode), or remove `generation`.",
            )
        )
    if t.get("use_cpu"):
        err(
            FieldError(
                "training.use_cpu",
                True,
                "contradicts the generation section, which starts a vLLM server on GPUs. Remove `generation` for "
                "a CPU run, or remove training.use_cpu to train on GPUs.",
            )
        )
    if not 0 < g.gpu_memory_utilization <= 1:
        err(FieldError("generation.gpu_memory_utilization", g.gpu_memory_utilization, "must be in (0, 1], e.g. 0.9."))
    if not 0 < g.port < 65536:
        err(FieldError("generation.port", g.port, "must be a TCP port in 1..65535, e.g. 8000."))
    if g.tensor_parallel_size < 1:
        err(FieldError("generation.tensor_parallel_size", g.tensor_parallel_size, "must be ≥ 1."))
        return False
    return True


def server_split(g: GenerationSpec, count: int, where: str, err: Any) -> None:
    """The server's `count` GPUs (given by `where`) split into tensor_parallel_size × data_parallel_size."""
    tp, dp = g.tensor_parallel_size, g.data_parallel_size
    if count % tp:
        divisors = [d for d in range(1, count + 1) if count % d == 0]
        err(
            FieldError(
                "generation.tensor_parallel_size",
                tp,
                f"does not divide the {count} server GPU(s) "
                f"({where}); vLLM shards the model over tensor_parallel_size GPUs per replica. Use one of "
                f"{divisors}, or give the server a multiple of {tp} GPUs.",
            )
        )
    elif dp is not None and tp * dp != count:
        err(
            FieldError(
                "generation.data_parallel_size",
                dp,
                f"× tensor_parallel_size ({tp}) = {tp * dp}, but the "
                f"server has {count} GPU(s); set data_parallel_size to {count // tp} or leave it unset.",
            )
        )


def world_note(spec: RunSpec) -> str:
    """How the world size is counted, for messages."""
    if spec.backend.kind == SLURM:  # the one kind test left here: the message wording of training_checks
        return (
            f"{training_nodes(spec)} training node(s) × {max(1, spec.backend.gpus_per_node or 1)} process(es) "
            f"= {world_size(spec)}"
        )
    return f"{world_size(spec)}"


def gpu_count() -> int | None:
    """CUDA devices this process sees (CUDA_VISIBLE_DEVICES applied); None when it cannot be told (torch is not
    imported for it: checks/gpu_probe.py)."""
    return gpu_probe.gpu_count()


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _fsdp_available() -> bool:
    return gpu_probe.distributed_available()
