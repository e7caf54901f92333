"""The Hugging Face Jobs backend's checks: namespace, flavor, timeout, what a container cannot see, the Hub push,
and the hardware estimate for the flavor.

`CHECKS` is what `launch.runs.check` adds to the generic checks for an hf_jobs run (`checks.validation.checks_with`).
"""

from __future__ import annotations

import difflib
import re

from grpo_dashboard.checks import cluster_checks, hardware
from grpo_dashboard.checks.named import Check, CheckInput
from grpo_dashboard.checks.spec_paths import resolve as _resolve
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.flavors import BUILTIN_FLAVORS, Flavor
from grpo_dashboard.spec.run_spec import changed_fields


def _flavor(inp: CheckInput) -> Flavor | None:
    return BUILTIN_FLAVORS.get(inp.spec.backend.flavor or "")


def _generation(inp: CheckInput) -> list[FieldError]:
    if inp.spec.generation is None:
        return []
    return [
        FieldError(
            "generation",
            changed_fields(inp.spec.generation),
            "(a vLLM server the backend starts) is not supported on hf_jobs (one container, no second process to "
            "serve). Remove the generation section and use vllm_mode: colocate there, or run on local / slurm.",
        )
    ]


def _namespace(inp: CheckInput) -> list[FieldError]:
    ns = inp.spec.backend.namespace
    if not ns or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", ns):
        return [
            FieldError(
                "backend.namespace",
                ns,
                "is required for hf_jobs: your Hugging Face username or an "
                "organization you can run jobs in (jobs, buckets and bills belong to it).",
            )
        ]
    return []


def _gpus(inp: CheckInput) -> list[FieldError]:
    if inp.spec.backend.gpus is not None:
        return [
            FieldError(
                "backend.gpus",
                inp.spec.backend.gpus,
                "only applies to local runs; a Jobs container sees all GPUs of its flavor. Remove it.",
            )
        ]
    return []


def _flavor_check(inp: CheckInput) -> list[FieldError]:
    b, flavors = inp.spec.backend, BUILTIN_FLAVORS
    flavor = _flavor(inp)
    if flavor is None:
        close = difflib.get_close_matches(str(b.flavor), list(flavors), n=2)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return [
            FieldError(
                "backend.flavor",
                b.flavor,
                f"must be a Jobs flavor: {', '.join(flavors)}. "
                f"`python -m grpo_dashboard hardware SPEC` recommends one.{hint}",
            )
        ]
    if not flavor.is_gpu:
        return [
            FieldError(
                "backend.flavor",
                b.flavor,
                "is a CPU flavor: GRPO trains only tiny test models in useful time without a GPU.",
                "warning",
            )
        ]
    if b.num_processes > flavor.gpus:
        return [
            FieldError(
                "backend.num_processes",
                b.num_processes,
                f"is more than the {flavor.gpus} GPU(s) of "
                f"{b.flavor}; use at most one process per GPU, or a flavor with more GPUs.",
            )
        ]
    return []


def _timeout(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    try:
        timeout = hardware.parse_timeout(b.timeout)
    except ValueError as exc:
        return [FieldError("backend.timeout", b.timeout, str(exc))]
    if timeout is not None and timeout < 300:
        return [
            FieldError(
                "backend.timeout",
                b.timeout,
                "is under 5 minutes: installing the job's packages alone "
                "takes that long. Use e.g. '2h', or leave it unset to derive it from the estimated run "
                "time.",
            )
        ]
    return []


def _model_on_hub(inp: CheckInput) -> list[FieldError]:
    m = inp.spec.model
    if m.name_or_path and not m.build_tiny and _resolve(inp.base, m.name_or_path).is_dir():
        return [
            FieldError(
                "model.name_or_path",
                m.name_or_path,
                "is a local directory, which a Jobs container "
                "cannot see. Push it to the Hub (`hf upload`) and use its repo id.",
            )
        ]
    return []


def _no_tokens(inp: CheckInput) -> list[FieldError]:
    t = inp.spec.training
    return [
        FieldError(f"training.{key}", "***", "must not hold a token: the job gets yours as the HF_TOKEN secret.")
        for key in t
        if "token" in key.lower() and t[key]
    ]


def _hub_push(inp: CheckInput) -> list[FieldError]:
    spec, t = inp.spec, inp.spec.training
    found: list[FieldError] = []
    if t.get("push_to_hub") and not t.get("hub_model_id"):
        found.append(
            FieldError(
                "training.hub_model_id",
                None,
                "is required with push_to_hub on HF Jobs (the output "
                "directory is /data/output, so TRL would push to a repo named 'output'). Set e.g. "
                "'you/qwen-grpo'.",
            )
        )
    if t.get("push_to_hub") and not spec.save_model:
        found.append(
            FieldError(
                "save_model",
                False,
                "is false, so the final model is never pushed; only checkpoints are (hub_strategy).",
                "warning",
            )
        )
    if t.get("hub_model_id") and not t.get("push_to_hub"):
        found.append(
            FieldError(
                "training.hub_model_id",
                t["hub_model_id"],
                "is set but push_to_hub is not; the model stays in the job's bucket folder.",
                "warning",
            )
        )
    return found


def _cpu_on_gpu_flavor(inp: CheckInput) -> list[FieldError]:
    flavor = _flavor(inp)
    if flavor is not None and flavor.is_gpu and inp.spec.training.get("use_cpu"):
        return [
            FieldError(
                "training.use_cpu",
                True,
                f"trains on the CPU of a paid {inp.spec.backend.flavor} GPU flavor; remove it.",
                "warning",
            )
        ]
    return []


def _estimate(inp: CheckInput) -> list[FieldError]:
    b = inp.spec.backend
    if _flavor(inp) is None:
        return []
    report = hardware.estimate_for_spec(inp.spec, inp.base)
    found: list[FieldError] = []
    for w in report.warnings:
        if "does not fit" in w or "lacks GPUs" in w or "shorter than" in w or "bf16" in w:
            field = "backend.timeout" if "shorter than" in w else "backend.flavor"
            more = f" Options: {'; '.join(report.suggestions)}." if report.suggestions and "fit" in w else ""
            found.append(FieldError(field, b.timeout if "shorter" in w else b.flavor, f"{w}.{more}", "warning"))
    return found


CHECKS: tuple[Check, ...] = (
    Check(
        "hf_jobs.single_process_on_cpu",
        ("backend.num_processes", "training.use_cpu"),
        cluster_checks.single_process_on_cpu,
    ),
    Check("hf_jobs.generation", ("generation",), _generation),
    Check("hf_jobs.namespace", ("backend.namespace",), _namespace),
    Check("hf_jobs.gpus", ("backend.gpus",), _gpus),
    Check("hf_jobs.flavor", ("backend.flavor", "backend.num_processes"), _flavor_check),
    Check("hf_jobs.timeout", ("backend.timeout",), _timeout),
    Check("hf_jobs.model_on_hub", ("model.name_or_path",), _model_on_hub),
    Check("hf_jobs.no_tokens", ("training",), _no_tokens),
    Check("hf_jobs.hub_push", ("training.push_to_hub", "training.hub_model_id", "save_model"), _hub_push),
    Check("hf_jobs.cpu_on_gpu_flavor", ("training.use_cpu", "backend.flavor"), _cpu_on_gpu_flavor),
    Check("hf_jobs.estimate", ("backend.flavor", "backend.timeout", "model.name_or_path"), _estimate),
)
