"""What a TRL recipe implies but does not say, filled into its imported spec: the spec-only fields an export wrote in
its header, open-r1's chat prompts, the vLLM server GPU of server mode, and the process count its batches need.

Each function changes the spec in place and returns the mapping-table row that says so, or None when it changed
nothing; `effective(key)` is the value a training field will have (the spec's, else TRL's default)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from grpo_dashboard.spec.run_spec import GenerationSpec, LoraSpec, RewardSpec, RunSpec
from grpo_dashboard.spec.trl_import_result import Row

Effective = Callable[[str], Any]
# Keys only Unsloth's recipes set: its GRPOTrainer patch raises the per-device batch to num_generations.
UNSLOTH_KEYS = ("use_gradient_checkpointing", "random_state", "max_seq_length")


def apply_header(s: RunSpec, h: Mapping[str, Any] | None) -> Row | None:
    """What an export wrote for fields TRL has no key for (the rest came from TRL's keys)."""
    if not h:
        return None
    for key in ("name", "description", "save_model", "tags", "group"):
        if key in h:
            setattr(s, key, h[key])
    if "rewards" in h:
        s.rewards = [RewardSpec(**r) for r in h["rewards"]]
    for section in ("model", "dataset"):
        for key, value in (h.get(section) or {}).items():
            setattr(getattr(s, section), key, LoraSpec(**value) if key == "lora" else value)
    for key in h.get("exported_env") or []:  # what export-trl added for `trl grpo` (the module's folder)
        s.backend.env.pop(key, None)
    for key in h.get("exported_training") or []:  # ... and for its vLLM server (the backends set them at launch)
        s.training.pop(key, None)
    if "backend" in h or "health" in h:
        base = RunSpec.from_dict({"backend": h.get("backend", {}), "health": h.get("health", {})})
        base.backend.num_processes, base.backend.accelerate_config = (
            s.backend.num_processes,
            s.backend.accelerate_config,
        )
        base.backend.env = {**base.backend.env, **s.backend.env}
        s.backend, s.health = base.backend, base.health
    if "output_dir" in h:
        s.output_dir = h["output_dir"]
    if "generation" in h:
        s.generation = GenerationSpec(**h["generation"])
    return Row("(header)", None, "mapped", "(spec-only fields)", "what TRL has no key for, as exported")


def infer_open_r1_chat(s: RunSpec, open_r1: bool) -> Row | None:
    """open-r1's grpo.py always builds chat prompts ([system,] user: the prompt column); so does the spec then."""
    d = s.dataset
    if d.conversational or d.system_prompt or d.prompt_template or not open_r1:
        return None
    d.conversational = True
    return Row(
        "(conversational)",
        True,
        "converted",
        "dataset.conversational",
        "open-r1's grpo.py sends each prompt as a user message (make_conversation), so the chat template applies",
    )


def infer_server(s: RunSpec, eff: Effective, vllm_device: Any) -> Row | None:
    """Server mode without a server address: the backend starts `trl vllm-serve` on the GPU after training's.
    `vllm_device`: the recipe's own key (older TRL), or None."""
    t = s.training
    if s.generation is not None or not eff("use_vllm") or eff("vllm_mode") != "server":
        return None
    if t.get("vllm_server_base_url") or t.get("vllm_server_host"):
        return None
    n = s.backend.num_processes
    device = re.fullmatch(r"(?:cuda:)?(\d+)", str(vllm_device if vllm_device is not None else "").strip())
    gpu = int(device.group(1)) if device else n  # the recipe's own vLLM GPU; "auto": the one after training's
    s.generation = GenerationSpec(server_gpus=[gpu])
    why = f"the recipe's vllm_device {vllm_device!r}" if device else "the GPU after training's"
    return Row(
        "(vllm server)",
        gpu,
        "converted",
        "generation.server_gpus",
        f"vllm_mode: server with no server address: the backend starts `trl vllm-serve` on GPU "
        f"{gpu} ({why}) and trains on the other GPUs; change generation.server_gpus to fit your machine",
    )


def infer_processes(s: RunSpec, eff: Effective, config: Mapping[str, Any]) -> Row | None:
    """The smallest process count for which the recipe's batches hold whole prompt groups (TRL's check);
    `config`: the recipe's own keys."""
    if "num_processes" in config:
        return None
    t = s.training
    g, bs, ga = eff("num_generations"), eff("per_device_train_batch_size"), eff("gradient_accumulation_steps")
    spg, gbs = eff("steps_per_generation"), eff("generation_batch_size")
    evals = str(eff("eval_strategy") or "no") != "no"
    eg, ebs = eff("num_generations_eval") or g, eff("per_device_eval_batch_size")
    if not all(isinstance(x, int) and x > 0 for x in (g, bs, ga)):
        return None

    def fits(w: int) -> bool:
        batch = gbs if gbs is not None else bs * w * (spg or ga)
        ok = batch % g == 0 and (gbs is None or gbs % (bs * w) == 0)
        return ok and (not evals or not isinstance(ebs, int) or (ebs * w) % eg == 0)

    if fits(1):
        return None
    if any(k in config for k in UNSLOTH_KEYS) and isinstance(config.get("per_device_train_batch_size"), int):
        t["per_device_train_batch_size"] = g  # what Unsloth's GRPOTrainer patch does before training
        return Row(
            "(per_device_train_batch_size)",
            g,
            "converted",
            "training.per_device_train_batch_size",
            f"Unsloth raises it to num_generations ({g}) on one GPU; TRL 1.16 needs whole groups per generation batch",
        )
    world = next((w for w in range(2, 65) if fits(w)), None)
    if world is None:
        return None
    s.backend.num_processes = world
    return Row(
        "(num_processes)",
        world,
        "converted",
        "backend.num_processes",
        f"the smallest process count for which the recipe's batches are whole groups of "
        f"num_generations ({g}); TRL checks this with the world size",
    )
