"""Token redaction: anything shaped like a Hugging Face token (user or OAuth) is replaced before it is shown or kept.

The store applies it to every text it writes (run errors, event payloads, names, notes) and ingestion to every
record, so a token a job prints in its failure message never reaches the store, its WAL or a run file.
"""

from __future__ import annotations

import re
from typing import Any

TOKEN_PATTERN = re.compile(r"hf_oauth_[A-Za-z0-9._~-]{10,}|hf_[A-Za-z0-9]{10,}")  # user and OAuth tokens
REDACTED = "hf_***"


def redact(text: Any) -> Any:
    """`text` with every token-shaped substring replaced by `hf_***`; non-strings pass through."""
    return TOKEN_PATTERN.sub(REDACTED, text) if isinstance(text, str) else text


def redact_deep(value: Any) -> Any:
    """`value` (a record: dicts, lists, strings) with every string redacted; other values pass through unchanged."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_deep(v) for v in value]
    return value
