"""The cluster parts of the hardware estimate (`hardware.py` documents the whole model): the model states ZeRO and FSDP
keep per GPU, what ZeRO-3 / FSDP sharding costs in communication per step, the weight sync to vLLM as TRL 1.16 does
it, and a Slurm allocation taken as a flavor.

Model states with DeepSpeed ZeRO and mixed precision (Rajbhandari et al., 2020, "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", section 3.1): 2 bytes of bf16/fp16 weights, 2 of gradients and K = 12 of
optimizer state (the fp32 master weights and Adam's two fp32 moments), 16 bytes per parameter; ZeRO-1 shards the 12,
ZeRO-2 the gradients too, ZeRO-3 the weights too. FSDP with mixed precision keeps the same 16 bytes, as fp32 weights
(accelerate upcasts a bf16 model for FSDP's mixed precision), fp32 gradients and two fp32 moments, all sharded.

Weight sync (trl/generation/vllm_generation.py `sync_weights`, vllm_client.py `update_named_params`, TRL 1.16): to a
server, the main process announces every tensor in one `update_weights` request (with start/finish/reset-cache
requests around it) and streams them all in one packed NCCL broadcast, so the cost is a few HTTP round trips plus
the bytes over the link between the training GPU and the server's (NVLink on the node, the network across nodes);
under ZeRO-3 each parameter is first gathered on its own (one collective each). Colocated, each tensor is handed to
vLLM's `load_weights` in the same process.
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
SYNC_REQUESTS = 4  # start_weight_update, update_weights, finish_weight_update, reset_prefix_cache
HTTP_REQUEST_S = 0.010  # one request to the vLLM server (same cluster)
SYNC_SERVER_S = SYNC_REQUESTS * HTTP_REQUEST_S  # the fixed cost of one sync to a server
SYNC_COLOCATE_S = 0.001  # per tensor: vLLM's load_weights in the training process
# Bytes per parameter of the model states (weights, gradients, optimizer) with mixed precision.
DEEPSPEED_STATES = (2, 2, 12)
FSDP_STATES = (4, 4, 8)
FP32_STATES = (4, 4, 8)


def sharded_states(w: Any) -> tuple[int, int, int]:
    """Bytes per parameter of weights, gradients and optimizer state under ZeRO / FSDP (module docstring)."""
    if w.fsdp:
        return FSDP_STATES
    return DEEPSPEED_STATES if w.mixed else FP32_STATES


def weight_sync(shape: ModelShape, w: Any, flavor: Flavor) -> float:
    """Seconds one weight sync to vLLM takes, as TRL 1.16 does it (module docstring)."""
    tensors = shape.layers * TENSORS_PER_LAYER + 3
    weights = shape.params * w.weight_bytes
    if w.vllm_mode != "server":
        return tensors * SYNC_COLOCATE_S + weights / (flavor.bandwidth_gbs * 1e9 * 0.7)
    link = NVLINK_GBS.get(flavor.gpu or "", PCIE_GBS)
    if w.server_off_node:
        link = min(link, INTERNODE_GBS)
    gathers = tensors * (INTERNODE_LATENCY_S if w.nodes > 1 else GATHER_LATENCY_S) if w.zero >= 3 else 0.0
    return SYNC_SERVER_S + weights / (link * 1e9) + gathers


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
