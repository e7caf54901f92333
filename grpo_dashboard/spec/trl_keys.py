"""Where each flat TRL config key lives in a run spec: tables shared by `trl_import`, `trl_export` and spec hints.

Light (no trl import): the GRPOConfig field list itself comes from `trl_fields.grpo_fields()`.
"""

from __future__ import annotations

from typing import Any

# TRL `ModelConfig` / script-argument keys -> the spec field that holds them.
MODEL_KEYS = {
    "model_name_or_path": "model.name_or_path",
    "model_revision": "model.revision",
    "dtype": "model.dtype",
    "attn_implementation": "model.attn_implementation",
    "trust_remote_code": "model.trust_remote_code",
}
LORA_KEYS = {
    "lora_r": "r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "lora_target_modules": "target_modules",
    "lora_target_parameters": "target_parameters",
    "lora_modules_to_save": "modules_to_save",
    "lora_task_type": "task_type",
    "use_rslora": "use_rslora",
    "use_dora": "use_dora",
}
QUANT_KEYS = {
    "bnb_4bit_quant_type": "quant_type",
    "use_bnb_nested_quant": "double_quant",
    "bnb_4bit_quant_storage": "quant_storage",
}
DATASET_KEYS = {
    "dataset_name": "path",
    "dataset_config": "config",
    "dataset_train_split": "split",
    "dataset_test_split": "eval_split",
    "dataset_streaming": "streaming",
    "streaming": "streaming",
    "datasets": "mixture",
    "test_split_size": "test_split_size",
}
# Keys of the `trl` command itself (it hands them to `accelerate launch`), not of a dataclass.
LAUNCH_KEYS = {"num_processes": "backend.num_processes", "accelerate_config": "backend.accelerate_config"}
SPECIAL_KEYS = (
    "use_peft",
    "load_in_4bit",
    "load_in_8bit",
    "reward_funcs",
    "reward_model_name_or_path",
    "reward_weights",
    "output_dir",
    "env",
    "ignore_bias_buffers",
)

# Keys of other TRL versions and of popular recipe formats (open-r1, Unsloth, philschmid), with where they go.
# (target, how): target is a spec path, or None when the key is dropped; `how` is the reason shown.
FOREIGN: dict[str, tuple[str | None, str]] = {
    "torch_dtype": ("model.dtype", "renamed to `dtype` in transformers 5"),
    "warmup_ratio": ("training.warmup_steps", "removed in transformers 5; warmup_steps below 1 is a ratio"),
    "vllm_device": (
        "training.vllm_mode",
        "TRL 0.14 ran vLLM in-process on a spare GPU (vllm_device; deprecated in "
        "0.16 for a `trl vllm-serve` server); TRL 1.16 does that as vllm_mode: server",
    ),
    "gpu_memory_utilization": ("training.vllm_gpu_memory_utilization", "Unsloth's name for vLLM's memory share"),
    "use_gradient_checkpointing": ("training.gradient_checkpointing", "Unsloth's name; 'unsloth' means true"),
    "random_state": ("training.seed", "Unsloth's name for the seed"),
    "dataset_prompt_column": ("dataset.prompt_column", "open-r1's prompt column"),
    "dataset_mixture": (
        "dataset.mixture",
        "open-r1's dataset mixture (id, config, split, columns, weight; seed, "
        "test_split_size) as TRL's DatasetMixtureConfig",
    ),
    "dataset_id_or_path": ("dataset.path", "the recipe script's dataset argument"),
    "system_prompt": ("dataset.system_prompt", "open-r1's system prompt"),
    "chat_template": ("model.chat_template", "open-r1's chat template override"),
    "wandb_entity": ("backend.env.WANDB_ENTITY", "open-r1 sets it as an environment variable"),
    "wandb_project": ("backend.env.WANDB_PROJECT", "open-r1 sets it as an environment variable"),
    "wandb_run_group": ("backend.env.WANDB_RUN_GROUP", "open-r1 sets it as an environment variable"),
    "vllm_guided_decoding_regex": ("training.vllm_structured_outputs_regex", "renamed in TRL 1.x"),
    "wandb_log_unique_prompts": ("training.log_unique_prompts", "renamed in TRL 1.x (it applies to every tracker)"),
    "vllm_max_model_len": (
        "training.vllm_max_model_length",
        "TRL 0.16's in-process vLLM context window; TRL 1.16 "
        "names it vllm_max_model_length (colocate mode; a server takes `--max_model_len`)",
    ),
    "use_liger_loss": (
        None,
        "TRL 1.16 has no Liger GRPO loss: it always computes log-probs in chunks through a fused "
        "LM head (the memory Liger saved); for Hub kernels set training.model_init_kwargs: "
        "{use_kernels: true}",
    ),
    "vllm_dtype": (
        None,
        "TRL 0.16's in-process vLLM setting; in TRL 1.16 colocate mode uses the model's dtype and a "
        "vLLM server takes `trl vllm-serve --dtype`",
    ),
    "vllm_enable_prefix_caching": (
        None,
        "TRL 0.16's in-process vLLM setting; in TRL 1.16 a vLLM server takes `trl vllm-serve --enable_prefix_caching`",
    ),
    "max_prompt_length": (
        None,
        "removed in TRL 1.x: prompts are no longer truncated by the trainer; filter long "
        "prompts out of the dataset instead",
    ),
    "overwrite_output_dir": (None, "removed in transformers 5; every run has its own output directory"),
    "max_seq_length": (None, "an Unsloth model-loader argument; TRL bounds completions with max_completion_length"),
}
# Recipe keys that configure something TRL 1.16 and this dashboard do not have: (reason).
UNSUPPORTED: dict[str, str] = {
    "callbacks": "open-r1's own trainer callbacks (e.g. push_to_hub_revision) are not part of TRL",
    "benchmarks": "open-r1 launches lighteval benchmark jobs on Slurm after each save; not part of TRL",
    "hub_model_revision": "used only by open-r1's push_to_hub_revision callback",
    "overwrite_hub_revision": "used only by open-r1's push_to_hub_revision callback",
    "push_to_hub_revision": "open-r1's callback switch",
    "parallel_code_exec_per_proc": "open-r1's parallel requests to E2B/Morph per process; the open_r1_code "
    "built-in tests its `workers` (2) completions at once in the job's sandbox",
    "code_provider": "open-r1's remote code-execution provider",
    "e2b_router_url": "open-r1's remote code-execution router",
    "morph_router_url": "open-r1's remote code-execution router",
    "ioi_provider": "open-r1's IOI judge provider",
}
# Keys only open-r1's recipes have (its GRPOConfig and GRPOScriptArguments beyond TRL's).
OPEN_R1_KEYS = (
    "dataset_prompt_column",
    "system_prompt",
    "chat_template",
    "callbacks",
    "benchmarks",
    "hub_model_revision",
    "overwrite_hub_revision",
    "push_to_hub_revision",
    "wandb_entity",
    "wandb_project",
    "wandb_run_group",
    "dataset_mixture",
    "code_eval_test_batch_size",
    "code_eval_scoring_mode",
    "parallel_code_exec_per_proc",
    "code_provider",
    "e2b_router_url",
    "morph_router_url",
    "ioi_provider",
)
# open-r1 reward parameters (its GRPOScriptArguments) -> (open-r1 reward name, the built-in's parameter).
REWARD_PARAM_KEYS: dict[str, tuple[str, str]] = {
    "cosine_min_value_wrong": ("cosine", "min_value_wrong"),
    "cosine_max_value_wrong": ("cosine", "max_value_wrong"),
    "cosine_min_value_correct": ("cosine", "min_value_correct"),
    "cosine_max_value_correct": ("cosine", "max_value_correct"),
    "cosine_max_len": ("cosine", "max_len"),
    "repetition_n_grams": ("repetition_penalty", "ngram_size"),
    "repetition_max_penalty": ("repetition_penalty", "max_penalty"),
    "max_completion_len": ("soft_overlong_punishment", "max_completion_len"),
    "soft_punish_cache": ("soft_overlong_punishment", "soft_punish_cache"),
    "code_language": ("code_format", "language"),
    "code_eval_test_batch_size": ("cf_code", "test_batch_size"),  # also ioi_code's, which cannot be imported
    "code_eval_scoring_mode": ("cf_code", "scoring_mode"),
}


def spec_hint(key: str, grpo_fields: Any = None) -> str | None:
    """Where a flat TRL key belongs in a run spec (for an unknown top-level key), or None if it is no TRL key."""
    if key in MODEL_KEYS:
        return f"it is TRL's ModelConfig key; in a spec it is `{MODEL_KEYS[key]}`"
    if key in LORA_KEYS:
        return f"it is TRL's ModelConfig LoRA key; in a spec it is `model.lora.{LORA_KEYS[key]}`"
    if key == "use_peft":
        return "it is TRL's ModelConfig key; in a spec LoRA is on when `model.lora:` is set"
    if key in ("load_in_4bit", "load_in_8bit") or key in QUANT_KEYS:
        return "it is TRL's ModelConfig QLoRA key; in a spec it is `model.quantization` (bits, quant_type, ...)"
    if key in DATASET_KEYS:
        return f"it is a TRL script argument; in a spec it is `dataset.{DATASET_KEYS[key]}`"
    if key in ("reward_funcs", "reward_model_name_or_path", "reward_weights"):
        return "it is a TRL script argument; in a spec each reward is an entry of `rewards:` (name, weight, model)"
    if key in LAUNCH_KEYS:
        return f"it is a `trl` command key; in a spec it is `{LAUNCH_KEYS[key]}`"
    if key in FOREIGN and FOREIGN[key][0]:
        return f"{FOREIGN[key][1]}; in a spec it is `{FOREIGN[key][0]}`"
    if grpo_fields is not None and key in grpo_fields:
        return f"it is a GRPOConfig field; put it under `training:` (training.{key})"
    return None
