"""Checks of the settings a TRL recipe brings along: LoRA fields, QLoRA, chat template, reward models, dataset
mixtures and streaming, job environment and secrets, tags, and the optional packages a local job needs."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.job_deps import missing_locally
from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import HF_JOBS, LOCAL, SLURM, RunSpec

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_LIKE = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|_KEY$|CREDENTIAL", re.I)
LORA_TASKS = ("CAUSAL_LM", "SEQ_CLS", "SEQ_2_SEQ_LM", "TOKEN_CLS", "QUESTION_ANS", "FEATURE_EXTRACTION")
MIXTURE_KEYS = ("path", "name", "data_dir", "data_files", "split", "columns", "fraction")


def check_extras(spec: RunSpec, base: Path, err: Any, warn: Any) -> None:
    """Append every problem of these settings to `err` (blocks a launch) or `warn`."""
    _lora(spec, err)
    _quantization(spec, err)
    _chat_template(spec, err)
    _reward_models(spec, base, err)
    _dataset(spec, err)
    _environment(spec, err, warn)
    for i, tag in enumerate(spec.tags):
        if not isinstance(tag, str) or not tag.strip() or len(tag) > 64:
            err(FieldError(f"tags[{i}]", tag, "must be a non-empty text of at most 64 characters."))
    if spec.backend.kind in (LOCAL, SLURM):
        where = "here (and on the cluster's nodes)" if spec.backend.kind == SLURM else "here"
        for dep in missing_locally(spec):
            # vLLM stays a warning: a server-mode run gets its generation from a server started elsewhere.
            report = warn if dep.module == "vllm" else err
            report(FieldError(dep.field, _shown(spec, dep.field), f"needs the {dep.pip!r} package ({dep.reason}), "
                              f"which is not installed here, so the job would fail at start: `pip install "
                              f"{dep.pip}` {where}, or run it on hf_jobs (a Jobs container gets it installed).",
                              "warning" if dep.module == "vllm" else "error"))


def _shown(spec: RunSpec, field: str) -> Any:
    head, _, rest = field.partition(".")
    if head == "training":
        return spec.training.get(rest.split(".")[0])
    obj: Any = spec
    for part in field.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, (str, int, float, bool, type(None))) else "(set)"


def _lora(spec: RunSpec, err: Any) -> None:
    lora = spec.model.lora
    if lora is None:
        return
    if lora.task_type not in LORA_TASKS:
        err(FieldError("model.lora.task_type", lora.task_type, f"must be one of {', '.join(LORA_TASKS)}; GRPO "
                       "trains a CAUSAL_LM."))
    if lora.bias not in ("none", "all", "lora_only"):
        err(FieldError("model.lora.bias", lora.bias, "must be 'none', 'all' or 'lora_only'."))


def _quantization(spec: RunSpec, err: Any) -> None:
    q = spec.model.quantization
    if q is None:
        return
    if q.bits not in (4, 8):
        err(FieldError("model.quantization.bits", q.bits, "must be 4 or 8 (bitsandbytes)."))
    if q.quant_type not in ("nf4", "fp4"):
        err(FieldError("model.quantization.quant_type", q.quant_type, "must be 'nf4' or 'fp4'."))
    if spec.model.lora is None:
        err(FieldError("model.quantization", f"{q.bits}-bit", "needs model.lora: a quantized base model is frozen, "
                       "so only LoRA adapters can train (QLoRA). Add `model.lora: {}` or remove quantization."))
    if spec.backend.kind == LOCAL and not _cuda():
        err(FieldError("model.quantization", f"{q.bits}-bit", "loads the base model through bitsandbytes, which "
                       "needs a CUDA GPU, and this machine has none. Remove model.quantization to train in "
                       "bf16/fp32 here, or run it on a GPU (backend.kind: hf_jobs with a GPU flavor)."))
    if spec.backend.kind == HF_JOBS and spec.backend.flavor and spec.backend.flavor.startswith("cpu"):
        err(FieldError("model.quantization", f"{q.bits}-bit", f"needs a CUDA GPU; {spec.backend.flavor} has none. "
                       "Choose a GPU flavor."))


def _chat_template(spec: RunSpec, err: Any) -> None:
    template = spec.model.chat_template
    if template is None:
        return
    try:
        import jinja2

        jinja2.Environment().parse(template)
    except ImportError:
        return
    except Exception as exc:  # any template syntax error
        err(FieldError("model.chat_template", template[:80] + ("..." if len(template) > 80 else ""),
                       f"is not a valid Jinja template ({type(exc).__name__}: {exc}). Fix it, or remove it to use "
                       "the tokenizer's own template."))


def _reward_models(spec: RunSpec, base: Path, err: Any) -> None:
    from grpo_dashboard.checks.validation import HUB_ID

    for i, r in enumerate(spec.rewards):
        if not r.model:
            continue
        where = f"rewards[{i}].model"
        if r.builtin or r.function or r.params:
            err(FieldError(where, r.model, "is a reward model: it cannot be combined with builtin, function or "
                           "params. Keep the model, or make this entry a reward function."))
        local = user_path(r.model)
        local = local if local.is_absolute() else base / local
        if local.exists():
            if not (local / "config.json").is_file():
                err(FieldError(where, r.model, f"is a local path ({local}) without config.json; give a directory "
                               "written by save_pretrained (a sequence-classification model), or a Hub id."))
        elif r.model.startswith((".", "/", "~")) or not HUB_ID.match(r.model):
            err(FieldError(where, r.model, "is neither an existing directory nor a Hub id like "
                           "`owner/reward-model` (TRL loads it with AutoModelForSequenceClassification)."))


def _dataset(spec: RunSpec, err: Any) -> None:
    d = spec.dataset
    if d.mixture is not None:
        if d.path or d.data_files:
            err(FieldError("dataset.mixture", "(set)", "cannot be combined with dataset.path or dataset.data_files: "
                           "the mixture lists every dataset. Remove one of them."))
        if not d.mixture:
            err(FieldError("dataset.mixture", [], "needs at least one dataset, e.g. [{path: owner/data}]."))
        fractions = [e.get("fraction") for e in d.mixture if isinstance(e, dict)]
        for j, e in enumerate(d.mixture):
            if not isinstance(e, dict) or not e.get("path"):
                err(FieldError(f"dataset.mixture[{j}]", e, "must be a mapping with at least `path` (TRL's "
                               f"DatasetConfig: {', '.join(MIXTURE_KEYS)})."))
                continue
            bad = [k for k in e if k not in MIXTURE_KEYS]
            if bad:
                err(FieldError(f"dataset.mixture[{j}].{bad[0]}", e[bad[0]], f"is not a DatasetConfig field; allowed: "
                               f"{', '.join(MIXTURE_KEYS)}."))
        if any(f is not None for f in fractions) and any(f is None for f in fractions):
            err(FieldError("dataset.mixture", fractions, "sets `fraction` for some datasets only; TRL needs it for "
                           "all of them or none."))
        if d.streaming and any(f is not None for f in fractions):
            err(FieldError("dataset.mixture", fractions, "fractions are not supported for streamed datasets."))
    elif d.test_split_size is not None:
        err(FieldError("dataset.test_split_size", d.test_split_size, "only applies to dataset.mixture; for one "
                       "dataset set dataset.eval_split."))
    if d.streaming:
        steps = spec.training.get("max_steps", -1)
        if not isinstance(steps, int) or steps <= 0:
            err(FieldError("dataset.streaming", True, "needs training.max_steps > 0: a streamed dataset has no "
                           "length, so the trainer cannot count epochs. Set max_steps."))


def _environment(spec: RunSpec, err: Any, warn: Any) -> None:
    b = spec.backend
    for name, value in b.env.items():
        if not ENV_NAME.match(str(name)):
            err(FieldError(f"backend.env.{name}", value, "is not a valid environment variable name."))
        elif SECRET_LIKE.search(str(name)):
            err(FieldError(f"backend.env.{name}", "***", "looks like a secret, and env values are stored with the "
                           f"run. List the name in backend.secrets instead ({name}): its value is read from your "
                           "environment at launch and never stored."))
    for i, name in enumerate(b.secrets):
        if not isinstance(name, str) or not ENV_NAME.match(name):
            err(FieldError(f"backend.secrets[{i}]", name, "must be an environment variable name, e.g. WANDB_API_KEY."))
        elif name == "HF_TOKEN":
            err(FieldError(f"backend.secrets[{i}]", name, "is always sent (your login token); remove it."))
        elif name not in os.environ:
            report = err if b.kind == HF_JOBS else warn  # a Jobs job starts without it and fails later
            report(FieldError(f"backend.secrets[{i}]", name, f"is not set in this environment, so the job would not "
                              f"get it. `export {name}=...` before launching.",
                              "error" if b.kind == HF_JOBS else "warning"))


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False
