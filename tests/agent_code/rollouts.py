"""Rollout functions that break TRL's rollout_func contract in one way each (tests/test_agents_rollout.py)."""

from __future__ import annotations

from typing import Any


def _ids(trainer: Any, prompts: list[Any]) -> list[list[int]]:
    tok = trainer.processing_class
    return [
        list(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)) for p in prompts
    ]


def missing_logprobs(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    ids = _ids(trainer, prompts)
    return {"prompt_ids": ids, "completion_ids": [[5, trainer.processing_class.eos_token_id] for _ in ids]}


def one_per_row(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    ids = _ids(trainer, prompts)[:: trainer.num_generations]  # forgot that prompts repeat num_generations times
    return {"prompt_ids": ids, "completion_ids": [[5, 1] for _ in ids], "logprobs": [[0.0, 0.0] for _ in ids]}


def short_logprobs(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    ids = _ids(trainer, prompts)
    return {"prompt_ids": ids, "completion_ids": [[5, 6, 1] for _ in ids], "logprobs": [[0.0] for _ in ids]}


def raises(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    raise RuntimeError("the rollout server is down")
