"""Reading a flat TRL config and parsing it with TRL's own parser (`trl grpo`'s `make_parser`), as `import-trl` does.

A fresh parser per file: `TrlParser.set_defaults_with_config` keeps the defaults it was given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import safe_yaml, trl_keys

HEADER = "# grpo-dashboard: "  # the line trl_export writes for what TRL has no key for


# --- parsing with TRL's parser --------------------------------------------------------------------------------
def read_config(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe's mapping and its header (what an export wrote for what TRL has no key for; {} otherwise)."""
    text = safe_yaml.read_text(path)
    data = safe_yaml.load(text)
    if not isinstance(data, dict):
        raise SpecError([FieldError("(file)", str(path), "must be a YAML mapping of TRL config keys.")])
    header: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith(HEADER):
            try:
                header = json.loads(line[len(HEADER):])
            except ValueError as exc:
                raise SpecError([FieldError("(file)", str(path), f"has a broken `{HEADER.strip()}` line ({exc}); "
                                            "export the spec again or remove the line.")]) from exc
    return data, header


def trl_parser() -> Any:
    """A fresh TrlParser over the dataclasses of TRL's `grpo` script (trl/scripts/grpo.py `make_parser`)."""
    from trl.scripts.grpo import make_parser

    return make_parser()


def parse_with_trl(config: dict[str, Any]) -> tuple[dict[str, Any], list[str], str | None]:
    """Values TRL's parser gives the config's keys, the keys it does not know, and TRL's own cross-field check.

    The check builds the dataclasses as `trl grpo` does; on a machine without a GPU, bf16/tf32 are cleared for the
    check only (they need one) and the message of any other refusal is returned (None: accepted).
    """
    config = {k: v for k, v in config.items() if k != "env"}
    parser = trl_parser()
    remaining = parser.set_defaults_with_config(**config)
    unknown = [remaining[i][2:] for i in range(0, len(remaining), 2)]
    namespace, _ = parser.parse_known_args([])
    values = {k: getattr(namespace, k) for k in config if k not in unknown and hasattr(namespace, k)}
    return values, unknown, trl_check(config, unknown)


def trl_check(config: dict[str, Any], unknown: list[str]) -> str | None:
    """TRL's own construction of the config's dataclasses (`__post_init__` checks); None when it accepts it."""
    known = {k: v for k, v in config.items() if k not in unknown and k not in trl_keys.LAUNCH_KEYS}
    if not _has_gpu():
        known.update(use_cpu=True, bf16=False, tf32=None, fp16=False)
    parser = trl_parser()
    parser.set_defaults_with_config(**known)
    try:
        parser.parse_args_into_dataclasses(args=[], return_remaining_strings=True)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False
