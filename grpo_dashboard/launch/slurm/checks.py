"""The Slurm backend's checks: its processes (derived from the allocation), its vLLM server's nodes, its own fields,
and the cluster itself: `sinfo` for its partitions (node counts, time limits) and `sbatch --test-only` with the run's
own options, whose refusal text is shown as Slurm wrote it.

`CHECKS` is what `launch.runs.check` adds to the generic checks for a Slurm run (`checks.validation.checks_with`);
the cluster is asked last, and only about a spec with no error (after_errors=False).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from grpo_dashboard.checks import cluster_checks
from grpo_dashboard.checks.named import Check, CheckInput, Sink, collected
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.run_spec import SLURM, RunSpec, server_nodes, world_size
from grpo_dashboard.spec.slurm_options import sbatch_options, time_seconds

SLURM_TIMEOUT_S = 20.0


def _processes(inp: CheckInput) -> list[FieldError]:
    spec, b = inp.spec, inp.spec.backend
    if b.num_processes not in (1, world_size(spec)):
        return [
            FieldError(
                "backend.num_processes",
                b.num_processes,
                f"is derived on Slurm: nodes × gpus_per_node = {world_size(spec)} training process(es). "
                f"Remove num_processes, or change backend.nodes / backend.gpus_per_node.",
            )
        ]
    return []


def _generation(inp: CheckInput) -> list[FieldError]:
    return collected(lambda err, _: _check_generation(inp.spec, err))


def _check_generation(spec: RunSpec, err: Sink) -> None:
    g, b = spec.generation, spec.backend
    if g is None or not cluster_checks.generation_common(spec, g, err):
        return
    nodes = server_nodes(spec)
    if g.server_gpus is not None:
        err(
            FieldError(
                "generation.server_gpus",
                g.server_gpus,
                "only applies to local runs; on Slurm give "
                "generation.server_nodes (the first node(s) of the allocation serve).",
            )
        )
    if nodes > 1:
        err(
            FieldError(
                "generation.server_nodes",
                nodes,
                "must be 1: `trl vllm-serve` serves from one node "
                "(raise generation.data_parallel_size to use more of its GPUs).",
            )
        )
        return
    if nodes < 1 or nodes >= b.nodes:
        err(
            FieldError(
                "generation.server_nodes",
                nodes,
                f"must be at least 1 and leave a training node: with "
                f"backend.nodes {b.nodes}, set server_nodes to 1..{b.nodes - 1} (or raise backend.nodes "
                f"to {nodes + 1}).",
            )
        )
        return
    if not b.gpus_per_node:
        err(
            FieldError(
                "backend.gpus_per_node",
                b.gpus_per_node,
                "is required with a generation section: vLLM serves on GPUs. Set the GPUs of each node, e.g. 8.",
            )
        )
        return
    cluster_checks.server_split(g, nodes * b.gpus_per_node, "generation.server_nodes", err)


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
        done = subprocess.run(
            ["sinfo", "--noheader", "--format=%P|%D|%l|%a"], capture_output=True, text=True, timeout=timeout_s
        )
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


def _nodes(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    return [FieldError("backend.nodes", b.nodes, "must be ≥ 1.")] if b.nodes < 1 else []


def _gpus_per_node(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    if b.gpus_per_node is not None and b.gpus_per_node < 0:
        return [FieldError("backend.gpus_per_node", b.gpus_per_node, "must be ≥ 0 (0 or unset: CPU-only nodes).")]
    return []


def _cpus_per_task(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    if b.cpus_per_task is not None and b.cpus_per_task < 1:
        return [FieldError("backend.cpus_per_task", b.cpus_per_task, "must be ≥ 1.")]
    return []


def _gpus(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    if b.gpus is not None:
        return [
            FieldError(
                "backend.gpus",
                b.gpus,
                "only applies to local runs; Slurm allocates GPUs (backend.gpus_per_node). Remove it.",
            )
        ]
    return []


def _extra_sbatch(inp: CheckInput) -> list[FieldError]:
    return [
        FieldError(
            "backend.extra_sbatch",
            option,
            "must be sbatch options, one per item, each starting with '-' (e.g. '--exclusive', '--mem=0').",
        )
        for option in inp.spec.backend.extra_sbatch or []
        if not option.startswith("-") or "\n" in option
    ]


def _time(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    try:
        time_seconds(b.time)
    except ValueError as exc:
        return [FieldError("backend.time", b.time, f"{exc}.")]
    return []


def _cpu_on_gpu_nodes(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    if inp.spec.training.get("use_cpu") and b.gpus_per_node:
        return [
            FieldError(
                "training.use_cpu",
                True,
                f"trains on CPU although each node gets {b.gpus_per_node} "
                f"GPU(s); remove use_cpu or backend.gpus_per_node.",
                "warning",
            )
        ]
    return []


def _cluster(inp: CheckInput) -> list[FieldError]:
    """The cluster, asked only about a sound spec: partition, node count and time limit from `sinfo`, and everything
    else by `sbatch --test-only` with the run's own options (its refusal text shown as it is)."""
    return collected(lambda err, warn: _ask_cluster(inp.spec, err, warn))


def _ask_cluster(spec: RunSpec, err: Sink, warn: Sink) -> None:
    b = spec.backend
    try:
        limit = time_seconds(b.time)
    except ValueError:  # slurm.time reported it, and this check runs only without errors
        limit = None
    if shutil.which("sbatch") is None:
        err(
            FieldError(
                "backend.kind",
                SLURM,
                "needs Slurm's commands (sbatch, squeue, scontrol, scancel) on PATH, "
                "and sbatch is not there. Run the dashboard on a login node of the cluster (or add Slurm's "
                "bin directory to PATH), or choose backend.kind: local.",
            )
        )
        return
    parts = partitions()
    if isinstance(parts, str):
        err(
            FieldError(
                "backend.partition",
                b.partition,
                f"could not be checked: {parts}. Check that the cluster answers (`sinfo`) from this machine.",
            )
        )
        return
    name = b.partition or next((p.name for p in parts.values() if p.default), None)
    part = parts.get(name or "")
    if b.partition and part is None:
        said = test_submission(spec)
        err(
            FieldError(
                "backend.partition",
                b.partition,
                "is not a partition of this cluster" + (f" (Slurm: {said})" if said else "") + f". Partitions: "
                f"{', '.join(sorted(parts)) or '(none)'}; set backend.partition to one of them.",
            )
        )
        return
    if part is not None:
        if b.nodes > part.nodes:
            said = test_submission(spec)
            err(
                FieldError(
                    "backend.nodes",
                    b.nodes,
                    f"is more than the {part.nodes} node(s) of partition "
                    f"{part.name}" + (f" (Slurm: {said})" if said else "") + f". Use at most {part.nodes} "
                    f"node(s), or a partition with more.",
                )
            )
            return
        if limit is not None and part.time_limit_s is not None and limit > part.time_limit_s:
            err(
                FieldError(
                    "backend.time",
                    b.time,
                    f"is longer than partition {part.name}'s time limit "
                    f"({_hms(part.time_limit_s)}); Slurm would hold the job pending forever "
                    f"(PartitionTimeLimit). Use at most {_hms(part.time_limit_s)}, or another partition.",
                )
            )
            return
        if not part.up:
            warn(FieldError("backend.partition", part.name, "is not up; the job waits until it is.", "warning"))
    refusal = test_submission(spec)
    if refusal:
        low = refusal.lower()
        where = (
            "backend.account"
            if "account" in low
            else "backend.qos"
            if "qos" in low
            else "backend.partition"
            if "partition" in low
            else "backend.time"
            if "time" in low
            else "backend.nodes"
            if "node" in low
            else "backend"
        )
        value = {
            "backend.account": b.account,
            "backend.qos": b.qos,
            "backend.partition": b.partition,
            "backend.time": b.time,
            "backend.nodes": b.nodes,
        }.get(where, b.extra_sbatch)
        err(
            FieldError(
                where,
                value,
                f"is refused by Slurm (`sbatch --test-only`): {refusal} Fix the value (ask "
                f"`sacctmgr show assoc user=$USER` for your accounts and QOS, `sinfo` for partitions).",
            )
        )


def test_submission(spec: RunSpec, timeout_s: float = SLURM_TIMEOUT_S) -> str | None:
    """Slurm's refusal text for the run's options (`sbatch --test-only`), or None when it would accept the job."""
    script = "#!/bin/sh\ntrue\n"
    try:
        done = subprocess.run(
            ["sbatch", "--test-only", *sbatch_options(spec)],
            input=script,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sbatch --test-only failed: {exc}."
    if done.returncode == 0:
        return None
    text = " ".join(line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip())
    return text or f"sbatch --test-only exited with code {done.returncode} and no message."


def _hms(seconds: int) -> str:
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


CHECKS: tuple[Check, ...] = (
    Check("slurm.fsdp", ("backend.accelerate_config",), cluster_checks.fsdp_preset),
    Check("slurm.processes", ("backend.num_processes", "backend.nodes", "backend.gpus_per_node"), _processes),
    Check("slurm.generation", ("generation", "backend.nodes", "backend.gpus_per_node"), _generation),
    Check("slurm.nodes", ("backend.nodes",), _nodes),
    Check("slurm.gpus_per_node", ("backend.gpus_per_node",), _gpus_per_node),
    Check("slurm.cpus_per_task", ("backend.cpus_per_task",), _cpus_per_task),
    Check("slurm.gpus", ("backend.gpus",), _gpus),
    Check("slurm.extra_sbatch", ("backend.extra_sbatch",), _extra_sbatch),
    Check("slurm.time", ("backend.time",), _time),
    Check("slurm.cpu_on_gpu_nodes", ("training.use_cpu", "backend.gpus_per_node"), _cpu_on_gpu_nodes),
    Check(
        "slurm.cluster",
        (
            "backend.partition",
            "backend.nodes",
            "backend.time",
            "backend.account",
            "backend.qos",
            "backend.extra_sbatch",
        ),
        _cluster,
        after_errors=False,
    ),
)
