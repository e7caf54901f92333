"""Which TRL release a recipe was written for, and the defaults of that release that TRL 1.16 changed.

The tables are read from the released wheels by tools/trl_release_defaults.py; tests/test_trl_release_defaults.py
checks them against its extract (tests/fixtures/trl_release_defaults.json).
"""

from __future__ import annotations

from typing import Any

LATEST = "1.16"
# Defaults of older TRL releases that TRL 1.16 changed (GRPOConfig, and the trainer's behaviour where the release had
# no field for it: the loss normalisation, vLLM on its own GPU); a recipe written for one of them trains a different
# algorithm under 1.16 unless they are written out. Read from the released wheels by tools/trl_release_defaults.py
# (tests/test_trl_release_defaults.py checks this table against its extract). vLLM fields only matter with use_vllm.
TRL_DEFAULTS: dict[str, dict[str, Any]] = {
    "0.14": {
        "temperature": 0.9,
        "max_completion_length": 256,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 8,
        "beta": 0.04,
        "loss_type": "grpo",
        "vllm_mode": "server",
    },
    "0.16": {
        "max_completion_length": 256,
        "temperature": 0.9,
        "top_k": 50,
        "beta": 0.04,
        "loss_type": "bnpo",
        "vllm_mode": "server",
    },
    "0.18": {"max_completion_length": 256, "vllm_mode": "server", "beta": 0.04, "loss_type": "bnpo"},
    LATEST: {},
}
# Releases whose per_device_train_batch_size counted prompts (each generating num_generations completions); TRL ≥ 0.15
# counts completions, so the importer multiplies it by num_generations.
BATCH_IN_PROMPTS = ("0.14",)
# Keys that exist only in older TRL/transformers: their presence tells which release a recipe was written for (the
# newest release that still has the key; the first match wins, oldest release first).
VERSION_MARKERS = (
    ("vllm_device", "0.16"),
    ("vllm_dtype", "0.16"),
    ("vllm_max_model_len", "0.16"),
    ("vllm_enable_prefix_caching", "0.16"),
    ("max_prompt_length", "0.18"),
    ("vllm_guided_decoding_regex", "0.18"),
    ("use_liger_loss", "0.18"),
    ("wandb_log_unique_prompts", "0.18"),
    ("torch_dtype", "0.18"),
    ("overwrite_output_dir", "0.18"),
    ("warmup_ratio", "0.18"),
)


def infer_version(config: dict[str, Any]) -> tuple[str, str]:
    """The TRL release a recipe was written for, and why: keys that exist only in older releases, else 1.16."""
    for key, version in VERSION_MARKERS:
        if key in config:
            return version, f"it sets `{key}`, which only TRL ≤ {version} knows"
    return LATEST, "no key of an older TRL release"


def pin_defaults(training: dict[str, Any], fields: dict[str, Any], version: str) -> list[tuple[Any, ...]]:
    """Write `version`'s changed defaults the recipe does not set into `training`; the mapping-table rows
    (key, value, action, target, note) that say so."""
    t, rows = training, []
    set_batch = "per_device_train_batch_size" in t
    for key, old in TRL_DEFAULTS[version].items():
        if key in t or key not in fields:
            continue
        if key.startswith("vllm_") and not t.get("use_vllm"):
            continue
        new = fields[key].default
        if old != new:
            t[key] = old
            rows.append(
                (
                    f"({key})",
                    old,
                    "pinned",
                    f"training.{key}",
                    f"TRL {version}'s default, written out: TRL {LATEST}'s is {new!r}",
                )
            )
    if version in BATCH_IN_PROMPTS:
        prompts = t["per_device_train_batch_size"]
        g = t.get("num_generations", fields["num_generations"].default)
        t["per_device_train_batch_size"] = prompts * g
        rows.append(
            (
                "(per_device_train_batch_size)",
                prompts,
                "converted",
                "training.per_device_train_batch_size",
                f"TRL {version} counted prompts ({prompts}{'' if set_batch else ', its default'}), each with "
                f"num_generations ({g}) completions; TRL {LATEST} counts completions: {prompts} × {g} = "
                f"{prompts * g}",
            )
        )
    return rows
