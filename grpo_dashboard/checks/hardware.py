"""Hardware and cost guidance for Hugging Face Jobs: the GPU memory a GRPO run needs, the cheapest flavor that fits,
how long the run takes, what it costs, and the timeout to give the job.

Memory per GPU (GiB = 2**30 bytes). P = parameters, w = bytes per weight (2 for bf16/fp16, 4 for fp32), N = processes,
B = per_device_train_batch_size, C = max_completion_length, T = prompt + completion tokens, G = completions generated
at once per GPU (B × steps_per_generation), h / i / L / V = hidden size / MLP size / layers / vocabulary:
  weights      P·w                                      (÷N with ZeRO-3 / FSDP)
  gradients    P·w                                      (÷N with ZeRO-2/3)
  optimizer    2·P·w: AdamW's two moments, in the weights' dtype as torch keeps them (÷N with ZeRO-1/2/3)
  with ZeRO / FSDP and mixed precision the three are 16 bytes per parameter instead (cluster_estimate: 2 + 2 + 12
               with DeepSpeed, fp32 master weights and moments; 4 + 4 + 8 with FSDP), sharded as above
  LoRA         instead of the three above for the adapter (A = r·(9h + 2·kv·hd + 3i)·L parameters): frozen base
               P·w + 16 bytes per adapter parameter (fp32 weight, gradient, two moments)
  reference    P·w when beta > 0 without LoRA (TRL keeps a frozen copy; with LoRA the base model is the reference)
  activations  B·T·L·h·2 bytes with gradient checkpointing (each layer's input), plus one layer recomputed:
               B·T·(16h + 8i) bytes;
               B·T·L·(16h + 8i) bytes without checkpointing
  logits       3 · B·C·V·2 bytes (logits, the log-softmax kept for backward, its gradient)
  KV cache     G·T·L·2·kv·hd·2 bytes while generating with transformers
  overhead     1 GiB CUDA context, then +10 % for allocator fragmentation and library workspaces
vLLM colocate reserves `vllm_gpu_memory_utilization` of each card; training must fit in the rest. vLLM server mode
needs its own GPUs besides the training processes (one, or the `generation` section's server GPUs / nodes), except
when the spec names a server of its own (vllm_server_base_url / vllm_server_host): that one runs outside the run's
GPUs. N is the world size across every training node. CPU flavors fit only tiny test models without vLLM.

Time per step = generation (C decoding steps, each bounded by reading the weights from GPU memory, at least 20 ms
per step with transformers' generate and 4 ms with vLLM, shared over num_iterations) + training (2·P per token per
forward; backward 2×, recompute 1× with checkpointing, one more forward for the reference model or old log-probs,
at 30 % of the GPU's peak bf16 FLOP/s) + ZeRO-3/FSDP communication + the weight sync to vLLM + 10 %.
Generation also reads each sequence's KV cache per decoded token (the longer the completions, the slower each step),
and runs once per `steps_per_generation` micro-batches (rounds = gradient_accumulation_steps × B ÷ G).
ZeRO-3 / FSDP gather the sharded weights for every pass over the model (forward, recompute, backward, reference
forward) and reduce-scatter the gradients, per micro-batch: bytes P·w·(N−1)/N each at the interconnect's effective
bandwidth (NVLink for SXM cards, PCIe otherwise, the inter-node network once training spans nodes), plus a latency per
gathered module (7 per layer) and pass. vLLM gets the new weights once per generation, as TRL 1.16 sends them
(cluster_estimate.weight_sync): to a server a few HTTP requests and one packed NCCL stream of every tensor over the
link (plus one gather per tensor under ZeRO-3); colocated, 1 ms per tensor (12 per layer) and a copy in GPU memory.
Total = startup (5 min for the image and `uv` installing torch and trl, plus the model download at 150 MB/s) +
steps × step time. Timeout = total × 1.5, at least 30 min, rounded up to 15 min. Every number is an estimate: the
UI and the CLI show the parts and the assumptions.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

from grpo_dashboard.checks.cluster_estimate import (  # re-exported: the estimator's vocabulary
    CLUSTER_SOURCE,
    cluster_flavor,
    sharded_states,
    sharding_communication,
    weight_sync,
)
from grpo_dashboard.checks.model_shape import DTYPE_BYTES, ModelShape, model_shape
from grpo_dashboard.spec.flavors import (  # noqa: F401 - re-exported: the estimator's public vocabulary
    BUILTIN_FLAVORS,
    GPUS,
    Flavor,
    flavors,
    format_duration,
    parse_timeout,
)
from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import HF_JOBS, SLURM, RunSpec, server_nodes, training_nodes, world_size

GIB = 2**30
CONTEXT_GIB = 1.0
FRAGMENTATION = 0.10
MFU = 0.30
STARTUP_S = 300.0
DOWNLOAD_BPS = 150e6
TIMEOUT_BUFFER = 1.5
MIN_TIMEOUT_S = 30 * 60
UNKNOWN_TIMEOUT_S = 2 * 3600
DEFAULT_PROMPT_TOKENS = 256
TINY_PARAMS = 100_000_000  # below this, CPU flavors are worth recommending (test models)


@dataclass
class Workload:
    """The numbers of a run that drive memory and time, read from the spec with TRL's defaults filled in."""

    batch: int
    grad_accum: int
    gen_batch: int
    num_generations: int
    completion: int
    prompt: int
    iterations: int
    beta: float
    checkpointing: bool
    lora_r: int | None
    vllm_mode: str | None
    vllm_share: float
    processes: int
    zero: int
    weight_bytes: int
    steps: int | None
    notes: list[str] = field(default_factory=list)
    server_gpus: int = 0
    nodes: int = 1
    fsdp: bool = False
    mixed: bool = True  # bf16 or fp16 training (TRL's default: bf16 unless fp16)
    server_off_node: bool = False  # the vLLM server's GPUs are on another node than training's


def workload(
    spec: RunSpec, shape: ModelShape, prompt_tokens: int | None = None, num_rows: int | None = None
) -> Workload:
    """Read the spec's training settings (TRL defaults where unset)."""
    from grpo_dashboard.spec import trl_fields

    t = spec.training
    eff = lambda name: trl_fields.effective(t, name)  # noqa: E731
    notes: list[str] = []
    batch, ga = int(eff("per_device_train_batch_size") or 8), int(eff("gradient_accumulation_steps") or 1)
    procs = world_size(spec)
    spg = eff("steps_per_generation")
    gbs = eff("generation_batch_size")
    gen_batch = int(gbs) // procs if gbs else batch * int(spg or ga)
    dtype = spec.model.dtype if spec.model.dtype != "auto" else shape.dtype
    if prompt_tokens is None:
        prompt_tokens = DEFAULT_PROMPT_TOKENS
        notes.append(f"prompt length assumed {DEFAULT_PROMPT_TOKENS} tokens (no dataset sample to measure)")
    acc = str(spec.backend.accelerate_config or "")
    zero = 3 if acc.startswith("fsdp") or acc == "zero3" else int(acc[-1]) if re.fullmatch(r"zero[12]", acc) else 0
    use_vllm = bool(eff("use_vllm"))
    mode = str(eff("vllm_mode")) if use_vllm else None
    if spec.generation is not None and spec.backend.kind != HF_JOBS:
        use_vllm, mode = True, "server"
    share = float(eff("vllm_gpu_memory_utilization") or 0.3) if mode == "colocate" else 0.0
    g = spec.generation
    external = bool(t.get("vllm_server_base_url") or t.get("vllm_server_host")) and g is None
    if mode != "server" or external:
        served = 0  # no server, or one of the user's own outside the run's GPUs
    elif g is not None and g.server_gpus:
        served = len(g.server_gpus)
    elif g is not None and spec.backend.kind == SLURM:
        served = server_nodes(spec) * max(1, spec.backend.gpus_per_node or 1)
    else:
        served = 1
    steps: int | None = int(eff("max_steps") or -1)
    iterations = int(eff("num_iterations") or 1)
    gens = int(eff("num_generations") or 8)
    if steps is not None and steps <= 0:
        if num_rows:
            per_step = batch * ga * procs
            steps = math.ceil(float(eff("num_train_epochs") or 1) * num_rows * gens * iterations / per_step)
        else:
            steps = None
            notes.append("number of steps unknown (max_steps not set and the dataset size is unknown)")
    return Workload(
        batch,
        ga,
        gen_batch,
        gens,
        int(eff("max_completion_length") or 512),
        int(prompt_tokens),
        iterations,
        float(eff("beta") or 0.0),
        bool(eff("gradient_checkpointing")),
        spec.model.lora.r if spec.model.lora else None,
        mode,
        share,
        procs,
        zero if procs > 1 else 0,
        DTYPE_BYTES.get(dtype, 2),
        steps,
        notes,
        served,
        training_nodes(spec),
        acc.startswith("fsdp") and procs > 1,
        eff("bf16") is not False or bool(eff("fp16")),
        mode == "server" and (external or server_nodes(spec) > 0),
    )


def lora_params(shape: ModelShape, r: int) -> int:
    """Adapter parameters of LoRA rank r on all linear layers of every block."""
    kv = shape.kv_heads * shape.head_dim
    q = shape.heads * shape.head_dim
    per_layer = (shape.hidden + q) * 2 + (shape.hidden + kv) * 2 + 3 * (shape.hidden + shape.intermediate)
    return r * per_layer * shape.layers


@dataclass
class MemoryEstimate:
    """Memory per GPU, by part, in GiB."""

    parts: dict[str, float]
    total: float
    vllm_share: float
    processes: int
    extra_gpus: int

    def fits(self, flavor: Flavor) -> bool:
        """True when the run fits each device of `flavor` (with enough devices)."""
        return self.enough_gpus(flavor) and self.fits_memory(flavor)

    def fits_memory(self, flavor: Flavor) -> bool:
        """True when one device of `flavor` holds a training process."""
        return self.total <= flavor.memory_gib * (1.0 - self.vllm_share)

    def gpus_needed(self) -> int:
        """Training processes plus the vLLM server's GPUs."""
        return self.processes + self.extra_gpus

    def enough_gpus(self, flavor: Flavor) -> bool:
        """True when `flavor` has a GPU for every training process and for the vLLM server."""
        return not flavor.is_gpu or flavor.gpus >= self.gpus_needed()

    def gpu_shortfall(self, flavor: Flavor) -> str:
        """Why `flavor` lacks GPUs for this run ("needs N+1 GPUs ..."), or "" when it has enough."""
        if self.enough_gpus(flavor):
            return ""
        server = f"+{self.extra_gpus}" if self.extra_gpus else ""
        why = (
            f" ({self.processes} training + {self.extra_gpus} for the vLLM server)"
            if self.extra_gpus
            else " (one per training process)"
        )
        return f"needs {self.processes}{server} GPUs{why}; {flavor.name} has {flavor.gpus}"

    def card_needed(self) -> float:
        """Card memory (GiB) this needs, counting the share reserved by a colocated vLLM."""
        return self.total / (1.0 - self.vllm_share)


def estimate_memory(shape: ModelShape, w: Workload) -> MemoryEstimate:
    """Per-GPU memory need by the documented formula (module docstring)."""
    p, wb, n = shape.params, w.weight_bytes, w.processes
    parts: dict[str, float] = {}
    if w.lora_r:
        a = lora_params(shape, w.lora_r)
        parts["weights (frozen base)"] = p * wb / (n if w.zero >= 3 else 1)
        parts[f"LoRA adapter r={w.lora_r} ({a / 1e6:.1f}M params, fp32 + grads + AdamW)"] = a * 16
    elif w.zero:
        wt, gr, op = sharded_states(w)
        parts["weights"] = p * wt / (n if w.zero >= 3 else 1)
        parts["gradients"] = p * gr / n if w.zero >= 2 else p * gr
        parts["optimizer (fp32 master weights + AdamW moments)" if op == 12 else "optimizer (AdamW moments)"] = (
            p * op / n
        )
        if w.beta > 0:
            parts["reference model (beta > 0)"] = p * wb / (n if w.zero >= 3 else 1)
    else:
        parts["weights"] = p * wb
        parts["gradients"] = p * wb
        parts["optimizer (AdamW moments)"] = 2 * p * wb
        if w.beta > 0:
            parts["reference model (beta > 0)"] = p * wb / (n if w.zero >= 3 else 1)
    tokens = w.batch * (w.prompt + w.completion)
    layer = 16 * shape.hidden + 8 * shape.intermediate
    if w.checkpointing:
        parts["activations (checkpointed)"] = tokens * (shape.layers * shape.hidden * 2 + layer)
    else:
        parts["activations"] = tokens * shape.layers * layer
    parts["logits"] = 3 * w.batch * w.completion * shape.vocab * 2
    if w.vllm_mode is None:
        kv = shape.kv_heads * shape.head_dim
        parts["KV cache (generation)"] = w.gen_batch * (w.prompt + w.completion) * shape.layers * 2 * kv * 2
    gib = {k: v / GIB for k, v in parts.items()}
    subtotal = sum(gib.values()) + CONTEXT_GIB
    gib["CUDA context"] = CONTEXT_GIB
    gib["fragmentation and workspaces (+10 %)"] = subtotal * FRAGMENTATION
    return MemoryEstimate(gib, subtotal * (1 + FRAGMENTATION), w.vllm_share, n, w.server_gpus)


@dataclass
class TimeEstimate:
    """Expected duration of a run on one flavor."""

    step_s: float
    steps: int | None
    startup_s: float
    total_s: float | None
    parts: dict[str, float] = field(default_factory=dict)


def estimate_time(shape: ModelShape, w: Workload, flavor: Flavor) -> TimeEstimate:
    """Seconds per step and in total, by the documented formula (module docstring)."""
    weights = shape.params * w.weight_bytes
    active = shape.params * shape.active_fraction
    floor = 0.004 if w.vllm_mode else (0.02 if flavor.is_gpu else 0.005)
    bandwidth = flavor.bandwidth_gbs * 1e9 * 0.7
    decode = max(weights * shape.active_fraction / bandwidth, floor)
    kv = shape.kv_heads * shape.head_dim * shape.layers * 2 * 2  # bytes of K and V per token
    # Per decoded token, every sequence of the round reads its KV cache (on average half the completion long).
    kv_read = w.gen_batch * (w.prompt + w.completion / 2) * kv / bandwidth
    rounds = w.grad_accum * w.batch / max(1, w.gen_batch)
    generation = rounds * w.completion * (decode + kv_read) / max(1, w.iterations)
    passes = 1 + 2 + (1 if w.checkpointing else 0) + (1 if (w.beta > 0 or w.iterations > 1) else 0)
    if w.lora_r:
        passes -= 1  # no weight gradients for the frozen base
    flops = 2 * active * passes * w.batch * w.grad_accum * (w.prompt + w.completion)
    training = flops / (flavor.tflops * 1e12 * MFU)
    parts = {"generation": generation, "training compute": training}
    if w.zero >= 3 and w.processes > 1:
        parts["ZeRO-3/FSDP communication"] = sharding_communication(shape, w, flavor)
    if w.vllm_mode:
        parts["weight sync to vLLM"] = weight_sync(shape, w, flavor) / max(1, w.iterations)
    step = sum(parts.values()) * 1.1
    startup = STARTUP_S + weights / DOWNLOAD_BPS
    return TimeEstimate(step, w.steps, startup, startup + step * w.steps if w.steps else None, parts)


@dataclass
class FlavorFit:
    """How one flavor would do for a run."""

    name: str
    price_per_hour: float
    fits: bool
    need_gib: float
    memory_gib: float
    hours: float | None
    cost_usd: float | None
    note: str = ""
    step_s: float | None = None
    step_parts: dict[str, float] = field(default_factory=dict)


@dataclass
class HardwareReport:
    """Everything the form and the CLI show about hardware for a spec."""

    model: ModelShape | None
    memory: MemoryEstimate | None
    workload: Workload | None
    fits: list[FlavorFit]
    chosen: FlavorFit | None
    recommended: FlavorFit | None
    reason: str
    timeout_s: int
    timeout_reason: str
    warnings: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        from dataclasses import asdict

        return asdict(self)

    def to_text(self) -> str:
        """A readable explanation (markdown-compatible) of the estimate, the choice and the cost."""
        lines: list[str] = []
        if self.model is None:
            lines.append("Model size unknown: no memory estimate. Use a Hub id or a local directory with config.json.")
        else:
            m = self.model
            lines.append(
                f"Model: {m.billions:.2f}B parameters, {m.layers} layers, hidden {m.hidden}, dtype {m.dtype} "
                f"(from {m.source})."
            )
        if self.memory is not None and self.workload is not None:
            w = self.workload
            how = f"LoRA r={w.lora_r}" if w.lora_r else "full fine-tuning"
            zero = f", ZeRO-{w.zero} over {w.processes} processes" if w.zero else ""
            lines.append(
                f"Memory per GPU ({how}{zero}, batch {w.batch}, {w.prompt}+{w.completion} tokens): "
                f"~{self.memory.total:.1f} GiB"
            )
            lines += [f"  - {k}: {v:.2f} GiB" for k, v in self.memory.parts.items() if v >= 0.005]
            if self.memory.vllm_share:
                lines.append(
                    f"  - vLLM colocate reserves {self.memory.vllm_share:.0%} of each card: needs a "
                    f"{self.memory.card_needed():.1f} GiB card"
                )
        for label, fit in (("Chosen", self.chosen), ("Recommended", self.recommended)):
            if fit is not None:
                verdict = "fits" if fit.fits else (fit.note if fit.note.startswith("needs") else "does NOT fit")
                cost = (
                    f", ~{format_duration(fit.hours * 3600)} ≈ ${fit.cost_usd:.2f}"
                    if fit.hours is not None and fit.cost_usd is not None
                    else ""
                )
                price = f"${fit.price_per_hour:.2f}/h, " if fit.price_per_hour else ""
                duration = (
                    f", ~{format_duration(fit.hours * 3600)}"
                    if fit.hours is not None and fit.cost_usd is None
                    else cost
                )
                lines.append(f"{label}: {fit.name} ({price}{fit.memory_gib:.0f} GiB per device) {verdict}{duration}")
        fit = self.chosen or self.recommended
        if fit is not None and fit.step_s is not None:
            parts = ", ".join(f"{k} {v:.1f} s" for k, v in fit.step_parts.items() if v >= 0.05)
            lines.append(f"Time per step on {fit.name}: ~{fit.step_s:.1f} s ({parts}; +10 %)")
        if self.reason:
            lines.append(f"Why: {self.reason}")
        lines.append(f"Timeout: {format_duration(self.timeout_s)} ({self.timeout_reason})")
        lines += [f"Warning: {w}" for w in self.warnings]
        lines += [f"Option: {s}" for s in self.suggestions]
        return "\n".join(lines)


def estimate(
    spec: RunSpec,
    base_dir: str | None = None,
    prompt_tokens: int | None = None,
    num_rows: int | None = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
    live_prices: bool = False,
    shape: ModelShape | None = None,
) -> HardwareReport:
    """Estimate memory, time and cost of a spec on every flavor; recommend the cheapest that fits, with the reason."""
    table = flavors(token, endpoint, live_prices)
    shape = shape or model_shape(
        spec.model.name_or_path, spec.model.revision, base_dir, spec.model.build_tiny, token, endpoint
    )
    chosen_name = spec.backend.flavor
    cluster = cluster_flavor(spec)
    if cluster is not None:
        table = {cluster.name: cluster, **table}
        chosen_name = cluster.name
    if shape is None:
        warnings = ["model size unknown: no memory or cost estimate"]
        timeout, reason = _timeout(spec, None, warnings)
        return HardwareReport(None, None, None, [], None, None, "", timeout, reason, warnings)
    w = workload(spec, shape, prompt_tokens, num_rows)
    memory = estimate_memory(shape, w)
    fits = [_fit(shape, w, memory, f) for f in table.values()]
    bf16 = spec.training.get("bf16") is not False
    ok = [f for f in fits if f.fits and _eligible(table[f.name], shape, bf16)]
    recommended = (
        min(ok, key=lambda f: (f.cost_usd if f.cost_usd is not None else f.price_per_hour, f.price_per_hour))
        if ok
        else None
    )
    reason = ""
    if recommended is not None:
        basis = "estimated total cost" if recommended.cost_usd is not None else "price per hour"
        reason = (
            f"{recommended.name} needs ~{recommended.need_gib:.1f} of {recommended.memory_gib:.0f} GiB per "
            f"device; cheapest by {basis} of the {len(ok)} flavor(s) that fit"
        )
    chosen = next((f for f in fits if f.name == chosen_name), None)
    warnings = list(w.notes)
    if chosen is not None and not chosen.fits:
        shortfall = memory.gpu_shortfall(table[chosen.name])
        if shortfall and memory.fits_memory(table[chosen.name]):
            warnings.append(
                f"{chosen.name} lacks GPUs: the run {shortfall} (~{memory.card_needed():.1f} GiB per "
                f"device fits its {chosen.memory_gib:.0f} GiB)"
                + (f"; {recommended.name} has enough" if recommended else "")
            )
        else:
            warnings.append(
                f"{chosen.name} does not fit: ~{memory.card_needed():.1f} GiB needed per device, "
                f"{chosen.memory_gib:.0f} GiB available" + (f"; {recommended.name} fits" if recommended else "")
            )
    if chosen is not None and table[chosen.name].gpu == "T4" and bf16:
        warnings.append("T4 GPUs do not support bf16; set training.bf16: false and fp16: true, or choose l4x1")
    if cluster is not None:
        recommended = _nodes_that_fit(spec, shape, prompt_tokens, num_rows, cluster)
        served = server_nodes(spec)
        reason = (
            f"{recommended.name}: the fewest nodes on which the run fits"
            + (f" ({served} of them serving vLLM)" if served else "")
            if recommended is not None
            else "no node count up to 16 fits; see the options"
        )
        warnings.append(
            f"Slurm nodes assumed to hold {cluster.gpu} GPUs ({cluster.memory_gib:.0f} GiB each); name "
            f"the GPU in backend.constraint (e.g. h100, a100) to estimate for another"
        )
    timeout, timeout_reason = _timeout(spec, chosen or recommended, warnings)
    suggestions = (
        _suggestions(spec, shape, w, memory, table, prompt_tokens, num_rows)
        if (chosen is not None and not chosen.fits) or recommended is None
        else []
    )
    return HardwareReport(
        shape,
        memory,
        w,
        sorted(fits, key=lambda f: f.price_per_hour),
        chosen,
        recommended,
        reason,
        timeout,
        timeout_reason,
        warnings,
        suggestions,
    )


def _nodes_that_fit(
    spec: RunSpec, shape: ModelShape, prompt_tokens: int | None, num_rows: int | None, cluster: Flavor
) -> FlavorFit | None:
    """The fewest Slurm nodes (same per-node GPUs and sharding) on which the run fits, or None up to 16."""
    for n in range(1, 17):
        trial = copy.deepcopy(spec)
        trial.backend.nodes = n + server_nodes(spec)
        flavor = cluster_flavor(trial)
        if flavor is None:
            return None
        w = workload(trial, shape, prompt_tokens, num_rows)
        memory = estimate_memory(shape, w)
        if memory.fits(flavor):
            return _fit(shape, w, memory, flavor)
    return None


def _eligible(flavor: Flavor, shape: ModelShape, bf16: bool) -> bool:
    """Flavors worth recommending: CPUs only for tiny test models, T4s only without bf16 (they lack it)."""
    if not flavor.is_gpu:
        return shape.params < TINY_PARAMS
    return flavor.bf16 or not bf16


def cpu_can_train(shape: ModelShape, w: Workload) -> bool:
    """Whether a CPU flavor can run this at all: a tiny test model, without vLLM (which needs a GPU)."""
    return shape.params < TINY_PARAMS and w.vllm_mode is None


def _fit(shape: ModelShape, w: Workload, memory: MemoryEstimate, flavor: Flavor) -> FlavorFit:
    fits = memory.fits(flavor) and (flavor.is_gpu or cpu_can_train(shape, w))
    t = estimate_time(shape, w, flavor)
    hours = t.total_s / 3600 if t.total_s is not None else None
    note = "" if flavor.is_gpu else "CPU only: for tiny test models"
    if not flavor.is_gpu and not cpu_can_train(shape, w):
        note = f"CPU only: a {shape.billions:.1f}B" + (" vLLM" if w.vllm_mode else "") + " run needs GPUs"
    if memory.fits_memory(flavor) and not memory.enough_gpus(flavor):
        note = memory.gpu_shortfall(flavor)
    priced = hours is not None and flavor.source != CLUSTER_SOURCE  # a cluster's own nodes have no price here
    cost = hours * flavor.price_per_hour if priced and hours is not None else None
    return FlavorFit(
        flavor.name,
        flavor.price_per_hour,
        fits,
        memory.card_needed(),
        flavor.memory_gib,
        hours,
        cost,
        note,
        t.step_s,
        t.parts,
    )


def _timeout(spec: RunSpec, fit: FlavorFit | None, warnings: list[str]) -> tuple[int, str]:
    try:
        if spec.backend.kind == SLURM:
            from grpo_dashboard.spec.slurm_options import time_seconds

            given = time_seconds(spec.backend.time)  # Slurm's own time limit is the timeout
        else:
            given = parse_timeout(spec.backend.timeout)
    except ValueError:
        given = None  # reported by validation; estimate as if unset
    expected = fit.hours * 3600 if fit is not None and fit.hours is not None else None
    where = fit.name if fit is not None else ""  # known whenever `expected` is
    if given is not None:
        if expected is not None and given < expected:
            warnings.append(
                f"timeout {format_duration(given)} is shorter than the estimated run time "
                f"{format_duration(expected)} on {where}: the job would be killed"
            )
        return given, "set in the spec"
    if expected is None:
        return UNKNOWN_TIMEOUT_S, "run time unknown: default 2h; set training.max_steps or backend.timeout"
    timeout = max(MIN_TIMEOUT_S, expected * TIMEOUT_BUFFER)
    timeout = int(math.ceil(timeout / 900) * 900)
    return timeout, f"estimated {format_duration(expected)} on {where} × {TIMEOUT_BUFFER} buffer"


def _suggestions(
    spec: RunSpec,
    shape: ModelShape,
    w: Workload,
    memory: MemoryEstimate,
    table: dict[str, Flavor],
    prompt_tokens: int | None,
    num_rows: int | None,
) -> list[str]:
    out: list[str] = []
    if not w.lora_r:
        lora = copy.deepcopy(spec)
        from grpo_dashboard.spec.run_spec import LoraSpec

        lora.model.lora = LoraSpec()
        m = estimate_memory(shape, workload(lora, shape, prompt_tokens, num_rows))
        best = _cheapest(m, table)
        if best:
            out.append(f"LoRA (model.lora, r=16) needs ~{m.card_needed():.1f} GiB per GPU: fits {best}")
    for n in (2, 4, 8):
        z = copy.deepcopy(spec)
        z.backend.num_processes, z.backend.accelerate_config = n, "zero3"
        m = estimate_memory(shape, workload(z, shape, prompt_tokens, num_rows))
        best = _cheapest(m, table)
        if best:
            out.append(
                f"ZeRO-3 over {n} GPUs (backend.accelerate_config: zero3, num_processes: {n}) needs "
                f"~{m.card_needed():.1f} GiB per GPU: fits {best}"
            )
            break
    if w.batch > 1:
        out.append("a smaller per_device_train_batch_size (with more gradient_accumulation_steps) lowers activations")
    return out


def _cheapest(memory: MemoryEstimate, table: dict[str, Flavor]) -> str | None:
    ok = [f for f in table.values() if f.is_gpu and memory.fits(f)]
    return min(ok, key=lambda f: f.price_per_hour).name if ok else None


def hardware_main(argv: list[str]) -> int:
    """`python -m grpo_dashboard hardware SPEC [--json] [--live] [--all]`: print the estimate and recommendation."""
    import argparse
    import json
    from pathlib import Path

    from grpo_dashboard.errors import SpecError
    from grpo_dashboard.spec.run_spec import load_spec

    parser = argparse.ArgumentParser(
        prog="python -m grpo_dashboard hardware",
        description="Estimate GPU memory, time and cost of a run spec on HF Jobs.",
    )
    parser.add_argument("spec", help="Run spec YAML file.")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    parser.add_argument("--live", action="store_true", help="Fetch live prices from the Hub's hardware list.")
    parser.add_argument("--all", action="store_true", help="List every flavor with fit, time and cost.")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        print(str(exc))
        return 1
    report = estimate_for_spec(spec, Path(args.spec).resolve().parent, live_prices=args.live)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
        return 0
    print(report.to_text())
    if args.all:
        print(f"\n{'FLAVOR':<16} {'$/H':>6} {'FITS':>5} {'GIB':>6} {'TIME':>8} {'COST':>8}")
        for f in report.fits:
            t = format_duration(f.hours * 3600) if f.hours is not None else "?"
            c = f"${f.cost_usd:.2f}" if f.cost_usd is not None else "?"
            print(
                f"{f.name:<16} {f.price_per_hour:>6.2f} {'yes' if f.fits else 'no':>5} {f.memory_gib:>6.0f} "
                f"{t:>8} {c:>8}"
            )
    return 0


def estimate_for_spec(
    spec: RunSpec,
    base_dir: Any = None,
    token: str | bool | None = None,
    endpoint: str | None = None,
    live_prices: bool = False,
) -> HardwareReport:
    """`estimate` with the prompt length and row count measured from local dataset files when the spec has them."""
    prompt_tokens, rows = None, None
    d = spec.dataset
    if d.data_files:
        from pathlib import Path

        from grpo_dashboard.checks.dataset_files import DatasetFileError, read_sample

        files = [d.data_files] if isinstance(d.data_files, str) else list(d.data_files)
        base = Path(base_dir) if base_dir else Path.cwd()
        try:
            sample = read_sample([str(p if (p := user_path(f)).is_absolute() else base / p) for f in files])
        except DatasetFileError:
            sample = None
        if sample is not None:
            rows = sample.num_rows
            texts = [str(r.get(d.prompt_column, "")) for r in sample.rows] if not d.prompt_template else []
            if texts:
                # ~3.5 characters per token for English BPE vocabularies, plus the chat template's few tokens
                prompt_tokens = int(sum(len(t) for t in texts) / len(texts) / 3.5) + 16
    return estimate(spec, base_dir, prompt_tokens, rows, token, endpoint, live_prices)
