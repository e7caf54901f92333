"""What TRL 1.16's GRPOTrainer requires of a custom `rollout_func(prompts, trainer) -> dict` (read from its
`_generate` / `_generate_and_score_completions`), checked once on a real batch: by the dashboard's validation (in
the sandbox, `checks/agent_worker.py`) and by the job on its first rollout (`CheckedRollout`), so a wrong key or
shape fails with the key named instead of deep inside the trainer.

Ships beside `grpo_job.py`; imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

REQUIRED = ("prompt_ids", "completion_ids", "logprobs")  # TRL: "rollout_func must return keys [...]"
PER_TOKEN = ("logprobs", "logprob_token_ids", "env_mask")  # optional per-completion-token lists


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or type(v).__name__ in ("int64", "int32")


def _is_num(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) or hasattr(v, "__float__")


def _ids(name: str, value: Any, n: int, vocab: int | None, problems: list[str]) -> list[list[Any]] | None:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        problems.append(f"`{name}` must be a list of {n} token-id lists (one per prompt), got {type(value).__name__}")
        return None
    if len(value) != n:
        problems.append(
            f"`{name}` has {len(value)} entries for {n} prompts; return one per prompt (the prompts already repeat "
            "each dataset row num_generations times)"
        )
        return None
    out = []
    for i, row in enumerate(value):
        if hasattr(row, "tolist"):
            row = row.tolist()
        if not isinstance(row, list) or not all(_is_int(t) for t in row):
            problems.append(f"`{name}[{i}]` must be a list of int token ids, got {str(row)[:80]}")
            return None
        bad = [t for t in row if t < 0 or (vocab is not None and t >= vocab)]
        if bad:
            problems.append(f"`{name}[{i}]` holds token id {bad[0]} outside the tokenizer's vocabulary (0..{vocab})")
            return None
        out.append(row)
    return out


def contract_problems(output: Any, n_prompts: int, vocab_size: int | None = None) -> list[str]:
    """Every way `output` (what a rollout_func returned for `n_prompts` prompts) breaks TRL's contract: a dict with
    `prompt_ids` and `completion_ids` (one non-empty int list per prompt), `logprobs` (None, or one float list per
    completion, as long as it), optional `logprob_token_ids` / `env_mask` shaped like the completion, and any other
    key a list of one value per prompt (forwarded to the reward functions) or a single value."""
    if not isinstance(output, Mapping):
        return [f"must return a dict, got {type(output).__name__}"]
    missing = [k for k in REQUIRED if k not in output]
    if missing:
        return [f"must return keys {sorted(missing)} (TRL requires {list(REQUIRED)}); it returned {sorted(output)}"]
    problems: list[str] = []
    _ids("prompt_ids", output["prompt_ids"], n_prompts, vocab_size, problems)
    completions = _ids("completion_ids", output["completion_ids"], n_prompts, vocab_size, problems)
    if completions is not None:
        empty = [i for i, c in enumerate(completions) if not c]
        if empty:
            problems.append(f"`completion_ids[{empty[0]}]` is empty; every completion needs at least one token")
    for key in PER_TOKEN:
        value = output.get(key)
        if value is None or completions is None:
            continue
        if not isinstance(value, Sequence) or len(value) != n_prompts:
            problems.append(f"`{key}` must be a list of {n_prompts} per-token lists (or None)")
            continue
        for i, row in enumerate(value):
            row = row.tolist() if hasattr(row, "tolist") else row
            if row is None and key == "logprobs":
                continue
            if not isinstance(row, list) or len(row) != len(completions[i]):
                got = len(row) if isinstance(row, list) else type(row).__name__
                problems.append(
                    f"`{key}[{i}]` must have one value per token of `completion_ids[{i}]` "
                    f"({len(completions[i])}), got {got}"
                )
                break
            if key == "env_mask" and any(v not in (0, 1) for v in row):
                problems.append(f"`env_mask[{i}]` must hold 0 (environment token) or 1 (model token)")
                break
            if key != "env_mask" and not all(_is_num(v) for v in row):
                problems.append(f"`{key}[{i}]` must hold numbers")
                break
    for key, value in output.items():
        if key in REQUIRED or key in PER_TOKEN:
            continue
        if isinstance(value, list) and len(value) != n_prompts:
            problems.append(
                f"extra key `{key}` is a list of {len(value)} for {n_prompts} prompts; TRL gives the reward "
                "functions value i of a list (one per prompt) or the same non-list value to all"
            )
    return problems


class CheckedRollout:
    """The user's rollout_func, its first output checked against TRL's contract (ValueError naming every problem);
    a top-level class so it pickles."""

    def __init__(self, func: Callable[..., Any], target: str) -> None:
        self.func, self.target, self.checked = func, target, False
        self.last_turns: list[Any] | None = None  # the last output's `turns`, recorded as the samples' trajectories
        self.__name__ = getattr(func, "__name__", "rollout_func")

    def __call__(self, prompts: list[Any], trainer: Any) -> Any:
        output = self.func(prompts, trainer)
        if not self.checked:
            problems = contract_problems(output, len(prompts), vocab_size(trainer))
            if problems:
                raise ValueError(f"agent.rollout_func {self.target!r}: " + "; ".join(problems) + ".")
            self.checked = True
        turns = output.get("turns")
        self.last_turns = list(turns) if isinstance(turns, list) and len(turns) == len(prompts) else None
        return output


def vocab_size(trainer: Any) -> int | None:
    """The size of the trainer's tokenizer vocabulary (added tokens included), None when it cannot be told."""
    tok = getattr(trainer, "_tokenizer", None) or getattr(trainer, "processing_class", None)
    tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
    try:
        return len(tok) or None
    except TypeError:
        return None
