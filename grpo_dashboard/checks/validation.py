"""Validation of a run spec before anything starts: every check TRL would only make inside the first training step.

`validate(spec)` returns every problem at once; each names the field, the value, what is allowed, and the fix.
It runs `CHECKS`, a list of small named checks (`checks/named.py`) in report order, each declaring the fields it
involves; none changes the spec.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.checks import agents, spec_checks, spec_extras
from grpo_dashboard.checks.cluster_checks import (
    check_generation,
    check_processes,
    check_slurm,
    gpu_count,
)
from grpo_dashboard.checks.dataset_files import DatasetSample
from grpo_dashboard.checks.named import Check, CheckInput, collected, run_checks, sample_of
from grpo_dashboard.checks.spec_paths import resolve as _resolve
from grpo_dashboard.checks.training_checks import training_checks, typed_training
from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import trl_schema
from grpo_dashboard.spec.run_spec import (
    ACCELERATE_CONFIGS,
    BACKENDS,
    HF_JOBS,
    LOCAL,
    SLURM,
    RunSpec,
)

VISIBLE_GPUS = "gpus.visible"  # facts key: the GPUs a local run's machine shows (None: not local, or unknown)


@dataclass
class ValidationReport:
    """Errors block a launch; warnings are shown but do not."""

    errors: list[FieldError] = field(default_factory=list)
    warnings: list[FieldError] = field(default_factory=list)
    dataset: DatasetSample | None = None

    @property
    def ok(self) -> bool:
        """True when nothing blocks the launch."""
        return not self.errors

    def raise_if_errors(self) -> None:
        """Raise SpecError listing every error."""
        if self.errors:
            raise SpecError(self.errors)


def validate(spec: RunSpec, base_dir: str | Path | None = None) -> ValidationReport:
    """Check a parsed spec completely; relative paths are resolved against `base_dir` (default: cwd).

    The checks read the training values as TRL would type them (`typed_training`); `spec` itself is not changed
    (`training_checks.normalise_training` writes the typed values, as `launch.runs.check` does).
    """
    inp = CheckInput(typed_view(spec), Path(base_dir) if base_dir else Path.cwd())
    errors, warnings = run_checks(CHECKS, inp)
    return ValidationReport(errors, warnings, sample_of(inp))


def typed_view(spec: RunSpec) -> RunSpec:
    """A shallow copy of `spec` whose training values are typed (the other sections are `spec`'s own)."""
    view = copy.copy(spec)
    view.training = typed_training(spec.training)
    return view


def _visible_gpus(inp: CheckInput) -> int | None:
    if VISIBLE_GPUS not in inp.facts:
        inp.facts[VISIBLE_GPUS] = gpu_count() if inp.spec.backend.kind == LOCAL else None
    return inp.facts[VISIBLE_GPUS]


def _backend(inp: CheckInput) -> list[FieldError]:
    return collected(lambda err, _: _check_backend(inp.spec, inp.base, err))


def _processes(inp: CheckInput) -> list[FieldError]:
    return collected(lambda err, warn: check_processes(inp.spec, inp.base, _visible_gpus(inp), err, warn))


def _generation(inp: CheckInput) -> list[FieldError]:
    return collected(lambda err, _: check_generation(inp.spec, _visible_gpus(inp), err))


def _hf_jobs(inp: CheckInput) -> list[FieldError]:
    if inp.spec.backend.kind != HF_JOBS:
        return []
    return collected(lambda err, warn: _check_hf_jobs(inp.spec, inp.base, err, warn))


def _slurm(inp: CheckInput) -> list[FieldError]:
    if inp.spec.backend.kind != SLURM:
        return []
    found: list[FieldError] = []
    check_slurm(inp.spec, found, found.append)
    return found


def _check_backend(spec: RunSpec, base: Path, err: Any) -> None:
    b = spec.backend
    if b.kind not in BACKENDS:
        err(FieldError("backend.kind", b.kind, f"must be one of {', '.join(BACKENDS)}."))
    if b.stall_timeout_s is not None and not (math.isfinite(b.stall_timeout_s) and b.stall_timeout_s > 0):
        err(FieldError("backend.stall_timeout_s", b.stall_timeout_s,
                       "must be a positive number of seconds (e.g. 1800), or null to never call a silent job hung."))
    if b.num_processes < 1:
        err(FieldError("backend.num_processes", b.num_processes, "must be ≥ 1."))
    elif b.num_processes > 1 and spec.training.get("use_cpu") and b.kind != SLURM:
        err(FieldError("backend.num_processes", b.num_processes,
                       "must be 1 with training.use_cpu: accelerate launches one process per GPU, and a CPU run is a "
                       "single process. Remove use_cpu to train on GPUs, or set num_processes: 1."))
    if b.gpus is not None:
        if any(g < 0 for g in b.gpus) or len(set(b.gpus)) != len(b.gpus):
            err(FieldError("backend.gpus", b.gpus, "must be distinct GPU indices ≥ 0, e.g. [0, 1]."))
        elif b.num_processes > len(b.gpus) and b.gpus:
            err(FieldError("backend.num_processes", b.num_processes,
                           f"is more than the {len(b.gpus)} GPU(s) listed in backend.gpus; use one process per GPU."))
        count = gpu_count() if b.kind == LOCAL else None
        if count is not None and b.gpus and max(b.gpus) >= count:
            err(FieldError("backend.gpus", b.gpus, f"names GPU {max(b.gpus)}, but this machine has {count} GPU(s) "
                           f"(indices 0..{count - 1})." if count else "names GPUs, but this machine has none."))
    if b.accelerate_config and b.accelerate_config not in ACCELERATE_CONFIGS:
        if not _resolve(base, b.accelerate_config).is_file():
            err(FieldError("backend.accelerate_config", b.accelerate_config,
                           f"must be a TRL preset ({', '.join(ACCELERATE_CONFIGS)}) or an existing accelerate "
                           f"config file."))


def _check_hf_jobs(spec: RunSpec, base: Path, err: Any, warn: Any) -> None:
    from grpo_dashboard.checks import hardware

    b, t = spec.backend, spec.training
    flavors = hardware.BUILTIN_FLAVORS
    if not b.namespace or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", b.namespace):
        err(FieldError("backend.namespace", b.namespace, "is required for hf_jobs: your Hugging Face username or an "
                       "organization you can run jobs in (jobs, buckets and bills belong to it)."))
    if b.gpus is not None:
        err(FieldError("backend.gpus", b.gpus, "only applies to local runs; a Jobs container sees all GPUs of its "
                       "flavor. Remove it."))
    flavor = flavors.get(b.flavor or "")
    if flavor is None:
        close = difflib.get_close_matches(str(b.flavor), list(flavors), n=2)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        err(FieldError("backend.flavor", b.flavor, f"must be a Jobs flavor: {', '.join(flavors)}. "
                       f"`python -m grpo_dashboard hardware SPEC` recommends one.{hint}"))
    elif not flavor.is_gpu:
        warn(FieldError("backend.flavor", b.flavor, "is a CPU flavor: GRPO trains only tiny test models in useful "
                        "time without a GPU.", "warning"))
    elif b.num_processes > flavor.gpus:
        err(FieldError("backend.num_processes", b.num_processes, f"is more than the {flavor.gpus} GPU(s) of "
                       f"{b.flavor}; use at most one process per GPU, or a flavor with more GPUs."))
    try:
        timeout = hardware.parse_timeout(b.timeout)
    except ValueError as exc:
        err(FieldError("backend.timeout", b.timeout, str(exc)))
        timeout = None
    if timeout is not None and timeout < 300:
        err(FieldError("backend.timeout", b.timeout, "is under 5 minutes: installing the job's packages alone takes "
                       "that long. Use e.g. '2h', or leave it unset to derive it from the estimated run time."))
    local = _resolve(base, spec.model.name_or_path)
    if spec.model.name_or_path and not spec.model.build_tiny and local.is_dir():
        err(FieldError("model.name_or_path", spec.model.name_or_path, "is a local directory, which a Jobs container "
                       "cannot see. Push it to the Hub (`hf upload`) and use its repo id."))
    for key in [k for k in t if "token" in k.lower() and t[k]]:
        err(FieldError(f"training.{key}", "***", "must not hold a token: the job gets yours as the HF_TOKEN secret."))
    if t.get("push_to_hub") and not t.get("hub_model_id"):
        err(FieldError("training.hub_model_id", None, "is required with push_to_hub on HF Jobs (the output directory "
                       "is /data/output, so TRL would push to a repo named 'output'). Set e.g. 'you/qwen-grpo'."))
    if t.get("push_to_hub") and not spec.save_model:
        warn(FieldError("save_model", False, "is false, so the final model is never pushed; only checkpoints are "
                        "(hub_strategy).", "warning"))
    if t.get("hub_model_id") and not t.get("push_to_hub"):
        warn(FieldError("training.hub_model_id", t["hub_model_id"], "is set but push_to_hub is not; the model stays "
                        "in the job's bucket folder.", "warning"))
    if flavor is not None and flavor.is_gpu and t.get("use_cpu"):
        warn(FieldError("training.use_cpu", True, f"trains on the CPU of a paid {b.flavor} GPU flavor; remove it.",
                        "warning"))
    if flavor is None:
        return
    report = hardware.estimate_for_spec(spec, base)
    for w in report.warnings:
        if "does not fit" in w or "lacks GPUs" in w or "shorter than" in w or "bf16" in w:
            field = "backend.timeout" if "shorter than" in w else "backend.flavor"
            more = f" Options: {'; '.join(report.suggestions)}." if report.suggestions and "fit" in w else ""
            warn(FieldError(field, b.timeout if "shorter" in w else b.flavor, f"{w}.{more}", "warning"))


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _trl_version() -> str:
    version = trl_schema.installed_versions()["trl"]  # from the package metadata: trl is not imported
    return version or f"{trl_schema.schema()['versions']['trl']} (the dashboard's schema; trl is not installed here)"


# The backend checks' problems name their own fields; "backend" and "generation" are sections, not form fields.
CHECKS: list[Check] = [
    *spec_checks.NAME,
    *spec_checks.MODEL,
    *spec_checks.DATASET_CHECKS,
    *spec_checks.REWARDS,
    *agents.CHECKS,
    *training_checks(lambda: _trl_version(), lambda name: _has_module(name)),
    Check("backend.settings", ("backend",), _backend),
    Check("backend.processes", ("backend",), _processes),
    Check("generation.server", ("generation",), _generation),
    *spec_checks.HEALTH,
    *spec_extras.CHECKS,
    Check("backend.hf_jobs", ("backend",), _hf_jobs),
    Check("backend.slurm", ("backend",), _slurm, after_errors=False),  # asks the cluster only about a sound spec
    *spec_checks.CHAT_TEMPLATE,
]
