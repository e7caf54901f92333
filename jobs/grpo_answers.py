"""Text helpers for GRPO rewards: answer extraction, normalisation, numbers, JSON and JSON-schema checks.

Ships beside `grpo_job.py` and `grpo_rewards.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# ---------------------------------------------------------------- answer extraction

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|:)\s*:?\s*(.+)", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)
EXTRACT_MODES = ("auto", "answer_tag", "boxed", "last_line", "full")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) with balanced braces, or None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def extract_answer(text: str, mode: str = "auto") -> str:
    """The final answer in a completion: `<answer>` tag, `\\boxed{}`, `#### x`, `answer is x`, last line or all."""
    if mode == "full":
        return text.strip()
    if mode == "last_line":
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""
    tag = _ANSWER_TAG.findall(text)
    if mode == "answer_tag":
        inner = tag[-1] if tag else ""
        return (last_boxed(inner) or inner).strip()
    if mode == "boxed":
        return last_boxed(text) or ""
    if tag:
        return (last_boxed(tag[-1]) or tag[-1]).strip()
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    found = _ANSWER_IS.findall(text)
    if found:
        return found[-1].strip().splitlines()[0].strip().rstrip(".").strip()
    return text.strip()


def gold_answer(value: Any) -> str:
    """The reference answer in a dataset value (GSM8K `... #### 42` keeps only `42`)."""
    text = "" if value is None else str(value)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()


def math_correct(text: str, solution: Any) -> bool | None:
    """math-verify's verdict on a completion's answer (<answer> tag, \\boxed{}, LaTeX or a plain number) against the
    solution (GSM8K '... #### 42' is fine); None when the solution does not parse. math_verify loads on first use."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_text = gold_answer(solution)
    gold = parse(gold_text) or ("\\" in gold_text and parse(f"${gold_text}$"))
    if not gold:
        return None
    tag = _ANSWER_TAG.findall(text)
    pred_config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    pred = parse(tag[-1] if tag else text, extraction_config=pred_config, extraction_mode="first_match")
    return bool(pred and verify(gold, pred))


def normalize_text(text: str) -> str:
    """Lower-case, drop LaTeX wrappers, punctuation and articles, collapse spaces (SQuAD-style)."""
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text).replace("$", "").lower()
    text = re.sub(r"[^\w\s]", " ", text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*-?\d+(?:\.\d+)?)?|-?\.\d+")
_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?[\d.]+)\s*\}\{\s*(-?[\d.]+)\s*\}")


def parse_number(text: str) -> float | None:
    """The last number in `text` (accepts 1,234, -0.5, 3/4 and \\frac{3}{4}), or None."""
    found = _NUMBER.findall(_FRAC.sub(r"\1/\2", text))
    if not found:
        return None
    token = found[-1].replace(",", "").replace(" ", "")
    try:
        if "/" in token:
            num, den = token.split("/", 1)
            return float(num) / float(den) if float(den) else None
        return float(token)
    except ValueError:
        return None


# ---------------------------------------------------------------- structured output


def extract_json(text: str) -> tuple[bool, Any]:
    """Parse the JSON in a completion: the whole text, an `<answer>` tag, a ```json fence, or the outer {...}/[...]."""
    candidates = [text.strip()]
    candidates += [t.strip() for t in _ANSWER_TAG.findall(text)]
    candidates += [body.strip() for _, body in _FENCE.findall(text)]
    for open_, close in (("{", "}"), ("[", "]")):
        i, j = text.find(open_), text.rfind(close)
        if 0 <= i < j:
            candidates.append(text[i : j + 1])
    for cand in candidates:
        if not cand:
            continue
        try:
            return True, json.loads(cand)
        except ValueError:
            continue
    return False, None


def schema_validator(schema: Any) -> Callable[[Any], list[str]]:
    """A function returning the errors of an instance against `schema`, checked by `jsonschema` (a dependency of the
    job, in its PEP 723 header).

    Raises ValueError with the reason when the schema itself is invalid, or when jsonschema is not installed.
    """
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise ValueError(f"json_valid: params.schema is a string but not valid JSON ({exc}).") from exc
    if not isinstance(schema, dict):
        raise ValueError(f"json_valid: params.schema must be a JSON-schema mapping, got {type(schema).__name__}.")
    try:
        import jsonschema
    except ImportError as exc:
        raise ValueError(
            "json_valid: checking params.schema needs the `jsonschema` package, a dependency of the "
            "job; install it (pip install jsonschema)."
        ) from exc
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"json_valid: params.schema is not a valid JSON schema: {exc.message}.") from exc
    validator = cls(schema)
    return lambda v: [e.message for e in validator.iter_errors(v)]
