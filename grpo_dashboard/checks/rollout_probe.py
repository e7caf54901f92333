"""Runs a spec's `rollout_func` once on one real batch, as GRPOTrainer would call it, and checks what it returns
against TRL's contract (`jobs/grpo_rollout.py`, which the job applies to its first rollout too).

Runs only inside the sandboxed agent worker (`agent_worker.py`): it builds a real GRPOTrainer (TRL, the spec's
model on CPU), so it imports torch and trl inside its function; importing this module imports neither.
"""

from __future__ import annotations

import tempfile
from typing import Any


def _zero_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    return [0.0] * len(completions)


def probe(fn: Any, request: dict[str, Any]) -> list[str]:
    """Problems of `fn(prompts, trainer)` on the request's batch: `prompts` (already repeated num_generations
    times, as TRL's sampler gives them), `model` (a local model directory) and `training` (the GRPOConfig fields
    that shape a rollout: per_device_train_batch_size, num_generations, max_completion_length, temperature)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from grpo_dashboard.spec.jobfiles import job_module

    job_module()  # puts jobs/ on sys.path
    import grpo_rollout

    prompts = list(request["prompts"])
    training = dict(request.get("training") or {})
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            bf16=False,
            report_to="none",
            per_device_train_batch_size=len(prompts),
            **{k: v for k, v in training.items() if v is not None},
        )
        trainer = GRPOTrainer(
            model=request["model"],
            reward_funcs=[_zero_reward],
            args=config,
            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
            rollout_func=fn,
        )
        output = fn(prompts, trainer)
        return grpo_rollout.contract_problems(output, len(prompts), grpo_rollout.vocab_size(trainer))
