"""Layout of the new-run form: which spec and GRPOConfig fields each group shows, choices, and help for our own
spec fields (TRL's fields bring their own help text; `backend.*` fields carry theirs in their `help` metadata, set
by each backend package's `options.py`). Data only; `forms.py` builds the fields from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_dashboard.spec.agent_spec import AgentSpec
from grpo_dashboard.spec.run_spec import ACCELERATE_CONFIGS, BACKENDS, DTYPES, BackendSpec, DatasetSpec, ModelSpec

# Which TRL GRPOConfig fields each group shows (TRL names; fields missing from the installed TRL are skipped).
TRAINING_GROUPS: dict[str, tuple[str, ...]] = {
    "GRPO core": (
        "num_generations",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "max_steps",
        "num_train_epochs",
        "num_iterations",
        "epsilon",
        "epsilon_high",
        "beta",
        "loss_type",
        "scale_rewards",
        "mask_truncated_completions",
        "max_completion_length",
        "temperature",
        "importance_sampling_level",
        "top_entropy_quantile",
        "multi_objective_aggregation",
        "lr_scheduler_type",
        "warmup_steps",
        "max_grad_norm",
        "seed",
    ),
    "Generation / vLLM": (
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "generation_batch_size",
        "steps_per_generation",
        "use_vllm",
        "vllm_mode",
        "vllm_gpu_memory_utilization",
        "vllm_tensor_parallel_size",
        "vllm_server_base_url",
        "vllm_importance_sampling_correction",
        "vllm_enable_sleep_mode",
    ),
    "Logging & eval": (
        "logging_steps",
        "log_completions",
        "num_completions_to_print",
        "report_to",
        "run_name",
        "eval_strategy",
        "eval_steps",
        "per_device_eval_batch_size",
        "num_generations_eval",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "push_to_hub",
        "hub_model_id",
    ),
    "Backend & hardware": ("use_cpu", "bf16", "fp16", "gradient_checkpointing"),
}

# Spec dataclasses shown in each group, with the key prefix they live under.
SPEC_GROUPS: dict[str, tuple[tuple[str, type], ...]] = {
    "Model": (("model", ModelSpec),),
    "Data": (("dataset", DatasetSpec),),
    "Agent": (("agent", AgentSpec),),
    "Backend & hardware": (("backend", BackendSpec),),
}
TOP_LEVEL: dict[str, tuple[str, ...]] = {
    "Run": ("name", "description", "tags", "group"),
    "Logging & eval": ("output_dir", "save_model"),
}

SPEC_CHOICES: dict[str, tuple[Any, ...]] = {
    "model.dtype": DTYPES,
    "backend.kind": BACKENDS,
    "backend.accelerate_config": (None, *ACCELERATE_CONFIGS),
    "agent.trainer": ("grpo", "async_grpo"),
}
# Optional top-level sections shown with an on/off toggle (key: the section's field of RunSpec).
TOGGLED_SECTIONS = frozenset({"agent"})
# Mapping-or-text fields edited as text (a mapping as flow YAML, e.g. `{game: guess_number}`).
TEXT_FIELDS = frozenset({"agent.environment_factory"})
CUSTOM_ALLOWED = frozenset({"backend.accelerate_config", "backend.flavor"})
# Spec fields holding mappings (or lists of them): edited in the spec's YAML, not as a form input.
YAML_ONLY = frozenset({"backend.env", "dataset.mixture"})


@dataclass(frozen=True)
class Switch:
    """One on/off input standing for several TRL fields at once (no spec field of its own: its state is read from
    the fields). `on`: field -> value when on (None: the field's own value, written out even when it is TRL's
    default); `off`: field -> value when off (None: the field is removed, back to TRL's default)."""

    key: str
    group: str
    help: str
    on: dict[str, Any] = field(default_factory=dict)
    off: dict[str, Any] = field(default_factory=dict)


SWITCHES: tuple[Switch, ...] = (
    Switch(
        "resumable",
        "Logging & eval",
        "Save checkpoints (save_strategy steps, every save_steps steps) so the run can be resumed after a cancel "
        "or a failure.",
        on={"save_strategy": "steps", "save_steps": None},
        off={"save_strategy": "no", "save_steps": None},
    ),
)


def spec_choices(key: str) -> tuple[Any, ...] | None:
    """Allowed values of a spec field shown as a dropdown (None: free input)."""
    if key == "backend.flavor":
        try:
            from grpo_dashboard.spec.flavors import BUILTIN_FLAVORS
        except ImportError:
            return None
        return (None, *BUILTIN_FLAVORS)
    return SPEC_CHOICES.get(key)


SPEC_HELP: dict[str, str] = {
    "name": "Run name, shown in the runs table and used in the run id.",
    "description": "Free-text note about what this run tries.",
    "output_dir": "Where checkpoints and the final model go (default: the run's directory).",
    "save_model": "Save the final model to output_dir when training ends.",
    "model.name_or_path": "Hub model id (e.g. Qwen/Qwen2.5-0.5B-Instruct) or a local directory.",
    "model.dtype": "Weights dtype when loading the model.",
    "model.revision": "Hub revision (branch, tag or commit) of the model.",
    "model.trust_remote_code": "Allow the model repository's own modelling code to run.",
    "model.attn_implementation": "Attention kernel, e.g. sdpa, eager or flash_attention_2.",
    "model.build_tiny": "Build the tiny random offline test model at name_or_path on first use.",
    "model.lora": "Train a LoRA adapter instead of the full model.",
    "dataset.path": "Hub dataset id (e.g. openai/gsm8k). Give either this or data_files.",
    "dataset.config": "Dataset configuration name (e.g. main).",
    "dataset.split": "Training split.",
    "dataset.revision": "Hub revision of the dataset.",
    "dataset.data_files": "Local .json/.jsonl/.csv/.parquet file(s), comma-separated.",
    "dataset.eval_split": "Evaluation split of a Hub dataset.",
    "dataset.eval_data_files": "Local evaluation file(s), comma-separated.",
    "dataset.prompt_column": "Column holding the prompts.",
    "dataset.prompt_template": "Python format string building the prompt from columns, e.g. 'Solve: {question}'.",
    "dataset.system_prompt": "System message; makes prompts conversational (the model needs a chat template).",
    "dataset.conversational": "Send prompts through the chat template as a user message.",
    "model.lora.r": "LoRA rank.",
    "model.lora.lora_alpha": "LoRA scaling numerator (alpha / r scales the update).",
    "model.lora.lora_dropout": "Dropout on the LoRA input.",
    "agent": "Train a tool-using, multi-turn agent (GRPOTrainer's tools / environment_factory / rollout_func).",
    "agent.tools": "Tools, comma-separated: built-ins (calculator) or file.py:function (type hints and a Google "
    "docstring).",
    "agent.environment_factory": "A built-in (guess_number) or file.py:Class; several as {name: file.py:Class, ...} "
    "selected by the dataset's `environment` column. No dataset: the env owns prompts.",
    "agent.max_tool_calling_iterations": "Most tool-calling rounds per rollout (empty: no limit).",
    "agent.rollout_func": "Optional file.py:function(prompts, trainer) replacing TRL's generation (experimental).",
    "agent.log_columns": "Dataset columns recorded with every sample (per-task charts and trajectory filters).",
    "agent.trainer": "grpo, or async_grpo (TRL's experimental AsyncGRPOTrainer: a vLLM server and a GPU).",
    "agent.rollout_worker": "async_grpo only: package.module:factory(model, args, train_dataset, reward_funcs) "
    "returning AsyncGRPOTrainer's rollout_worker (empty: TRL's vLLM worker).",
    "agent.weight_transfer": "async_grpo only: package.module:factory(...) returning AsyncGRPOTrainer's "
    "weight_transfer (empty: TRL's NCCL transfer to the vLLM server).",
    "agent.tiny_warmup": "With model.build_tiny: teach the tiny model the tool-call format (short SFT) first.",
    "model.lora.target_modules": "Modules to adapt: all-linear, or names comma-separated (q_proj, v_proj).",
    "model.lora.target_parameters": "Parameters to adapt directly (e.g. MoE expert weights), comma-separated.",
    "model.lora.modules_to_save": "Modules trained in full and saved with the adapter (e.g. lm_head).",
    "model.lora.task_type": "PEFT task type (CAUSAL_LM for GRPO).",
    "model.lora.use_rslora": "Rank-stabilised LoRA: scale by alpha/√r instead of alpha/r.",
    "model.lora.use_dora": "DoRA: learn a magnitude beside the LoRA direction.",
    "model.lora.bias": "Which biases train: none, all or lora_only.",
    "model.quantization": "QLoRA: load the base model in 4 or 8 bits (bitsandbytes, a CUDA GPU; needs LoRA).",
    "model.quantization.bits": "4 or 8.",
    "model.quantization.quant_type": "4-bit type: nf4 or fp4.",
    "model.quantization.double_quant": "Nested (double) quantization of the 4-bit constants.",
    "model.quantization.quant_storage": "Storage dtype of the 4-bit weights (e.g. bfloat16 for FSDP).",
    "model.chat_template": "A Jinja chat template replacing the tokenizer's own.",
    "dataset.streaming": "Stream the dataset instead of downloading it (needs max_steps).",
    "dataset.test_split_size": "With a mixture: the share held out as the eval split.",
    "tags": "Labels to filter and compare runs by, comma-separated.",
    "group": "A group name (e.g. a sweep) to filter and compare runs by.",
}
