"""Checks of where a run's processes go: world size, GPUs, accelerate presets, the vLLM server and the Slurm cluster.

Each problem is a FieldError naming the field, the value, what is allowed and the fix, found before anything is
written or submitted. The Slurm checks ask the cluster itself: `sinfo` for its partitions (node counts, time limits)
and `sbatch --test-only` with the run's own options, whose refusal text is shown as Slurm wrote it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec import trl_fields
from grpo_dashboard.spec.run_spec import HF_JOBS, LOCAL, SLURM, RunSpec, server_nodes, training_nodes, world_size
from grpo_dashboard.spec.slurm_options import sbatch_options, time_seconds

DEEPSPEED_PRESETS = ("zero1", "zero2", "zero3")
FSDP_PRESETS = ("fsdp1", "fsdp2")
SLURM_TIMEOUT_S = 20.0


def check_processes(spec: RunSpec, base: Path, gpu_count: int | None, err: Any, warn: Any) -> None:
    """GPU counts and accelerate presets of local and Slurm runs (HF Jobs containers install their own packages)."""
    b = spec.backend
    acc = b.accelerate_config
    if b.kind != HF_JOBS and acc in FSDP_PRESETS and not _fsdp_available():
        err(FieldError("backend.accelerate_config", acc, "is an FSDP preset, but torch.distributed is not available "
                       "in this torch build. Install a torch build with distributed support, or choose multi_gpu."))
    cpu = bool(spec.training.get("use_cpu"))
    if b.kind == LOCAL and not cpu and gpu_count is not None and b.gpus is None:
        served = len(spec.generation.server_gpus or []) if spec.generation else 0
        if b.num_processes > 1 and b.num_processes + served > gpu_count:
            need = f"{b.num_processes} training + {served} server GPU(s)" if served else f"{b.num_processes} GPU(s)"
            err(FieldError("backend.num_processes", b.num_processes,
                           f"needs {need}, but this machine shows {gpu_count} GPU(s) (CUDA_VISIBLE_DEVICES counts). "
                           f"Use at most {max(1, gpu_count - served)} process(es), one per GPU."))
    if b.kind == SLURM and b.num_processes not in (1, world_size(spec)):
        err(FieldError("backend.num_processes", b.num_processes,
                       f"is derived on Slurm: nodes × gpus_per_node = {world_size(spec)} training process(es). "
                       f"Remove num_processes, or change backend.nodes / backend.gpus_per_node."))


def check_generation(spec: RunSpec, gpu_count: int | None, err: Any) -> None:
    """The `generation` section (vLLM server mode), and server mode asked for without anything to start a server."""
    g, b, t = spec.generation, spec.backend, spec.training
    eff = lambda name: trl_fields.effective(t, name)  # noqa: E731
    if g is None:
        if eff("use_vllm") and eff("vllm_mode") == "server" and not (
                t.get("vllm_server_base_url") or t.get("vllm_server_host")):
            err(FieldError("training.vllm_mode", "server", "needs a vLLM server, but nothing starts one and none is "
                           "given: the job would wait vllm_server_timeout seconds and die with a connection error. "
                           "Add a `generation:` section (server_gpus locally, server_nodes on Slurm) so the backend "
                           "starts `trl vllm-serve`, or set training.vllm_server_base_url to a running server."))
        return
    if b.kind == HF_JOBS:
        err(FieldError("generation", "set", "is not supported on hf_jobs (one container, no second process to "
                       "serve). Use vllm_mode: colocate there, or run on local / slurm."))
        return
    if eff("use_vllm") and eff("vllm_mode") == "colocate" and "vllm_mode" in t:
        err(FieldError("training.vllm_mode", "colocate", "contradicts the generation section, which starts a vLLM "
                       "server. Remove training.vllm_mode (the backend sets server mode), or remove `generation`."))
    if t.get("use_cpu"):
        err(FieldError("generation", "set", "needs GPUs (vLLM serves on GPUs), but training.use_cpu is set. Remove "
                       "`generation` for a CPU run."))
    if not 0 < g.gpu_memory_utilization <= 1:
        err(FieldError("generation.gpu_memory_utilization", g.gpu_memory_utilization, "must be in (0, 1], e.g. 0.9."))
    if not 0 < g.port < 65536:
        err(FieldError("generation.port", g.port, "must be a TCP port in 1..65535, e.g. 8000."))
    if g.tensor_parallel_size < 1:
        err(FieldError("generation.tensor_parallel_size", g.tensor_parallel_size, "must be ≥ 1."))
        return
    if b.kind == LOCAL:
        gpus = g.server_gpus or []
        if g.server_nodes is not None:
            err(FieldError("generation.server_nodes", g.server_nodes, "only applies to Slurm runs; locally give "
                           "generation.server_gpus (GPU indices for the server)."))
        if not gpus:
            err(FieldError("generation.server_gpus", g.server_gpus, "is required locally: the GPU indices the vLLM "
                           "server uses, e.g. [3]; training uses the others."))
            return
        if any(i < 0 for i in gpus) or len(set(gpus)) != len(gpus):
            err(FieldError("generation.server_gpus", gpus, "must be distinct GPU indices ≥ 0, e.g. [2, 3]."))
            return
        both = sorted(set(gpus) & set(b.gpus or []))
        if both:
            err(FieldError("generation.server_gpus", gpus, f"overlaps backend.gpus {b.gpus} on GPU(s) {both}: "
                           f"the server and training would share a card. Give them separate GPUs, e.g. backend.gpus: "
                           f"{[i for i in (b.gpus or []) if i not in both] or [0]} and server_gpus: {gpus}."))
        count = len(gpus)
        if gpu_count is not None:
            need = count + (len(b.gpus) if b.gpus else b.num_processes)
            if max(gpus) >= gpu_count or need > gpu_count:
                err(FieldError("generation.server_gpus", gpus, f"needs {need} GPUs in all ({count} for the server, "
                               f"{need - count} for training), but this machine shows {gpu_count}."))
        where = "generation.server_gpus"
    else:
        nodes = server_nodes(spec)
        if g.server_gpus is not None:
            err(FieldError("generation.server_gpus", g.server_gpus, "only applies to local runs; on Slurm give "
                           "generation.server_nodes (the first node(s) of the allocation serve)."))
        if nodes > 1:
            err(FieldError("generation.server_nodes", nodes, "must be 1: `trl vllm-serve` serves from one node "
                           "(raise generation.data_parallel_size to use more of its GPUs)."))
            return
        if nodes < 1 or nodes >= b.nodes:
            err(FieldError("generation.server_nodes", nodes, f"must be at least 1 and leave a training node: with "
                           f"backend.nodes {b.nodes}, set server_nodes to 1..{b.nodes - 1} (or raise backend.nodes "
                           f"to {nodes + 1})."))
            return
        if not b.gpus_per_node:
            err(FieldError("backend.gpus_per_node", b.gpus_per_node, "is required with a generation section: vLLM "
                           "serves on GPUs. Set the GPUs of each node, e.g. 8."))
            return
        count = nodes * b.gpus_per_node
        where = "generation.server_nodes"
    tp, dp = g.tensor_parallel_size, g.data_parallel_size
    if count % tp:
        divisors = [d for d in range(1, count + 1) if count % d == 0]
        err(FieldError("generation.tensor_parallel_size", tp, f"does not divide the {count} server GPU(s) "
                       f"({where}); vLLM shards the model over tensor_parallel_size GPUs per replica. Use one of "
                       f"{divisors}, or give the server a multiple of {tp} GPUs."))
    elif dp is not None and tp * dp != count:
        err(FieldError("generation.data_parallel_size", dp, f"× tensor_parallel_size ({tp}) = {tp * dp}, but the "
                       f"server has {count} GPU(s); set data_parallel_size to {count // tp} or leave it unset."))


@dataclass
class Partition:
    """One partition as `sinfo` reports it."""

    name: str
    nodes: int
    time_limit_s: int | None
    up: bool
    default: bool


def partitions(timeout_s: float = SLURM_TIMEOUT_S) -> dict[str, Partition] | str:
    """The cluster's partitions by name, or the reason they could not be read (sinfo's own error text)."""
    try:
        done = subprocess.run(["sinfo", "--noheader", "--format=%P|%D|%l|%a"], capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if done.returncode != 0:
        return f"sinfo failed: {(done.stderr or done.stdout).strip()}"
    out: dict[str, Partition] = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4:
            continue
        name, nodes, limit, avail = parts
        default = name.endswith("*")
        name = name.rstrip("*")
        try:
            limit_s = time_seconds(limit) if limit not in ("infinite", "n/a") else None
        except ValueError:
            limit_s = None
        entry = out.get(name)
        count = int(nodes) if nodes.isdigit() else 0
        out[name] = Partition(name, count + (entry.nodes if entry else 0), limit_s, avail == "up", default)
    return out


def check_slurm(spec: RunSpec, errors: list[FieldError], warn: Any) -> None:
    """A Slurm run's fields, then the cluster: partition, node count and time limit from `sinfo`, and everything
    else by `sbatch --test-only` with the run's own options (its refusal text shown as it is)."""
    b = spec.backend
    err = errors.append
    before = len(errors)
    if b.nodes < 1:
        err(FieldError("backend.nodes", b.nodes, "must be ≥ 1."))
    if b.gpus_per_node is not None and b.gpus_per_node < 0:
        err(FieldError("backend.gpus_per_node", b.gpus_per_node, "must be ≥ 0 (0 or unset: CPU-only nodes)."))
    if b.cpus_per_task is not None and b.cpus_per_task < 1:
        err(FieldError("backend.cpus_per_task", b.cpus_per_task, "must be ≥ 1."))
    if b.gpus is not None:
        err(FieldError("backend.gpus", b.gpus, "only applies to local runs; Slurm allocates GPUs "
                       "(backend.gpus_per_node). Remove it."))
    for option in b.extra_sbatch or []:
        if not option.startswith("-") or "\n" in option:
            err(FieldError("backend.extra_sbatch", option, "must be sbatch options, one per item, each starting "
                           "with '-' (e.g. '--exclusive', '--mem=0')."))
    try:
        limit = time_seconds(b.time)
    except ValueError as exc:
        err(FieldError("backend.time", b.time, f"{exc}."))
        limit = None
    if spec.training.get("use_cpu") and b.gpus_per_node:
        warn(FieldError("training.use_cpu", True, f"trains on CPU although each node gets {b.gpus_per_node} GPU(s); "
                        f"remove use_cpu or backend.gpus_per_node.", "warning"))
    if len(errors) > before:
        return  # the cluster is asked only about a spec that is well formed
    if shutil.which("sbatch") is None:
        err(FieldError("backend.kind", SLURM, "needs Slurm's commands (sbatch, squeue, scontrol, scancel) on PATH, "
                       "and sbatch is not there. Run the dashboard on a login node of the cluster (or add Slurm's "
                       "bin directory to PATH), or choose backend.kind: local."))
        return
    parts = partitions()
    if isinstance(parts, str):
        err(FieldError("backend.partition", b.partition, f"could not be checked: {parts}. Check that the cluster "
                       f"answers (`sinfo`) from this machine."))
        return
    name = b.partition or next((p.name for p in parts.values() if p.default), None)
    part = parts.get(name or "")
    if b.partition and part is None:
        said = test_submission(spec)
        err(FieldError("backend.partition", b.partition, "is not a partition of this cluster"
                       + (f" (Slurm: {said})" if said else "") + f". Partitions: "
                       f"{', '.join(sorted(parts)) or '(none)'}; set backend.partition to one of them."))
        return
    if part is not None:
        if b.nodes > part.nodes:
            said = test_submission(spec)
            err(FieldError("backend.nodes", b.nodes, f"is more than the {part.nodes} node(s) of partition "
                           f"{part.name}" + (f" (Slurm: {said})" if said else "") + f". Use at most {part.nodes} "
                           f"node(s), or a partition with more."))
            return
        if limit is not None and part.time_limit_s is not None and limit > part.time_limit_s:
            err(FieldError("backend.time", b.time, f"is longer than partition {part.name}'s time limit "
                           f"({_hms(part.time_limit_s)}); Slurm would hold the job pending forever "
                           f"(PartitionTimeLimit). Use at most {_hms(part.time_limit_s)}, or another partition."))
            return
        if not part.up:
            warn(FieldError("backend.partition", part.name, "is not up; the job waits until it is.", "warning"))
    refusal = test_submission(spec)
    if refusal:
        low = refusal.lower()
        where = ("backend.account" if "account" in low else "backend.qos" if "qos" in low
                 else "backend.partition" if "partition" in low else "backend.time" if "time" in low
                 else "backend.nodes" if "node" in low else "backend")
        value = {"backend.account": b.account, "backend.qos": b.qos, "backend.partition": b.partition,
                 "backend.time": b.time, "backend.nodes": b.nodes}.get(where, b.extra_sbatch)
        err(FieldError(where, value, f"is refused by Slurm (`sbatch --test-only`): {refusal} Fix the value (ask "
                       f"`sacctmgr show assoc user=$USER` for your accounts and QOS, `sinfo` for partitions)."))


def test_submission(spec: RunSpec, timeout_s: float = SLURM_TIMEOUT_S) -> str | None:
    """Slurm's refusal text for the run's options (`sbatch --test-only`), or None when it would accept the job."""
    script = "#!/bin/sh\ntrue\n"
    try:
        done = subprocess.run(["sbatch", "--test-only", *sbatch_options(spec)], input=script, capture_output=True,
                              text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sbatch --test-only failed: {exc}."
    if done.returncode == 0:
        return None
    text = " ".join(line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip())
    return text or f"sbatch --test-only exited with code {done.returncode} and no message."


def world_note(spec: RunSpec) -> str:
    """How the world size is counted, for messages."""
    if spec.backend.kind == SLURM:
        return (f"{training_nodes(spec)} training node(s) × {max(1, spec.backend.gpus_per_node or 1)} process(es) "
                f"= {world_size(spec)}")
    return f"{world_size(spec)}"


def _hms(seconds: int) -> str:
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def gpu_count() -> int | None:
    """CUDA devices this process sees (CUDA_VISIBLE_DEVICES applied); None when torch cannot say."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no torch, or a broken CUDA setup: unknown
        return None


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _fsdp_available() -> bool:
    try:
        import torch.distributed

        return bool(torch.distributed.is_available())
    except ImportError:
        return False
