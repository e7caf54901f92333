"""The optional packages a spec's job needs beyond the job script's own dependencies, and why.

One table for both backends: a Jobs container gets them installed (`uv run --with`), a local launch checks that they
import here first. What the spec turns on decides: LoRA (peft), QLoRA or 8-bit optimizers (bitsandbytes), vLLM,
DeepSpeed presets, trackers in `report_to`, Liger kernels, flash-attention / Hub kernels, JSON-schema rewards.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import HF_JOBS, RunSpec

TRACKERS = {
    "trackio": ("trackio", "trackio"),
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "comet_ml": ("comet_ml", "comet-ml"),
    "clearml": ("clearml", "clearml"),
}


@dataclass(frozen=True)
class Dep:
    """One package: what pip/uv installs, what Python imports, the spec field that needs it and why."""

    pip: str
    module: str
    field: str
    reason: str
    alternative: str | None = None  # another package that serves the same (pip name = module name), e.g. kernels

    @property
    def installed(self) -> bool:
        """True when it (or its alternative) imports in this environment."""
        return any(_finds(m) for m in (self.module, self.alternative) if m)


def _finds(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# transformers 5 (modeling_flash_attention_utils FLASH_ATTN_KERNEL_FALLBACK, modeling_utils
# `_check_and_adjust_attn_implementation`): `flash_attention_2` / `_3` without the flash-attn package, with `kernels`
# installed, loads the Hub's prebuilt build instead. flash-attn itself has no wheel for a Jobs image and its source
# build needs torch at build time, so on Jobs the kernels route is the one that installs.
FLASH_KERNELS = {
    "flash_attention_2": "kernels-community/flash-attn2",
    "flash_attention_3": "kernels-community/vllm-flash-attn3",
}


def _report_to(training: dict[str, Any]) -> list[str]:
    value = training.get("report_to", "none")
    items = [value] if isinstance(value, str) else list(value or [])
    return [str(x) for x in items if x not in ("none", None)]


def job_deps(spec: RunSpec) -> list[Dep]:
    """Every optional package the spec's job imports (empty for a plain full fine-tune)."""
    t, m, b = spec.training, spec.model, spec.backend
    deps: list[Dep] = []
    if m.lora is not None:
        deps.append(Dep("peft", "peft", "model.lora", "LoRA adapters"))
    if m.quantization is not None:
        deps.append(Dep("bitsandbytes", "bitsandbytes", "model.quantization", "QLoRA (4/8-bit base model)"))
    optim = str(t.get("optim", ""))
    if "8bit" in optim or "bnb" in optim or "paged" in optim:
        if m.quantization is None:
            deps.append(Dep("bitsandbytes", "bitsandbytes", "training.optim", f"the {optim} optimizer"))
    if t.get("use_vllm"):
        deps.append(Dep("vllm", "vllm", "training.use_vllm", "vLLM generation"))
    if _deepspeed(b.accelerate_config):
        deps.append(Dep("deepspeed", "deepspeed", "backend.accelerate_config", f"the {b.accelerate_config} preset"))
    reports = _report_to(t)
    if "all" in reports:
        reports = ["trackio", "tensorboard"]
    for tracker in reports:
        if tracker in TRACKERS:
            module, pip = TRACKERS[tracker]
            deps.append(Dep(pip, module, "training.report_to", f"logging to {tracker}"))
    if t.get("use_liger_kernel") or t.get("use_liger_loss"):
        deps.append(Dep("liger-kernel", "liger_kernel", "training.use_liger_kernel", "Liger kernels"))
    attn = str(m.attn_implementation or "")
    if attn in FLASH_KERNELS:
        version = attn[-1]
        if b.kind == HF_JOBS:
            reason = f"flash-attention {version}: transformers loads the Hub's prebuilt {FLASH_KERNELS[attn]}"
            deps.append(Dep("kernels", "kernels", "model.attn_implementation", reason))
        else:
            pip, module = ("flash-attn", "flash_attn") if version == "2" else ("flash-attn-3", "flash_attn_interface")
            deps.append(
                Dep(pip, module, "model.attn_implementation", f"flash-attention {version}", alternative="kernels")
            )
    init = t.get("model_init_kwargs") or {}
    if "/" in attn or (isinstance(init, dict) and init.get("use_kernels")):
        deps.append(
            Dep(
                "kernels",
                "kernels",
                "model.attn_implementation" if "/" in attn else "training.model_init_kwargs.use_kernels",
                "Hub kernels",
            )
        )
    if any(
        (r.builtin or r.name) == "json_valid" and (r.params.get("schema") or r.params.get("schema_column"))
        for r in spec.rewards
    ):
        deps.append(Dep("jsonschema", "jsonschema", "rewards", "JSON-schema rewards"))
    if spec.agent is not None and any(t.startswith("openenv:") for t in spec.agent.environments.values()):
        deps.append(
            Dep("openenv-core>=0.3,<0.4", "openenv", "agent.environment_factory", "OpenEnv environments (client)")
        )
    unique: dict[str, Dep] = {}  # the first of each pip name, in order
    for d in deps:
        unique.setdefault(d.pip, d)
    return list(unique.values())


def _deepspeed(config: str | None) -> bool:
    if not config:
        return False
    name = Path(config).stem.lower()  # a preset name, or its shipped copy (/data/accelerate/zero2.yaml)
    if name.startswith("zero") or "deepspeed" in name:
        return True
    try:
        return "deepspeed" in user_path(config).read_text(encoding="utf-8").lower()
    except OSError:
        return False


def missing_locally(spec: RunSpec) -> list[Dep]:
    """The spec's optional packages that do not import here (a local job would fail at start)."""
    return [d for d in job_deps(spec) if not d.installed]
