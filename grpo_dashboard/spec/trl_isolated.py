"""TRL's parser and TRL's own config checks on a recipe, run outside the dashboard process.

`TrlParser` and the dataclasses' `__post_init__` are TRL's and transformers' code, run on text a visitor sent: they
open files the recipe names, import modules, allocate. They run here in a subprocess of the sandbox
(checks/sandbox.py: bubblewrap where it works, else `unshare` namespaces and an audit hook) with a time limit, an
address-space limit, no network and an environment without secrets or proxies; the dashboard process never imports
trl for an import. The subprocess answers with JSON: the values TRL's parser gives the keys, the keys it does not
know, TRL's check (None: accepted) and GRPOConfig's field defaults (the mapping needs them).

Run as `python -m grpo_dashboard.spec.trl_isolated` it is that subprocess: the request on stdin, the answer on the
last line of stdout.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from grpo_dashboard.errors import FieldError, SpecError, shorten

TIMEOUT_ENV = "GRPO_DASHBOARD_TRL_CHECK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0  # importing trl and transformers alone takes 5-10 s on a small CPU
MEMORY_MB = 4096
MARK = "@@trl-parse@@ "
_CACHE_SIZE = 64
_cache: OrderedDict[str, str] = OrderedDict()
_lock = threading.Lock()


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


def _refusal(message: str) -> SpecError:
    return SpecError([FieldError("(TRL's check)", "TRL's parser and GRPOConfig", message)])


def parse_isolated(config: dict[str, Any], check_overrides: dict[str, Any] | None = None,
                   isolated: bool = True) -> TrlParse:
    """TRL's parse and check of `config` in the limited subprocess (SpecError when it fails or takes too long).

    `isolated=False` runs the same code in this process instead: for a user's own recipe on their own machine (the
    CLI, a local dashboard), where the subprocess would only add the seconds of importing TRL again. Answers are
    cached by the request (the same recipe gives the same answer with the same TRL).
    """
    from grpo_dashboard.checks import sandbox

    request = json.dumps({"config": config, "check_overrides": check_overrides or {}}, sort_keys=True,
                         default=str)
    if not isolated:
        return _parsed(json.dumps(answer(json.loads(request)), default=_plain))
    with _lock:
        hit = _cache.get(request)
        if hit is not None:
            _cache.move_to_end(request)
    if hit is None:
        limit = timeout_s()
        # torch loads its libraries with ctypes, which the sandbox counts with process spawning: allowed here, the
        # boundary (namespaces, no network, limits) stays.
        result = sandbox.run_module("grpo_dashboard.spec.trl_isolated", stdin=request, timeout_s=limit,
                                    memory_mb=MEMORY_MB, allow_subprocess=True)
        if result.timed_out:
            raise _refusal(f"took longer than {limit:g} s and was stopped (it runs in a limited subprocess). Try "
                           f"again, or import the recipe with `python -m grpo_dashboard import-trl`; the dashboard's "
                           f"owner can raise the limit with {TIMEOUT_ENV}.")
        line = next((x for x in reversed(result.stdout.splitlines()) if x.startswith(MARK)), None)
        if not result.ok or line is None:
            if result.memory_exceeded:
                raise _refusal(f"needed more than {MEMORY_MB} MB and was stopped. Check the recipe's values.")
            last = next((x for x in reversed(result.stderr.strip().splitlines()) if x.strip()), "no output")
            raise _refusal(f"failed: {shorten(last.strip(), 300)}. Fix the recipe's values.")
        hit = line[len(MARK):]
        with _lock:
            _cache[request] = hit
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return _parsed(hit)


def _parsed(text: str) -> TrlParse:
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
    from grpo_dashboard.spec import trl_fields
    from grpo_dashboard.spec.trl_parse import parse_with_trl

    values, unknown, check = parse_with_trl(request["config"], request.get("check_overrides") or {})
    defaults = {name: f.default for name, f in trl_fields.grpo_fields().items()}
    return {"values": values, "unknown": unknown, "check": check, "defaults": defaults}


def main() -> int:
    """The subprocess: read the request, parse and check with TRL, print the answer's line."""
    import warnings

    warnings.simplefilter("ignore")
    print(MARK + json.dumps(answer(json.loads(sys.stdin.read())), default=_plain), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
