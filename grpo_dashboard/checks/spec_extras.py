"""Checks of the settings a TRL recipe brings along: LoRA fields, QLoRA, chat template, reward models, dataset
mixtures and streaming, job environment and secrets, tags, an output_dir the job can create, and the optional packages
a local job needs (`CHECKS`)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from typing import Any

from grpo_dashboard.checks import gpu_probe
from grpo_dashboard.checks.named import Check, CheckInput
from grpo_dashboard.checks.spec_paths import HUB_ID, resolve
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.job_deps import missing_locally
from grpo_dashboard.spec.run_spec import HF_JOBS, LOCAL, SLURM, RunSpec, changed_fields

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_LIKE = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|_KEY$|CREDENTIAL", re.I)
LORA_TASKS = ("CAUSAL_LM", "SEQ_CLS", "SEQ_2_SEQ_LM", "TOKEN_CLS", "QUESTION_ANS", "FEATURE_EXTRACTION")
MIXTURE_KEYS = ("path", "name", "data_dir", "data_files", "split", "columns", "fraction")


NAME_MAX, PATH_MAX = 255, 4096  # bytes: what Linux file systems take for one name and for a whole path


def _output_dir(inp: CheckInput) -> Iterator[FieldError]:
    """A path a job can create anywhere: no name over NAME_MAX bytes, not PATH_MAX bytes in all (where the job runs
    decides the rest: the local backend checks its folder is writable)."""
    value = inp.spec.output_dir
    if not value:
        return
    path = resolve(inp.base, value)
    if len(os.fsencode(str(path))) >= PATH_MAX or any(len(os.fsencode(p)) > NAME_MAX for p in path.parts):
        yield FieldError(
            "output_dir",
            value,
            f"has a folder name over {NAME_MAX} bytes (or is {PATH_MAX:,} bytes or more in all), which no file "
            "system takes, so the job could not save the model; use a shorter path.",
        )


def _tags(inp: CheckInput) -> Iterator[FieldError]:
    for i, tag in enumerate(inp.spec.tags):
        if not isinstance(tag, str) or not tag.strip() or len(tag) > 64:
            yield FieldError(f"tags[{i}]", tag, "must be a non-empty text of at most 64 characters.")


def _packages(inp: CheckInput) -> Iterator[FieldError]:
    spec = inp.spec
    if spec.backend.kind not in (LOCAL, SLURM):
        return
    where = "here (and on the cluster's nodes)" if spec.backend.kind == SLURM else "here"
    for dep in missing_locally(spec):
        # vLLM stays a warning: a server-mode run gets its generation from a server started elsewhere.
        how = f"`pip install {dep.pip}` {where}"
        if dep.alternative == "kernels":
            how = (
                f"`pip install kernels` {where} (transformers then loads a prebuilt flash-attention from the Hub), "
                f"or build {dep.pip} against your torch (`pip install {dep.pip} --no-build-isolation`)"
            )
        yield FieldError(
            dep.field,
            _shown(spec, dep.field),
            f"needs the {dep.pip!r} package ({dep.reason}), "
            f"which is not installed here, so the job would fail at start: {how}, or run it on hf_jobs (a Jobs "
            "container gets it installed).",
            "warning" if dep.module == "vllm" else "error",
        )


def _shown(spec: RunSpec, field: str) -> Any:
    head, _, rest = field.partition(".")
    if head == "training":
        return spec.training.get(rest.split(".")[0])
    obj: Any = spec
    for part in field.split("."):
        obj = getattr(obj, part, None)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return changed_fields(obj)  # a section (model.lora, model.quantization): what it sets
    return obj if isinstance(obj, (str, int, float, bool, type(None))) else "(set)"


def _lora_task(inp: CheckInput) -> Iterator[FieldError]:
    lora = inp.spec.model.lora
    if lora is not None and lora.task_type not in LORA_TASKS:
        yield FieldError(
            "model.lora.task_type", lora.task_type, f"must be one of {', '.join(LORA_TASKS)}; GRPO trains a CAUSAL_LM."
        )


def _lora_bias(inp: CheckInput) -> Iterator[FieldError]:
    lora = inp.spec.model.lora
    if lora is not None and lora.bias not in ("none", "all", "lora_only"):
        yield FieldError("model.lora.bias", lora.bias, "must be 'none', 'all' or 'lora_only'.")


def _quant_values(inp: CheckInput) -> Iterator[FieldError]:
    q = inp.spec.model.quantization
    if q is None:
        return
    if q.bits not in (4, 8):
        yield FieldError("model.quantization.bits", q.bits, "must be 4 or 8 (bitsandbytes).")
    if q.quant_type not in ("nf4", "fp4"):
        yield FieldError("model.quantization.quant_type", q.quant_type, "must be 'nf4' or 'fp4'.")


def _quant_lora(inp: CheckInput) -> Iterator[FieldError]:
    q = inp.spec.model.quantization
    if q is not None and inp.spec.model.lora is None:
        yield FieldError(
            "model.quantization",
            f"{q.bits}-bit",
            "needs model.lora: a quantized base model is "
            "frozen, so only LoRA adapters can train (QLoRA). Add `model.lora: {}` or remove "
            "quantization.",
        )


def _quant_gpu(inp: CheckInput) -> Iterator[FieldError]:
    q, b = inp.spec.model.quantization, inp.spec.backend
    if q is None:
        return
    if b.kind == LOCAL and not _cuda():
        yield FieldError(
            "model.quantization",
            f"{q.bits}-bit",
            "loads the base model through bitsandbytes, which "
            "needs a CUDA GPU, and this machine has none. Remove model.quantization to train in "
            "bf16/fp32 here, or run it on a GPU (backend.kind: hf_jobs with a GPU flavor).",
        )
    if b.kind == HF_JOBS and b.flavor and b.flavor.startswith("cpu"):
        yield FieldError(
            "model.quantization", f"{q.bits}-bit", f"needs a CUDA GPU; {b.flavor} has none. Choose a GPU flavor."
        )


def _chat_template(inp: CheckInput) -> Iterator[FieldError]:
    template = inp.spec.model.chat_template
    if template is None:
        return
    try:
        import jinja2

        jinja2.Environment().parse(template)
    except ImportError:
        return
    except Exception as exc:  # any template syntax error
        yield FieldError(
            "model.chat_template",
            template[:80] + ("..." if len(template) > 80 else ""),
            f"is not a valid Jinja template ({type(exc).__name__}: {exc}). Fix it, or remove it to use "
            "the tokenizer's own template.",
        )


def _reward_models(inp: CheckInput) -> Iterator[FieldError]:
    for i, r in enumerate(inp.spec.rewards):
        if not r.model:
            continue
        where = f"rewards[{i}].model"
        if r.builtin or r.function or r.params:
            yield FieldError(
                where,
                r.model,
                "is a reward model: it cannot be combined with builtin, function or "
                "params. Keep the model, or make this entry a reward function.",
            )
        local = resolve(inp.base, r.model)
        if local.exists():
            if not (local / "config.json").is_file():
                yield FieldError(
                    where,
                    r.model,
                    f"is a local path ({local}) without config.json; give a "
                    "directory written by save_pretrained (a sequence-classification model), or a Hub "
                    "id.",
                )
        elif r.model.startswith((".", "/", "~")) or not HUB_ID.match(r.model):
            yield FieldError(
                where,
                r.model,
                "is neither an existing directory nor a Hub id like "
                "`owner/reward-model` (TRL loads it with AutoModelForSequenceClassification).",
            )


def _mixture(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if d.mixture is None:
        return
    if d.path or d.data_files:
        yield FieldError(
            "dataset.mixture",
            "(set)",
            "cannot be combined with dataset.path or dataset.data_files: the "
            "mixture lists every dataset. Remove one of them.",
        )
    if not d.mixture:
        yield FieldError("dataset.mixture", [], "needs at least one dataset, e.g. [{path: owner/data}].")
    fractions = [e.get("fraction") for e in d.mixture if isinstance(e, dict)]
    for j, e in enumerate(d.mixture):
        if not isinstance(e, dict) or not e.get("path"):
            yield FieldError(
                f"dataset.mixture[{j}]",
                e,
                f"must be a mapping with at least `path` (TRL's DatasetConfig: {', '.join(MIXTURE_KEYS)}).",
            )
            continue
        bad = [k for k in e if k not in MIXTURE_KEYS]
        if bad:
            yield FieldError(
                f"dataset.mixture[{j}].{bad[0]}",
                e[bad[0]],
                f"is not a DatasetConfig field; allowed: {', '.join(MIXTURE_KEYS)}.",
            )
    if any(f is not None for f in fractions) and any(f is None for f in fractions):
        yield FieldError(
            "dataset.mixture",
            fractions,
            "sets `fraction` for some datasets only; TRL needs it for all of them or none.",
        )
    if d.streaming and any(f is not None for f in fractions):
        yield FieldError("dataset.mixture", fractions, "fractions are not supported for streamed datasets.")


def _test_split(inp: CheckInput) -> Iterator[FieldError]:
    d = inp.spec.dataset
    if d.mixture is None and d.test_split_size is not None:
        yield FieldError(
            "dataset.test_split_size",
            d.test_split_size,
            "only applies to dataset.mixture; for one dataset set dataset.eval_split.",
        )


def _streaming(inp: CheckInput) -> Iterator[FieldError]:
    if not inp.spec.dataset.streaming:
        return
    steps = inp.spec.training.get("max_steps", -1)
    if not isinstance(steps, int) or steps <= 0:
        yield FieldError(
            "dataset.streaming",
            True,
            "needs training.max_steps > 0: a streamed dataset has no "
            "length, so the trainer cannot count epochs. Set max_steps.",
        )


def _env(inp: CheckInput) -> Iterator[FieldError]:
    for name, value in inp.spec.backend.env.items():
        if not ENV_NAME.match(str(name)):
            yield FieldError(f"backend.env.{name}", value, "is not a valid environment variable name.")
        elif SECRET_LIKE.search(str(name)):
            yield FieldError(
                f"backend.env.{name}",
                "***",
                "looks like a secret, and env values are stored with the "
                f"run. List the name in backend.secrets instead ({name}): its value is read from your "
                "environment at launch and never stored.",
            )


def _secrets(inp: CheckInput) -> Iterator[FieldError]:
    b = inp.spec.backend
    for i, name in enumerate(b.secrets):
        if not isinstance(name, str) or not ENV_NAME.match(name):
            yield FieldError(
                f"backend.secrets[{i}]", name, "must be an environment variable name, e.g. WANDB_API_KEY."
            )
        elif name == "HF_TOKEN":
            yield FieldError(f"backend.secrets[{i}]", name, "is always sent (your login token); remove it.")
        elif name not in os.environ:
            # an error for Jobs: its job starts without it and fails later
            yield FieldError(
                f"backend.secrets[{i}]",
                name,
                f"is not set in this environment, so the job would not get it. `export {name}=...` before launching.",
                "error" if b.kind == HF_JOBS else "warning",
            )


def _cuda() -> bool:
    return gpu_probe.has_cuda()


CHECKS = [
    Check("model.lora.task_type", ("model.lora.task_type",), _lora_task),
    Check("model.lora.bias", ("model.lora.bias",), _lora_bias),
    Check("model.quantization.values", ("model.quantization.bits", "model.quantization.quant_type"), _quant_values),
    Check("model.quantization.needs_lora", ("model.quantization", "model.lora"), _quant_lora),
    Check("model.quantization.needs_gpu", ("model.quantization", "backend.kind", "backend.flavor"), _quant_gpu),
    Check("model.chat_template.jinja", ("model.chat_template",), _chat_template),
    Check("rewards.models", ("rewards",), _reward_models),
    Check("dataset.mixture", ("dataset.mixture", "dataset.path", "dataset.data_files", "dataset.streaming"), _mixture),
    Check("dataset.test_split_size", ("dataset.test_split_size",), _test_split),
    Check("dataset.streaming.max_steps", ("dataset.streaming", "training.max_steps"), _streaming),
    Check("backend.env", ("backend.env",), _env),
    Check("backend.secrets", ("backend.secrets",), _secrets),
    Check("tags", ("tags",), _tags),
    Check("output_dir.usable", ("output_dir",), _output_dir),
    Check("packages.installed", (), _packages),  # each problem names the field that needs the package
]
