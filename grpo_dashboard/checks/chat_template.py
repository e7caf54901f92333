"""Whether a spec's model has a chat template, read from its files (local directory or the Hub cache)."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_dashboard.checks.spec_paths import resolve
from grpo_dashboard.spec.run_spec import RunSpec


def model_chat_template(spec: RunSpec, base: Path) -> bool | None:
    """True/False when the model's tokenizer files have/lack a chat template; None when they cannot be read here."""
    local = resolve(base, spec.model.name_or_path)
    if local.is_dir():
        if (local / "chat_template.jinja").is_file() or (local / "chat_template.json").is_file():
            return True
        cfg = local / "tokenizer_config.json"
        if cfg.is_file():
            try:
                return bool(json.loads(cfg.read_text(encoding="utf-8")).get("chat_template"))
            except (OSError, ValueError):
                return False
        return False
    try:
        from huggingface_hub import hf_hub_download

        for name in ("chat_template.jinja", "tokenizer_config.json"):
            try:
                path = hf_hub_download(spec.model.name_or_path, name, revision=spec.model.revision)
            except Exception:  # absent file or offline: try the next source
                continue
            if name.endswith(".jinja"):
                return True
            return bool(json.loads(Path(path).read_text(encoding="utf-8")).get("chat_template"))
    except ImportError:
        return None
    return None
