"""Text helpers for GRPO rewards: answer extraction, normalisation, numbers, JSON and a small JSON-schema subset.

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
            candidates.append(text[i:j + 1])
    for cand in candidates:
        if not cand:
            continue
        try:
            return True, json.loads(cand)
        except ValueError:
            continue
    return False, None


_SCHEMA_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_SCHEMA_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "anyOf", "allOf", "oneOf", "not", "$schema", "$id", "title", "description", "default", "examples",
}


def _check_schema_subset(schema: Any, where: str = "schema") -> None:
    if not isinstance(schema, dict):
        raise ValueError(f"json_valid: {where} must be a JSON object (a mapping), got {type(schema).__name__}.")
    for key, value in schema.items():
        if key not in _SCHEMA_KEYWORDS:
            raise ValueError(f"json_valid: {where} uses the JSON-schema keyword {key!r}, which the built-in checker "
                             f"does not support ({sorted(_SCHEMA_KEYWORDS)}). Install `jsonschema` for full support "
                             f"(pip install jsonschema), or simplify the schema.")
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            bad = [k for k in kinds if k not in _SCHEMA_TYPES]
            if bad:
                raise ValueError(f"json_valid: {where}.type {value!r} is not one of {sorted(_SCHEMA_TYPES)}.")
        elif key == "properties":
            for name, sub in dict(value).items():
                _check_schema_subset(sub, f"{where}.properties.{name}")
        elif key in ("items", "not") or key == "additionalProperties" and isinstance(value, dict):
            _check_schema_subset(value, f"{where}.{key}")
        elif key in ("anyOf", "allOf", "oneOf"):
            for i, sub in enumerate(value):
                _check_schema_subset(sub, f"{where}.{key}[{i}]")


def _schema_errors(schema: dict[str, Any], v: Any, path: str = "$") -> list[str]:
    """Errors of `v` against the supported JSON-schema subset (empty when valid)."""
    errs: list[str] = []
    t = schema.get("type")
    if t is not None and not any(_SCHEMA_TYPES[k](v) for k in (t if isinstance(t, list) else [t])):
        return [f"{path}: expected type {t}, got {type(v).__name__}"]
    if "enum" in schema and v not in schema["enum"]:
        errs.append(f"{path}: {v!r} not in enum {schema['enum']}")
    if "const" in schema and v != schema["const"]:
        errs.append(f"{path}: {v!r} != const {schema['const']!r}")
    if _SCHEMA_TYPES["number"](v):
        for key, bad in (("minimum", v < schema.get("minimum", v)), ("maximum", v > schema.get("maximum", v)),
                         ("exclusiveMinimum", "exclusiveMinimum" in schema and v <= schema["exclusiveMinimum"]),
                         ("exclusiveMaximum", "exclusiveMaximum" in schema and v >= schema["exclusiveMaximum"])):
            if bad:
                errs.append(f"{path}: {v} violates {key} {schema[key]}")
    if isinstance(v, str):
        if len(v) < schema.get("minLength", 0) or len(v) > schema.get("maxLength", len(v)):
            errs.append(f"{path}: length {len(v)} outside minLength/maxLength")
        if "pattern" in schema and not re.search(schema["pattern"], v):
            errs.append(f"{path}: does not match pattern {schema['pattern']!r}")
    if isinstance(v, list):
        if len(v) < schema.get("minItems", 0) or len(v) > schema.get("maxItems", len(v)):
            errs.append(f"{path}: {len(v)} items outside minItems/maxItems")
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(v):
                errs += _schema_errors(schema["items"], item, f"{path}[{i}]")
    if isinstance(v, dict):
        props = schema.get("properties", {})
        errs += [f"{path}: missing required {k!r}" for k in schema.get("required", []) if k not in v]
        extra = schema.get("additionalProperties", True)
        for k, item in v.items():
            if k in props:
                errs += _schema_errors(props[k], item, f"{path}.{k}")
            elif extra is False:
                errs.append(f"{path}: unexpected property {k!r}")
            elif isinstance(extra, dict):
                errs += _schema_errors(extra, item, f"{path}.{k}")
    for key, need in (("allOf", "all"), ("anyOf", "any"), ("oneOf", "one")):
        if key in schema:
            ok = [not _schema_errors(sub, v, path) for sub in schema[key]]
            if not {"all": all(ok), "any": any(ok), "one": sum(ok) == 1}[need]:
                errs.append(f"{path}: fails {key}")
    if "not" in schema and not _schema_errors(schema["not"], v, path):
        errs.append(f"{path}: matches the `not` schema")
    return errs


def schema_validator(schema: Any) -> Callable[[Any], list[str]]:
    """A function returning the errors of an instance against `schema` (jsonschema when installed, else a subset).

    Raises ValueError with the reason when the schema itself is invalid or unsupported.
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
    except ImportError:
        _check_schema_subset(schema)
        return lambda v: _schema_errors(schema, v)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"json_valid: params.schema is not a valid JSON schema: {exc.message}.") from exc
    validator = cls(schema)
    return lambda v: [e.message for e in validator.iter_errors(v)]
