"""The size and shape of a policy model, for the memory and time estimates of `hardware.py`.

Sources, first hit wins: a local directory (config.json, exact parameter count from the safetensors headers), the
tiny offline test model, the Hub (config.json, downloaded or cached, and the exact count from the safetensors
metadata of `HfApi.model_info`), a built-in table of common GRPO models, and last the size written in the name
(`...-7B-...`) scaled from the nearest table entry. Every result says where it came from.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grpo_dashboard.spec.paths import user_path

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class ModelShape:
    """What the estimator needs to know about a decoder-only transformer."""

    params: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = True
    dtype: str = "bfloat16"
    active_fraction: float = 1.0  # share of parameters used per token (< 1 for mixture-of-experts)
    source: str = "built-in table"

    @property
    def billions(self) -> float:
        """Parameter count in billions."""
        return self.params / 1e9


def _shape(
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv: int,
    vocab: int,
    tied: bool,
    head_dim: int | None = None,
    bias: bool = False,
    qk_norm: bool = False,
) -> ModelShape:
    hd = head_dim or hidden // heads
    return ModelShape(
        count_params(hidden, inter, layers, heads, kv, hd, vocab, tied, bias, qk_norm),
        hidden,
        inter,
        layers,
        heads,
        kv,
        hd,
        vocab,
        tied,
    )


def count_params(
    hidden: int,
    inter: int,
    layers: int,
    heads: int,
    kv: int,
    head_dim: int,
    vocab: int,
    tied: bool,
    bias: bool = False,
    qk_norm: bool = False,
    experts: int = 1,
) -> int:
    """Parameters of a Llama/Qwen-style decoder: attention, gated MLP (x experts), norms, embeddings, lm_head."""
    attn = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    if bias:
        attn += heads * head_dim + 2 * kv * head_dim
    mlp = 3 * hidden * inter * experts + (hidden * experts if experts > 1 else 0)
    norms = 2 * hidden + (2 * head_dim if qk_norm else 0)
    return layers * (attn + mlp + norms) + vocab * hidden * (1 if tied else 2) + hidden


# Published configs (config.json of each repo); keys are lower-case repo names without the owner.
KNOWN: dict[str, ModelShape] = {
    "qwen2.5-0.5b": _shape(896, 4864, 24, 14, 2, 151936, True, bias=True),
    "qwen2.5-1.5b": _shape(1536, 8960, 28, 12, 2, 151936, True, bias=True),
    "qwen2.5-3b": _shape(2048, 11008, 36, 16, 2, 151936, True, bias=True),
    "qwen2.5-7b": _shape(3584, 18944, 28, 28, 4, 152064, False, bias=True),
    "qwen2.5-14b": _shape(5120, 13824, 48, 40, 8, 152064, False, bias=True),
    "qwen2.5-32b": _shape(5120, 27648, 64, 40, 8, 152064, False, bias=True),
    "qwen3-0.6b": _shape(1024, 3072, 28, 16, 8, 151936, True, head_dim=128, qk_norm=True),
    "qwen3-1.7b": _shape(2048, 6144, 28, 16, 8, 151936, True, head_dim=128, qk_norm=True),
    "qwen3-4b": _shape(2560, 9728, 36, 32, 8, 151936, True, head_dim=128, qk_norm=True),
    "qwen3-8b": _shape(4096, 12288, 36, 32, 8, 151936, False, head_dim=128, qk_norm=True),
    "qwen3-14b": _shape(5120, 17408, 40, 40, 8, 151936, False, head_dim=128, qk_norm=True),
    "llama-3.2-1b": _shape(2048, 8192, 16, 32, 8, 128256, True),
    "llama-3.2-3b": _shape(3072, 8192, 28, 24, 8, 128256, True),
    "llama-3.1-8b": _shape(4096, 14336, 32, 32, 8, 128256, False),
    "smollm2-135m": _shape(576, 1536, 30, 9, 3, 49152, True),
    "smollm2-360m": _shape(960, 2560, 32, 15, 5, 49152, True),
    "smollm2-1.7b": _shape(2048, 8192, 24, 32, 32, 49152, True),
}
TINY = replace(_shape(64, 128, 2, 4, 2, 90, True), dtype="float32", source="the tiny offline test model")


def model_shape(
    name_or_path: str,
    revision: str | None = None,
    base_dir: str | Path | None = None,
    build_tiny: bool = False,
    token: str | bool | None = None,
    endpoint: str | None = None,
) -> ModelShape | None:
    """The shape of a model from the best available source; None when nothing is known about it."""
    local = user_path(name_or_path)
    if not local.is_absolute() and base_dir is not None:
        local = Path(base_dir) / local
    if (local / "config.json").is_file():
        return from_directory(local)
    if build_tiny:
        return TINY
    return _from_hub(name_or_path, revision, token if token is False else token or None, endpoint) or from_name(
        name_or_path
    )


def from_directory(path: Path) -> ModelShape | None:
    """Shape from a saved model directory; the count is exact when safetensors files are present."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    shape = from_config(config, f"config.json in {path}")
    exact = _count_local_safetensors(path)
    if shape is not None and exact:
        shape = replace(shape, params=exact, source=f"{path} (config.json + safetensors headers)")
    return shape


def from_config(config: dict[str, Any], source: str) -> ModelShape | None:
    """Shape from a transformers config dict (text_config of multimodal models is used when present)."""
    cfg = config.get("text_config") or config
    try:
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        vocab = int(cfg.get("vocab_size") or config.get("vocab_size"))  # type: ignore[arg-type]  # None: TypeError
    except (KeyError, TypeError, ValueError):
        return None
    kv = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or hidden // heads)
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 1)
    inter = int(
        (cfg.get("moe_intermediate_size") if experts > 1 else None) or cfg.get("intermediate_size") or 4 * hidden
    )
    tied = bool(config.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    bias = bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2"))
    params = count_params(hidden, inter, layers, heads, kv, hd, vocab, tied, bias, experts=experts)
    active = 1.0
    if experts > 1:
        top_k = int(cfg.get("num_experts_per_tok") or 2)
        dense = count_params(hidden, inter, layers, heads, kv, hd, vocab, tied, bias, experts=top_k)
        active = dense / params
    dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    return ModelShape(
        params,
        hidden,
        inter,
        layers,
        heads,
        kv,
        hd,
        vocab,
        tied,
        dtype if dtype in DTYPE_BYTES else "bfloat16",
        active,
        source,
    )


def _count_local_safetensors(path: Path) -> int | None:
    total = 0
    for file in sorted(path.glob("*.safetensors")):
        try:
            with open(file, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
        except (OSError, ValueError, struct.error):
            return None
        for key, info in header.items():
            if key != "__metadata__":
                n = 1
                for d in info.get("shape", []):
                    n *= int(d)
                total += n
    return total or None


@functools.lru_cache(maxsize=64)
def _from_hub(repo_id: str, revision: str | None, token: str | bool | None, endpoint: str | None) -> ModelShape | None:
    # A cached config.json first (instant, works offline); then one metadata request without retries, so that an
    # unreachable Hub costs one failed connection, not hf_hub_download's retry loop.
    if not re.match(r"^[\w.-]+/[\w.-]+$", repo_id):
        return None
    from huggingface_hub import HfApi, constants, hf_hub_download

    def config(local_only: bool) -> ModelShape | None:
        try:
            path = hf_hub_download(
                repo_id, "config.json", revision=revision, token=token, endpoint=endpoint, local_files_only=local_only
            )
            return from_config(json.loads(Path(path).read_text(encoding="utf-8")), f"config.json of {repo_id}")
        except Exception:  # absent, private or offline
            return None

    shape = config(True)
    if constants.HF_HUB_OFFLINE:
        return shape
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(
            repo_id, revision=revision, expand=["safetensors"], timeout=5
        )
    except Exception:  # offline, private or absent: the cached config (or the table) is all we have
        return shape
    shape = shape or config(False) or from_name(repo_id)
    total = info.safetensors.total if info.safetensors else None
    if shape is not None and total:
        shape = replace(
            shape,
            params=int(total),
            source=f"{repo_id} on the Hub ({shape.source.split(' (')[0]} shape, safetensors parameter count)",
        )
    return shape


def from_name(name: str) -> ModelShape | None:
    """Shape from the built-in table, else from a size in the name (e.g. `7B`, `135M`) scaled from the table."""
    key = name.rstrip("/").split("/")[-1].lower()
    for suffix in ("-instruct", "-base", "-chat", "-it"):
        key = key.removesuffix(suffix)
    if key in KNOWN:
        return replace(KNOWN[key], source=f"built-in table ({key})")
    match = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", key)
    if not match:
        return None
    params = float(match.group(1)) * (1e9 if match.group(2) == "b" else 1e6)
    nearest = min(KNOWN.values(), key=lambda s: abs(s.params - params))
    scale = params / nearest.params
    return replace(
        nearest,
        params=int(params),
        hidden=max(64, int(nearest.hidden * scale**0.5)),
        intermediate=max(128, int(nearest.intermediate * scale**0.5)),
        source=f"rough: size {match.group(0).upper()} read from the name, shaped like a known model",
    )
