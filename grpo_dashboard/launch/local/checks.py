"""The local backend's checks: its GPUs (indices, how many this machine shows), its vLLM server's GPUs, and the
folder its output_dir is created in.

`CHECKS` is what `launch.runs.check` adds to the generic checks for a local run (`checks.validation.checks_with`).
"""

from __future__ import annotations

import os

from grpo_dashboard.checks import cluster_checks
from grpo_dashboard.checks.named import Check, CheckInput, Sink, collected
from grpo_dashboard.checks.spec_paths import resolve
from grpo_dashboard.errors import FieldError

VISIBLE_GPUS = "gpus.visible"  # facts key: the GPUs this machine shows (None: unknown)


def gpu_count() -> int | None:
    """CUDA devices this process sees (tests replace it to play a machine with more)."""
    return cluster_checks.gpu_count()


def _visible_gpus(inp: CheckInput) -> int | None:
    if VISIBLE_GPUS not in inp.facts:
        inp.facts[VISIBLE_GPUS] = gpu_count()
    return inp.facts[VISIBLE_GPUS]


def _gpus(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    found: list[FieldError] = []
    err = found.append
    if b.gpus is None:
        return found
    if any(g < 0 for g in b.gpus) or len(set(b.gpus)) != len(b.gpus):
        err(FieldError("backend.gpus", b.gpus, "must be distinct GPU indices ≥ 0, e.g. [0, 1]."))
    elif b.num_processes > len(b.gpus) and b.gpus:
        err(
            FieldError(
                "backend.num_processes",
                b.num_processes,
                f"is more than the {len(b.gpus)} GPU(s) listed in backend.gpus; use one process per GPU.",
            )
        )
    count = _visible_gpus(inp)
    if count is not None and b.gpus and max(b.gpus) >= count:
        err(
            FieldError(
                "backend.gpus",
                b.gpus,
                f"names GPU {max(b.gpus)}, but this machine has {count} GPU(s) (indices 0..{count - 1})."
                if count
                else "names GPUs, but this machine has none.",
            )
        )
    return found


def _visible(inp: CheckInput) -> list[FieldError]:
    spec, b = inp.spec, inp.spec.backend
    count = _visible_gpus(inp)
    if spec.training.get("use_cpu") or count is None or b.gpus is not None:
        return []
    served = len(spec.generation.server_gpus or []) if spec.generation else 0
    if b.num_processes > 1 and b.num_processes + served > count:
        need = f"{b.num_processes} training + {served} server GPU(s)" if served else f"{b.num_processes} GPU(s)"
        return [
            FieldError(
                "backend.num_processes",
                b.num_processes,
                f"needs {need}, but this machine shows {count} GPU(s) (CUDA_VISIBLE_DEVICES counts). "
                f"Use at most {max(1, count - served)} process(es), one per GPU.",
            )
        ]
    return []


def _cpu_only(inp: CheckInput) -> list[FieldError]:
    """A machine without a GPU trains on its CPU: said before a model that is not a test model is sent there."""
    spec = inp.spec
    if spec.training.get("use_cpu") or spec.model.build_tiny or spec.backend.gpus is not None:
        return []
    if _visible_gpus(inp) != 0:
        return []
    return [
        FieldError(
            "training.use_cpu",
            spec.training.get("use_cpu"),
            f"this machine shows no GPU, so the job would train {spec.model.name_or_path!r} on its CPU, which is "
            "practical only for small test models. Run it where the GPUs are (backend.kind slurm or hf_jobs), or set "
            "training.use_cpu: true to say you mean it.",
            "warning",
        )
    ]


def _generation(inp: CheckInput) -> list[FieldError]:
    return collected(lambda err, _: _check_generation(inp, err))


def _check_generation(inp: CheckInput, err: Sink) -> None:
    spec, g, b = inp.spec, inp.spec.generation, inp.spec.backend
    if g is None or not cluster_checks.generation_common(spec, g, err):
        return
    gpus = g.server_gpus or []
    if g.server_nodes is not None:
        err(
            FieldError(
                "generation.server_nodes",
                g.server_nodes,
                "only applies to Slurm runs; locally give generation.server_gpus (GPU indices for the server).",
            )
        )
    if not gpus:
        err(
            FieldError(
                "generation.server_gpus",
                g.server_gpus,
                "is required locally: the GPU indices the vLLM server uses, e.g. [3]; training uses the others.",
            )
        )
        return
    if any(i < 0 for i in gpus) or len(set(gpus)) != len(gpus):
        err(FieldError("generation.server_gpus", gpus, "must be distinct GPU indices ≥ 0, e.g. [2, 3]."))
        return
    both = sorted(set(gpus) & set(b.gpus or []))
    if both:
        err(
            FieldError(
                "generation.server_gpus",
                gpus,
                f"overlaps backend.gpus {b.gpus} on GPU(s) {both}: "
                f"the server and training would share a card. Give them separate GPUs, e.g. backend.gpus: "
                f"{[i for i in (b.gpus or []) if i not in both] or [0]} and server_gpus: {gpus}.",
            )
        )
    count = len(gpus)
    visible = _visible_gpus(inp)
    if visible is not None:
        need = count + (len(b.gpus) if b.gpus else b.num_processes)
        if max(gpus) >= visible or need > visible:
            err(
                FieldError(
                    "generation.server_gpus",
                    gpus,
                    f"needs {need} GPUs in all ({count} for the server, "
                    f"{need - count} for training), but this machine shows {visible}.",
                )
            )
    cluster_checks.server_split(g, count, "generation.server_gpus", err)


def _output_dir(inp: CheckInput) -> list[FieldError]:
    """The job writes the model under output_dir on this machine: its nearest existing folder must be a folder the
    dashboard may write (a name too long for any file system is the generic check's)."""
    value = inp.spec.output_dir
    if not value:
        return []
    existing = resolve(inp.base, value)
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError:
        return []  # a name no file system takes: the generic output_dir check says so
    if not existing.is_dir():
        return [
            FieldError("output_dir", value, f"is inside {existing}, which is a file, not a folder; choose another.")
        ]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [
            FieldError(
                "output_dir",
                value,
                f"cannot be created: {existing} is not writable by the dashboard; choose a folder you may write.",
            )
        ]
    return []


CHECKS: tuple[Check, ...] = (
    Check(
        "local.single_process_on_cpu",
        ("backend.num_processes", "training.use_cpu"),
        cluster_checks.single_process_on_cpu,
    ),
    Check("local.gpus", ("backend.gpus", "backend.num_processes"), _gpus),
    Check("local.fsdp", ("backend.accelerate_config",), cluster_checks.fsdp_preset),
    Check("local.visible_gpus", ("backend.num_processes", "backend.gpus", "training.use_cpu"), _visible),
    Check("local.cpu_only", ("training.use_cpu", "model.name_or_path", "model.build_tiny", "backend.gpus"), _cpu_only),
    Check("local.generation", ("generation", "backend.gpus", "backend.num_processes"), _generation),
    Check("local.output_dir", ("output_dir",), _output_dir),
)
