"""TRL's parser and TRL's own config checks on a recipe: the code, and the subprocess that runs it for a visitor.

`TrlParser` and the dataclasses' `__post_init__` are TRL's and transformers' code: they open files the recipe names,
import modules, allocate. For a user's own recipe on their own machine `parse_here` runs them in this process; for a
visitor's recipe the dashboard runs `python -m grpo_dashboard.spec.trl_isolated` inside the sandbox instead
(checks/trl_check.py: a time limit, an address-space limit, no network, no secrets), so the dashboard process never
imports trl for it. The subprocess answers with JSON: the values TRL's parser gives the keys, the keys it does not
know, TRL's check (None: accepted) and GRPOConfig's field defaults (the mapping needs them), on the last line of
stdout, marked.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from grpo_dashboard.errors import FieldError, SpecError

TIMEOUT_ENV = "GRPO_DASHBOARD_TRL_CHECK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0  # importing trl and transformers alone takes 5-10 s on a small CPU
MEMORY_MB = 4096
MARK = "@@trl-parse@@ "


@dataclass
class TrlParse:
    """What TRL's parser made of a recipe: `values` of the keys it knows, `unknown` keys, `check` (TRL's refusal of
    the whole config, None when it accepts it) and `defaults` (every GRPOConfig field's default)."""

    values: dict[str, Any]
    unknown: list[str]
    check: str | None
    defaults: dict[str, Any]


@dataclass(frozen=True)
class Field:
    """The part of trl_fields.TrlField the mapping uses: the default."""

    default: Any


def timeout_s() -> float:
    """The time limit of one parse (GRPO_DASHBOARD_TRL_CHECK_TIMEOUT_S, default DEFAULT_TIMEOUT_S)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise SpecError([FieldError(TIMEOUT_ENV, raw, "is not a number of seconds; set it to e.g. 120.")]) from None
    return value if value > 0 else DEFAULT_TIMEOUT_S


def refusal(message: str) -> SpecError:
    """The SpecError of TRL's check failing for a reason of its own (time, memory, a crash)."""
    return SpecError([FieldError("(TRL's check)", "TRL's parser and GRPOConfig", message)])


def parse_here(config: dict[str, Any], check_overrides: dict[str, Any] | None = None) -> TrlParse:
    """TRL's parse and check of `config` in this process: for a user's own recipe on their own machine (the CLI, a
    local dashboard). A visitor's recipe goes through `checks/trl_check.parse_isolated`, the same code in the limited
    subprocess."""
    request = {"config": config, "check_overrides": check_overrides or {}}
    return parsed(json.dumps(answer(json.loads(json.dumps(request, default=str))), default=_plain))


def parsed(text: str) -> TrlParse:
    """A TrlParse from the answer's JSON text."""
    found = json.loads(text)
    return TrlParse(found["values"], found["unknown"], found["check"], found["defaults"])


def fields_of(parsed: TrlParse) -> dict[str, Field]:
    """GRPOConfig's fields as the mapping reads them (name -> default), from the subprocess's answer."""
    return {name: Field(default) for name, default in parsed.defaults.items()}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """TRL's parse and check of a request ({"config", "check_overrides"}): values, unknown keys, check, defaults."""
    from trl import GRPOConfig

    from grpo_dashboard.spec import trl_schema
    from grpo_dashboard.spec.trl_parse import parse_with_trl

    values, unknown, check = parse_with_trl(request["config"], request.get("check_overrides") or {})
    # trl is imported here anyway: the defaults come from the real class, whatever the shipped schema's version.
    defaults = {entry["name"]: entry["default"] for entry in trl_schema.config_schema(GRPOConfig)}
    return {"values": values, "unknown": unknown, "check": check, "defaults": defaults}


def main() -> int:
    """The subprocess: read the request, parse and check with TRL, print the answer's line."""
    import warnings

    warnings.simplefilter("ignore")
    print(MARK + json.dumps(answer(json.loads(sys.stdin.read())), default=_plain), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
