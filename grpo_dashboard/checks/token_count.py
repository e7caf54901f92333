"""Prompt token counts with the model's tokenizer, counted in a child process.

Loading a tokenizer through transformers imports torch; the dashboard process never does, so the inspector asks
`python -m grpo_dashboard.checks.token_count` (this module) instead: the request (the spec, the folder its paths
resolve against, the rendered prompts) goes in on stdin as JSON, the counts come back on stdout. The child runs
`load_tokenizer` / `count_tokens` below, the code the inspector ran in its own process before, so the counts are
the same; `count_tokens` without a tokenizer is the inspector's ~4-characters-per-token estimate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.sandbox import REPO_ROOT
from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import RunSpec

TIMEOUT_S = 180.0  # a cold import of transformers and torch on a small machine, then the counting


def load_tokenizer(spec: RunSpec, base: Path) -> Any:
    """The model's tokenizer when it is on disk (local directory or Hub cache), else None (nothing is downloaded).

    Never with the model's own code: `trust_remote_code` is the job's business, this process imports none of it.
    """
    local = _resolve(base, spec.model.name_or_path) if spec.model.name_or_path else None
    names = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    try:
        if local is not None and local.is_dir():
            if not any((local / n).is_file() for n in names):
                return None
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(local), trust_remote_code=False)
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(
            try_to_load_from_cache(spec.model.name_or_path, "tokenizer_config.json", revision=spec.model.revision), str
        ):
            return None
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            spec.model.name_or_path, revision=spec.model.revision, local_files_only=True, trust_remote_code=False
        )
    except Exception:  # a tokenizer that cannot load only makes the token counts approximate
        return None


def count_tokens(prompt: str | list[dict[str, Any]], tokenizer: Any) -> int:
    """Prompt length in tokens (chat template applied to message lists); ~4 characters per token without one."""
    if isinstance(prompt, list):
        text = "\n".join(str(m.get("content") or "") for m in prompt)
        if tokenizer is not None and getattr(tokenizer, "chat_template", None):
            try:
                text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
            except Exception:  # a broken template is reported separately
                pass
    else:
        text = prompt
    if tokenizer is None:
        return (len(text) + 3) // 4
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _resolve(base: Path, value: str) -> Path:
    p = user_path(value)
    return p if p.is_absolute() else base / p


def count_in_child(spec: RunSpec, base: Path, prompts: list[Any], timeout_s: float = TIMEOUT_S) -> list[int] | None:
    """The token count of each prompt with the model's tokenizer (chat template applied to message lists); None
    when its tokenizer is not on disk, cannot load, or the child fails or runs out of time."""
    request = json.dumps({"spec": spec.to_yaml(), "base": str(base), "prompts": prompts}, default=str)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "grpo_dashboard.checks.token_count"],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("@@")), None)
    if done.returncode != 0 or line is None:
        return None
    lengths = json.loads(line[2:])["lengths"]
    return None if lengths is None else [int(n) for n in lengths]


def _main() -> int:
    request = json.loads(sys.stdin.read())
    spec = RunSpec.from_yaml(request["spec"])
    tokenizer = load_tokenizer(spec, Path(request["base"]))
    lengths = None if tokenizer is None else [count_tokens(p, tokenizer) for p in request["prompts"]]
    print("@@" + json.dumps({"lengths": lengths}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
