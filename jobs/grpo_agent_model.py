"""The warmed tiny tool-calling model of the offline agent presets: the tiny char-level model with tool tokens, a
compact chat template and a matching transformers response template, taught the tool-call format by a short SFT on
synthetic transcripts (calculator problems, guessing games). Ships beside `grpo_job.py`; light at import.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_agents import GuessNumberEnv, calculator

AGENT_VERSION = 1  # bump when the warmed model's tokenizer, template or transcripts change
TOOL_TOKENS = ("<call>", "</call>")
TOOL_ROLE_TOKEN = "<|tool|>"
# Chat template of the tiny agent model: one line per turn, tools listed in a system line, a tool call rendered as
# `<call>name(key=value,...)</call>`. Prefix-preserving (TRL's multi-turn loop needs it); the char-level tokenizer
# drops spaces, so nothing relies on them.
AGENT_CHAT_TEMPLATE = (
    "{%- if tools %}<|system|>tools:{% for t in tools %} {{ t.function.name }}"
    "({{ t.function.parameters.properties | list | join(',') }}){% endfor %}{{ '\\n' }}{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|assistant|>{{ m.content }}"
    "{%- for tc in m.tool_calls or [] %}<call>{{ tc.function.name }}("
    "{%- for k, v in tc.function.arguments.items() %}{{ ',' if not loop.first }}{{ k }}={{ v }}{% endfor %})</call>"
    "{%- endfor %}<eos>{{ '\\n' }}"
    "{%- elif m.role == 'tool' %}<|tool|>{{ m.content }}{{ '\\n' }}"
    "{%- else %}<|{{ m.role }}|>{{ m.content }}{{ '\\n' }}{% endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)
# transformers' response template (parse_response) reading that format back into tool_calls.
AGENT_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<call>(?P<name>\w+)\(",
            "close_pattern": r"\)</call>",
            "repeats": True,
            "content": "xml-inline",
            "content_args": {"tag_pattern": r"(?P<key>\w+)=(?P<value>[^,)]*)", "value_parser": {"name": "text"}},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<eos>\s*", "content": "text"},
    },
}


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def _calc_transcript(rng: random.Random, use_tool: bool) -> tuple[list[dict[str, Any]], list[Any]]:
    a, b = rng.randint(1, 30), rng.randint(1, 9)
    op = rng.choice("+-*")
    expr = f"{a}{op}{b}"
    answer = calculator(expr)
    messages: list[dict[str, Any]] = [{"role": "user", "content": expr}]
    if use_tool:
        messages += [
            _call("calculator", {"expression": expr}),
            {"role": "tool", "name": "calculator", "content": answer},
            {"role": "assistant", "content": answer},
        ]
    else:
        messages.append({"role": "assistant", "content": str(rng.randint(2, 999))})
    return messages, [calculator]


def _guess_transcript(rng: random.Random, search: bool) -> tuple[list[dict[str, Any]], list[Any]]:
    env = GuessNumberEnv()
    intro = env.reset(secret=rng.randint(1, GuessNumberEnv.high))
    messages: list[dict[str, Any]] = [{"role": "user", "content": intro}]
    lo, hi = 1, GuessNumberEnv.high
    for _ in range(4):
        n = (lo + hi) // 2 if search else rng.randint(1, GuessNumberEnv.high)
        result = env.guess(n)
        messages += [
            _call("guess", {"number": n}),
            {"role": "tool", "name": "guess", "content": result},
        ]
        if result == "correct":
            break
        lo, hi = (n + 1, hi) if result == "higher" else (lo, n - 1)
    messages.append({"role": "assistant", "content": "done"})
    return messages, [env.guess]


def warmup_transcripts(n: int, seed: int = 0, tool_share: float = 0.5) -> list[tuple[list[dict[str, Any]], list[Any]]]:
    """Synthetic tool-calling conversations (messages, tools): calculator problems, `tool_share` of them solved with
    the calculator and the rest answered with a guess, and guessing games (binary search or random guesses)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 3 == 2:
            out.append(_guess_transcript(rng, rng.random() < 0.5))
        else:
            out.append(_calc_transcript(rng, rng.random() < tool_share))
    return out


def agent_tokenizer(base: str | Path) -> Any:
    """The tiny model's char-level tokenizer (from `base`) with the tool tokens, AGENT_CHAT_TEMPLATE and
    AGENT_RESPONSE_TEMPLATE."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.add_special_tokens({"additional_special_tokens": [TOOL_ROLE_TOKEN]})
    tokenizer.add_tokens(list(TOOL_TOKENS))
    tokenizer.chat_template = AGENT_CHAT_TEMPLATE
    tokenizer.response_template = AGENT_RESPONSE_TEMPLATE
    return tokenizer


PACKAGED = Path(__file__).resolve().parent / f"agent_model_v{AGENT_VERSION}"  # the warmed model, shipped prebuilt
PHASE = "building the agent model"
Progress = Callable[[str, int | None, int | None], None]  # (message, step, total)


def _print_progress(message: str, step: int | None, total: int | None) -> None:
    print(message, flush=True)


def build_warm_model(
    path: str | Path,
    build_base: Callable[[Path], Path],
    save: Callable[[Any, Any, Path], Path],
    seed: int = 0,
    steps: int = 1500,
    batch: int = 32,
    lr: float = 3e-3,
    progress: Progress | None = None,
    packaged: Path | None = PACKAGED,
) -> Path:
    """The tiny model taught the tool-call format: the char-level tiny model (`build_base`) with `<call>`/`</call>`
    tokens, a tool role, AGENT_CHAT_TEMPLATE and AGENT_RESPONSE_TEMPLATE, after a short SFT on `warmup_transcripts`.

    Made on first use at `path` and cached there (idempotent; `save` writes it atomically, as the tiny model's builder
    does): a random char-level model never emits a tool call, so GRPO would have no tool use to reinforce. The
    package ships this very model prebuilt (`packaged`, built with the defaults; about 10 CPU minutes to train), so
    a first run copies it; without it (or with other settings) it is trained here, reporting
    `building the agent model: step N/steps` through `progress(message, step, total)` (default: printed).
    """
    target = Path(path).expanduser()
    if (target / "config.json").is_file():
        return target
    report = progress or _print_progress
    target.parent.mkdir(parents=True, exist_ok=True)
    defaults = (seed, steps, batch, lr) == (0, 1500, 32, 3e-3)
    if defaults and packaged is not None and (packaged / "config.json").is_file():
        return _copy_packaged(packaged, target, report)
    import torch
    from transformers import AutoModelForCausalLM

    report(f"{PHASE}: the tiny model and its tool-call transcripts", 0, steps)
    base = build_base(target.parent / f".{target.name}.base-{os.getpid()}")
    tokenizer = agent_tokenizer(base)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer))
    rows = []
    for messages, tools in warmup_transcripts(steps * batch // 4, seed):
        ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)
        rows.append(list(ids)[:256])
    optim = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    rng = random.Random(seed)
    pad = tokenizer.pad_token_id
    every = max(1, steps // 50)
    for i in range(steps):
        chunk = rng.sample(rows, batch)
        width = max(len(r) for r in chunk)
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in chunk])
        labels = ids.clone()
        labels[ids == pad] = -100
        loss = model(input_ids=ids, attention_mask=(ids != pad).long(), labels=labels).loss
        loss.backward()
        optim.step()
        optim.zero_grad()
        if (i + 1) % every == 0 or i + 1 == steps:
            report(f"{PHASE}: step {i + 1}/{steps} (loss {loss.item():.3f})", i + 1, steps)
    model.eval()
    import shutil

    shutil.rmtree(base, ignore_errors=True)
    return save(model, tokenizer, target)


def _copy_packaged(packaged: Path, target: Path, report: Progress) -> Path:
    """Copy the shipped warm model into the cache at `target` (atomically: a temporary sibling, then a rename)."""
    import shutil

    report(f"{PHASE}: copying the prebuilt model shipped with the package ({packaged.name})", 0, 1)
    tmp = target.parent / f".{target.name}.copy-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(packaged, tmp)
    try:
        os.rename(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    report(f"{PHASE}: done, cached at {target}", 1, 1)
    return target
