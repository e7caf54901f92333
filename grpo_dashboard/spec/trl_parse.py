"""Reading a flat TRL config and parsing it with TRL's own parser (`trl grpo`'s `make_parser`), as `import-trl` does.

Reading is the dashboard's (size-bounded, the safe YAML loader); parsing is TRL's own code, which the dashboard runs
for a visitor's recipe only in trl_isolated's limited subprocess (checks/trl_check). A fresh parser per file:
`TrlParser.set_defaults_with_config` keeps the defaults it was given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import file_policy, safe_yaml, trl_keys

HEADER = "# grpo-dashboard: "  # the line trl_export writes for what TRL has no key for


@dataclass
class Recipe:
    """A recipe to import: its mapping and header, how messages name it (`label`, never a server path for an upload),
    its name's stem, where its files are looked up (`base_dir`: relative FILE_KEYS; `reward_dirs`: reward modules
    beside it) and whether it came to a Space, where nothing it names is looked up on the disk."""

    config: dict[str, Any]
    header: dict[str, Any]
    label: str
    stem: str
    base_dir: Path | None = None
    reward_dirs: list[Path] = field(default_factory=list)
    on_space: bool = False


def parse_config(text: str, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recipe text's mapping and its header (what an export wrote for what TRL has no key for; {} otherwise)."""
    data = safe_yaml.load(text, what="a TRL config", field="(file)", anchors=True)
    if not isinstance(data, dict):
        raise SpecError([FieldError("(file)", label, "must be a YAML mapping of TRL config keys.")])
    header: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith(HEADER):
            try:
                header = json.loads(line[len(HEADER) :])
            except ValueError as exc:
                raise SpecError(
                    [
                        FieldError(
                            "(file)",
                            label,
                            f"has a broken `{HEADER.strip()}` line ({exc}); export the spec again or remove the line.",
                        )
                    ]
                ) from exc
    return data, header


def read_text(path: str | Path, label: str | None = None) -> str:
    """A recipe file's text, read with the YAML size budget (SpecError on `(file)` naming `label` otherwise)."""
    try:
        data = file_policy.read_bounded(path, safe_yaml.MAX_BYTES, "(file)", label)
        return data.decode("utf-8")
    except file_policy.FileRefused as exc:
        raise SpecError([exc.error]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            [FieldError("(file)", label or str(path), f"is not UTF-8 text ({exc.reason}). Give the YAML file.")]
        ) from None


def read_config(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe file's mapping and header (see parse_config)."""
    return parse_config(read_text(path), str(path))


def recipe_from_file(path: str | Path, label: str | None = None, on_space: bool = False) -> Recipe:
    """A recipe file as a Recipe: its folder and the working directory hold its reward modules, except on a Space."""
    p = Path(path)
    config, header = parse_config(read_text(p, label), label or str(p))
    dirs = [] if on_space else [p.parent, Path.cwd()]
    return Recipe(config, header, label or str(p), p.stem, None if on_space else p.parent, dirs, on_space)


def recipe_from_text(text: str, label: str = "the pasted config", on_space: bool = False) -> Recipe:
    """Pasted recipe text as a Recipe (nothing beside it; locally, reward modules from the working directory)."""
    config, header = parse_config(text, label)
    return Recipe(config, header, label, "imported", None, [] if on_space else [Path.cwd()], on_space)


def trl_parser() -> Any:
    """A fresh TrlParser over the dataclasses of TRL's `grpo` script (trl/scripts/grpo.py `make_parser`)."""
    from trl.scripts.grpo import make_parser

    return make_parser()


def parse_with_trl(
    config: dict[str, Any], check_overrides: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str], str | None]:
    """Values TRL's parser gives the config's keys, the keys it does not know, and TRL's own cross-field check.

    The check builds the dataclasses as `trl grpo` does; on a machine without a GPU, bf16/tf32 are cleared for the
    check only (they need one) and the message of any other refusal is returned (None: accepted). It runs TRL's own
    code on the recipe: for a visitor's recipe the dashboard calls it only in a limited subprocess (trl_isolated),
    and in every case `check_overrides` gives the check the content of the files the recipe names (read with a size
    budget before).
    """
    config = {k: v for k, v in config.items() if k != "env"}
    parser = trl_parser()
    remaining = parser.set_defaults_with_config(**config)
    unknown = [remaining[i][2:] for i in range(0, len(remaining), 2)]
    namespace, _ = parser.parse_known_args([])
    values = {k: getattr(namespace, k) for k in config if k not in unknown and hasattr(namespace, k)}
    return values, unknown, trl_check({**config, **(check_overrides or {})}, unknown)


def trl_check(config: dict[str, Any], unknown: list[str], world_size: int | None = None) -> str | None:
    """TRL's own construction of the config's dataclasses (`__post_init__` checks); None when it accepts it.

    `world_size`: the process count the run has (its batch checks depend on it); None: this process's own (one,
    outside a distributed launch)."""
    known = {k: v for k, v in config.items() if k not in unknown and k not in trl_keys.LAUNCH_KEYS}
    if not _has_gpu():
        known.update(use_cpu=True, bf16=False, tf32=None, fp16=False)
    parser = trl_parser()
    parser.set_defaults_with_config(**known)
    import transformers

    own = transformers.TrainingArguments.world_size
    if world_size is not None:
        # GRPOConfig.__post_init__ reads the count from TrainingArguments.world_size, which asks the running
        # accelerate state; a check ahead of the launch has none, so the property is set for the check alone.
        transformers.TrainingArguments.world_size = property(lambda _self: world_size)  # type: ignore[method-assign,assignment]
    try:
        parser.parse_args_into_dataclasses(args=[], return_remaining_strings=True)
    except (ValueError, TypeError) as exc:
        return str(exc)
    finally:
        transformers.TrainingArguments.world_size = own  # type: ignore[method-assign]
    return None


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False
