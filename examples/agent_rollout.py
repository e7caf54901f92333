"""A custom multi-turn rollout for GRPOTrainer's `rollout_func` (examples/agent_rollout.yaml): the model's first turn
may call `calculator`; the rollout runs it, appends the result as environment tokens (masked out of the loss with
`env_mask`) and lets the model answer in a second turn. Generation uses the trainer's own model (transformers'
`generate`), so it runs on CPU without vLLM.

TRL's contract (1.16): return `prompt_ids`, `completion_ids` and `logprobs`, one entry per prompt (the prompts
already repeat every row num_generations times); other keys reach the reward functions. `turns` (one conversation
per prompt) is what the dashboard records as each sample's trajectory.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
CALL = re.compile(r"<call>calculator\(expression=([^)]*)\)</call>")


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("only integers and + - * are supported")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: The arithmetic expression to evaluate, e.g. 37+48 or (3*4)-5.

    Returns:
        The value of the expression as text.
    """
    return str(_value(ast.parse(expression.strip(), mode="eval")))


def _generate(trainer: Any, rows: list[list[int]], max_new: int) -> list[tuple[list[int], list[float]]]:
    """Sample one continuation per row with the trainer's model: (token ids up to and including EOS, logprobs)."""
    import torch

    tok = trainer.processing_class
    model = trainer.accelerator.unwrap_model(trainer.model)
    batch = tok.pad({"input_ids": rows}, return_tensors="pt", padding_side="left")
    with torch.no_grad():
        out = model.generate(
            **batch,
            do_sample=True,
            temperature=trainer.temperature,
            max_new_tokens=max_new,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
        )
    new = out.sequences[:, batch["input_ids"].shape[1] :]
    scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    result = []
    for ids, lps in zip(new.tolist(), scores.tolist(), strict=True):
        end = ids.index(tok.eos_token_id) + 1 if tok.eos_token_id in ids else len(ids)
        result.append((ids[:end], [float(x) for x in lps[:end]]))
    return result


def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
    """Two turns per prompt: a first answer (maybe a calculator call), the tool's result, a final answer."""
    tok = trainer.processing_class
    budget = trainer.max_completion_length
    prompt_ids = [
        list(
            tok.apply_chat_template(
                p, tools=[calculator], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for p in prompts
    ]
    first = _generate(trainer, prompt_ids, budget)
    completion_ids, logprobs, env_mask, turns, pending = [], [], [], [], []
    for i, (ids, lps) in enumerate(first):
        text = tok.decode(ids, skip_special_tokens=False)
        call = CALL.search(text)
        completion_ids.append(list(ids))
        logprobs.append(list(lps))
        env_mask.append([1] * len(ids))
        if call is None:
            turns.append([{"role": "assistant", "content": tok.decode(ids, skip_special_tokens=True)}])
            continue
        expression = call.group(1)
        try:
            result = calculator(expression)
        except Exception as exc:  # the model wrote something the tool refuses: TRL's failure form
            result = str({"error": str(exc)})
        fn = {"name": "calculator", "arguments": {"expression": expression}}
        turns.append(
            [
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": fn}]},
                {"role": "tool", "name": "calculator", "content": result},
            ]
        )
        feedback = tok(f"\n<|tool|>{result}\n<|assistant|>", add_special_tokens=False)["input_ids"]
        room = budget - len(ids) - len(feedback)
        if room > 0:
            completion_ids[i] += feedback
            logprobs[i] += [0.0] * len(feedback)
            env_mask[i] += [0] * len(feedback)
            pending.append((i, room))
    if pending:
        room = min(r for _, r in pending)
        second = _generate(trainer, [prompt_ids[i] + completion_ids[i] for i, _ in pending], room)
        for (i, _), (ids, lps) in zip(pending, second, strict=True):
            completion_ids[i] += ids
            logprobs[i] += lps
            env_mask[i] += [1] * len(ids)
            turns[i].append({"role": "assistant", "content": tok.decode(ids, skip_special_tokens=True)})
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": logprobs,
        "env_mask": env_mask,
        "turns": turns,
        "final_answer": [t[-1]["content"] if t[-1]["role"] == "assistant" else "" for t in turns],
    }


def final_answer_reward(
    completions: list[Any], final_answer: list[str], answer: list[Any], **kwargs: Any
) -> list[float]:
    """1.0 when the rollout's last assistant turn is the row's answer, else 0.0 (the `final_answer` key of the
    rollout's output reaches the reward as a keyword argument)."""
    return [float(str(f).strip() == str(a).strip()) for f, a in zip(final_answer, answer, strict=True)]


def used_tool_reward(completions: list[Any], turns: list[Any], **kwargs: Any) -> list[float]:
    """0.5 for a rollout whose calculator call succeeded."""
    return [0.5 if any(m.get("role") == "tool" and "error" not in m["content"] for m in t) else 0.0 for t in turns]
