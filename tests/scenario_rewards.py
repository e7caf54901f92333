"""Reward functions of the doctor's real-run scenarios (tests/health_scenarios.py); the job loads them from here."""

from __future__ import annotations

from typing import Any


def target_letter(completions: list[Any], target: list[str], **kwargs: Any) -> list[float]:
    """The share of the completion's characters equal to the row's `target` letter; a target `!x` pays for
    avoiding `x` (1 minus its share). Rows that ask for opposite things make a train set and an eval set that
    disagree, so learning the one is losing the other."""
    out = []
    for completion, wanted in zip(completions, target, strict=True):
        text = completion if isinstance(completion, str) else str(completion[-1]["content"])
        share = text.count(wanted.lstrip("!")) / max(1, len(text))
        out.append(1.0 - share if wanted.startswith("!") else share)
    return out
