"""What grpo_job.py builds from the settings a TRL recipe brings: LoRA / QLoRA, a chat template override, reward
models, dataset mixtures and streaming, and the sample records a remote job prints for the dashboard.

Self-contained like its siblings (no grpo_dashboard import); torch, peft, transformers and trl load inside functions.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

SAMPLE_MARKER = "@@GRPO_DASHBOARD_SAMPLE@@ "  # stdout prefix of one sample completion (remote jobs)
SAMPLES_STDOUT_ENV = "GRPO_JOB_SAMPLES_STDOUT"  # "1": also print each sample behind SAMPLE_MARKER


def peft_config(lora: Mapping[str, Any] | None) -> Any:
    """peft.LoraConfig from the spec's `model.lora` (every field TRL's get_peft_config passes), or None."""
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(**{k: v for k, v in dict(lora).items() if v is not None})


def quantization_config(model_spec: Mapping[str, Any]) -> Any:
    """transformers.BitsAndBytesConfig from `model.quantization` (as TRL's get_quantization_config), or None."""
    q = model_spec.get("quantization")
    if not q:
        return None
    from transformers import BitsAndBytesConfig

    if int(q["bits"]) == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    dtype = model_spec.get("dtype")
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=None if dtype in (None, "auto") else dtype,
                              bnb_4bit_quant_type=q["quant_type"], bnb_4bit_use_double_quant=bool(q["double_quant"]),
                              bnb_4bit_quant_storage=q.get("quant_storage"))


def processing_class(model_path: str, model_spec: Mapping[str, Any]) -> Any:
    """The tokenizer with `model.chat_template` in place of its own, or None to let TRL load it unchanged."""
    template = model_spec.get("chat_template")
    if not template:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, revision=model_spec.get("revision"),
                                              trust_remote_code=bool(model_spec.get("trust_remote_code")))
    tokenizer.chat_template = template
    return tokenizer


def load_mixture(ds_spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """(train, eval or None) of `dataset.mixture` through TRL's own `get_dataset` (DatasetMixtureConfig)."""
    from trl import DatasetMixtureConfig, get_dataset

    config = DatasetMixtureConfig(datasets=[dict(e) for e in ds_spec["mixture"]],
                                  streaming=bool(ds_spec.get("streaming")),
                                  test_split_size=ds_spec.get("test_split_size"))
    data = get_dataset(config)
    return data["train"], data["test"] if "test" in data else None


def print_sample(row: dict[str, Any], default: Any) -> None:
    """Print one sample record behind SAMPLE_MARKER when asked (a remote job's samples reach the dashboard)."""
    if os.environ.get(SAMPLES_STDOUT_ENV) == "1":
        sys.stdout.write(SAMPLE_MARKER + json.dumps(row, default=default) + "\n")


def gpu_metrics() -> dict[str, float]:
    """Memory (GB) and, with pynvml, utilisation (%) of each visible CUDA GPU, as `system/gpu<i>/...` metrics
    logged with each train record ({} without CUDA): the GPU charts of local and remote runs alike."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    out: dict[str, float] = {}
    for i in range(torch.cuda.device_count()):
        out[f"system/gpu{i}/memory_allocated_gb"] = torch.cuda.memory_allocated(i) / 1e9
        out[f"system/gpu{i}/memory_reserved_gb"] = torch.cuda.memory_reserved(i) / 1e9
        try:
            out[f"system/gpu{i}/utilization"] = float(torch.cuda.utilization(i))
        except Exception:  # noqa: BLE001 - pynvml missing or no NVML: memory only
            pass
    return out
