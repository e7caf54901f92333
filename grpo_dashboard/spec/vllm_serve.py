"""vLLM server mode as command lines: `trl vllm-serve` for a spec's generation section and the GPUs its training
takes. The backends put them in the job's plan (launch/vllm_server.py); `export-trl` prints them for a user who
starts both by hand."""

from __future__ import annotations

import sys
from pathlib import Path

from grpo_dashboard.spec.run_spec import RunSpec


def serve_command(spec: RunSpec) -> list[str]:
    """`trl vllm-serve` for the spec's generation section: the policy model (or `generation.model`), tensor and data
    parallel sizes, memory share and port."""
    g = spec.generation
    assert g is not None
    tp = g.tensor_parallel_size
    if g.server_gpus:
        count = len(g.server_gpus)
    else:  # Slurm: the server node's GPUs
        count = max(1, spec.backend.gpus_per_node or 1) * (g.server_nodes or 1)
    dp = g.data_parallel_size or max(1, count // tp)
    cmd = [
        trl_command(),
        "vllm-serve",
        "--model",
        g.model or spec.model.name_or_path,
        "--tensor_parallel_size",
        str(tp),
        "--data_parallel_size",
        str(dp),
        "--gpu_memory_utilization",
        str(g.gpu_memory_utilization),
        "--host",
        "0.0.0.0",
        "--port",
        str(g.port),
    ]
    if spec.model.revision and not g.model:
        cmd += ["--revision", spec.model.revision]
    if spec.model.dtype != "auto":
        cmd += ["--dtype", spec.model.dtype]
    if spec.model.trust_remote_code:
        cmd.append("--trust_remote_code")
    return cmd


def trl_command() -> str:
    """TRL's command line program of this Python environment (the one beside the interpreter, else `trl` on PATH)."""
    beside = Path(sys.executable).with_name("trl")
    return str(beside) if beside.is_file() else "trl"


def training_gpus(spec: RunSpec, visible: int | None) -> list[int] | None:
    """The GPUs a local server-mode run trains on: backend.gpus, else the first num_processes not serving."""
    if spec.backend.gpus:
        return list(spec.backend.gpus)
    served = set(spec.generation.server_gpus or []) if spec.generation else set()
    pool = [
        i
        for i in range(visible if visible is not None else spec.backend.num_processes + len(served))
        if i not in served
    ]
    return pool[: spec.backend.num_processes]
