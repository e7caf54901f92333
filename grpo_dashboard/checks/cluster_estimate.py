"""The cluster parts of the hardware estimate (`hardware.py` documents the whole model): what ZeRO-3 / FSDP sharding
costs in communication per step, the constants of the weight sync to vLLM, and a Slurm allocation taken as a flavor.
"""

from __future__ import annotations

from typing import Any

from grpo_dashboard.checks.model_shape import ModelShape
from grpo_dashboard.spec.flavors import GPUS, Flavor
from grpo_dashboard.spec.run_spec import SLURM, RunSpec

CLUSTER_SOURCE = "slurm cluster"  # the source of a Slurm allocation taken as a flavor (no price)
# Effective collective bandwidth (GB/s) a ZeRO-3 all-gather reaches per GPU: NVLink cards, PCIe cards, and between
# nodes (a 200-400 Gb/s InfiniBand/RoCE link shared by the node's GPUs).
NVLINK_GBS = {"H100": 120.0, "H200": 120.0, "A100": 80.0}
PCIE_GBS = 10.0
INTERNODE_GBS = 12.0
GATHER_LATENCY_S = 0.0005  # per gathered module and pass (ZeRO-3 fetches module by module)
INTERNODE_LATENCY_S = 0.001
MODULES_PER_LAYER = 7  # q, k, v, o, gate, up, down
TENSORS_PER_LAYER = 12  # the weight tensors of a block, as TRL's weight sync sends them (with biases and norms)
SYNC_SERVER_S = 0.020  # per tensor to a vLLM server: one HTTP call + one NCCL broadcast
SYNC_COLOCATE_S = 0.001


def sharding_communication(shape: ModelShape, w: Any, flavor: Flavor) -> float:
    """Seconds per step ZeRO-3 / FSDP spend gathering weights and reduce-scattering gradients.

    `w` is hardware.py's Workload; the model is in hardware.py's docstring.
    """
    gathers = 1 + 1 + (1 if w.checkpointing else 0) + (1 if (w.beta > 0 and not w.lora_r) else 0)
    collectives = gathers + (0 if w.lora_r else 1)  # + the gradients' reduce-scatter
    volume = shape.params * w.weight_bytes * (w.processes - 1) / w.processes
    gbs = NVLINK_GBS.get(flavor.gpu or "", PCIE_GBS)
    latency = GATHER_LATENCY_S
    if w.nodes > 1:
        gbs, latency = min(gbs, INTERNODE_GBS), INTERNODE_LATENCY_S
    per_micro = collectives * (volume / (gbs * 1e9) + shape.layers * MODULES_PER_LAYER * latency)
    return per_micro * w.grad_accum


def cluster_flavor(spec: RunSpec, nodes: int | None = None) -> Flavor | None:
    """A Slurm run's allocation as one flavor: nodes × gpus_per_node GPUs of the type `backend.constraint` names
    (H100 when it names none); None off Slurm or for CPU-only nodes."""
    b = spec.backend
    if b.kind != SLURM or not b.gpus_per_node:
        return None
    constraint = (b.constraint or "").upper()
    gpu = next(
        (g for g in sorted(GPUS, key=len, reverse=True) if g.replace(" ", "") in constraint.replace(" ", "")), "H100"
    )
    mem, tflops, bandwidth, bf16 = GPUS[gpu]
    n = nodes or b.nodes
    return Flavor(
        f"slurm {n}×{b.gpus_per_node} {gpu}",
        gpu,
        n * b.gpus_per_node,
        mem,
        0.0,
        tflops,
        bandwidth,
        bf16,
        CLUSTER_SOURCE,
    )
