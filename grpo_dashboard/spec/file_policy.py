"""The one rule for files that input names: a TRL recipe's keys and the uploads of the import endpoints.

On a Space none of them may name the server's disk: a recipe key that TRL would open (`accelerator_config`,
`fsdp_config`, `deepspeed` given as a path), a model or dataset that is a path rather than a Hub id, or an upload
that is not a plain file inside gradio's upload folder is refused with a FieldError naming the key, *before*
anything is opened, and with the same words whether the file exists or not (so the answer tells nothing about the
disk). Locally the machine's user may name their own files, which are read here with a size budget (regular files
only: never a device, a FIFO or `/proc`), never by TRL itself.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, TypeGuard

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec.paths import user_path

# TrainingArguments opens these in __post_init__ when they are strings that do not start with "{" (inline JSON).
FILE_KEYS = ("accelerator_config", "fsdp_config", "deepspeed")
MAX_CONFIG_BYTES = 1024 * 1024  # an accelerate / FSDP / DeepSpeed JSON is a few KiB
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_BUILDERS = ("json", "csv", "parquet", "text", "arrow")  # `datasets` builder names: their data_files are files
_ON_SPACE = "on this Space a recipe cannot name files on the server's disk"


def names_file(value: Any) -> TypeGuard[str]:
    """Whether a FILE_KEYS value is a file path (TRL opens it) rather than a mapping or inline JSON."""
    return isinstance(value, str) and bool(value.strip()) and not value.lstrip().startswith("{")


def _hub_id(value: Any) -> bool:
    return isinstance(value, str) and bool(HUB_ID.match(value)) and ".." not in value


def recipe_file_errors(config: dict[str, Any], on_space: bool) -> list[FieldError]:
    """What a recipe names on the server's disk, as refusals (none locally). Decided from the text alone."""
    if not on_space:
        return []
    errors = [
        FieldError(
            key,
            config[key],
            f"is a file path; {_ON_SPACE}. Give the JSON inline instead "
            f"({key}: '{{\"...\": ...}}' or a YAML mapping) or remove the key.",
        )
        for key in FILE_KEYS
        if names_file(config.get(key))
    ]
    hub = "must be a Hub id 'owner/name' (letters, digits, '-', '_', '.')"
    for key, what in (
        ("model_name_or_path", "model"),
        ("reward_model_name_or_path", "reward model"),
        ("dataset_name", "dataset"),
    ):
        value = config.get(key)
        if value is not None and not _hub_id(value):
            errors.append(FieldError(key, value, f"{hub}: {_ON_SPACE}. Upload the {what} to the Hub and name it."))
    for i, entry in enumerate(config.get("datasets") or [] if isinstance(config.get("datasets"), list) else []):
        if not isinstance(entry, dict):
            continue
        path = entry.get("path")
        if path is not None and not _hub_id(path) and path not in _BUILDERS:
            errors.append(FieldError(f"datasets[{i}].path", path, f"{hub}: {_ON_SPACE}."))
        for key in ("data_files", "data_dir"):
            if entry.get(key):
                errors.append(
                    FieldError(
                        f"datasets[{i}].{key}",
                        entry[key],
                        f"names local files; {_ON_SPACE}. Use a Hub dataset (path: owner/name) instead.",
                    )
                )
    mixture = config.get("dataset_mixture")
    for i, entry in enumerate(mixture.get("datasets") or [] if isinstance(mixture, dict) else []):
        if isinstance(entry, dict) and entry.get("id") is not None and not _hub_id(entry["id"]):
            errors.append(FieldError(f"dataset_mixture.datasets[{i}].id", entry["id"], f"{hub}: {_ON_SPACE}."))
    if config.get("chat_template_path"):
        errors.append(
            FieldError(
                "chat_template_path",
                config["chat_template_path"],
                f"names a file; {_ON_SPACE}. Put the template in the model's tokenizer on the Hub, or remove the key.",
            )
        )
    return errors


def read_bounded(path: str | Path, max_bytes: int, field: str, label: str | None = None) -> bytes:
    """A regular file's bytes, at most `max_bytes` (a FieldError on `field` otherwise; never opens a device or a
    FIFO, which could block or never end). `label` is how messages name the file (default: the path)."""
    p = Path(path)
    shown = label or str(path)
    try:
        info = p.stat()
    except OSError as exc:
        raise _error(field, shown, f"cannot be read ({exc.strerror or exc}). Give a readable file.") from None
    if not stat.S_ISREG(info.st_mode):
        raise _error(field, shown, "is not a regular file (a device, FIFO or folder). Give a file.")
    if info.st_size > max_bytes:
        raise _error(
            field,
            shown,
            f"is {info.st_size:,} bytes, over the limit of {max_bytes:,} bytes for this file. Give a smaller file.",
        )
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _error(field, shown, f"cannot be read ({exc.strerror or exc}). Give a readable file.") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped for something else since the stat
            raise _error(field, shown, "is not a regular file (a device, FIFO or folder). Give a file.")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _error(field, shown, f"is over the limit of {max_bytes:,} bytes for this file. Give a smaller file.")
    return data


class FileRefused(ValueError):
    """A file that input names was refused; `error` is the FieldError that says why."""

    def __init__(self, error: FieldError) -> None:
        super().__init__(str(error))
        self.error = error


def _error(field: str, value: str, message: str) -> FileRefused:
    return FileRefused(FieldError(field, value, message))


def inline_file_keys(config: dict[str, Any], base_dir: Path | None) -> tuple[dict[str, Any], list[FieldError]]:
    """Locally: the FILE_KEYS that name files, read here (size budget, JSON) so TRL's check gets their content
    instead of opening them; relative paths are taken from `base_dir` (the recipe's folder; else the working dir)."""
    inline: dict[str, Any] = {}
    errors: list[FieldError] = []
    for key in FILE_KEYS:
        value = config.get(key)
        if not names_file(value):
            continue
        path = user_path(value)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            inline[key] = json.loads(read_bounded(path, MAX_CONFIG_BYTES, key, str(value)))
        except FileRefused as exc:
            errors.append(exc.error)
        except ValueError as exc:
            errors.append(FieldError(key, value, f"is not a JSON file ({exc}). Fix the file or give the JSON inline."))
    return inline, errors


def files_for_check(config: dict[str, Any], on_space: bool, base_dir: Path | None) -> dict[str, Any]:
    """The content of the files a recipe names, for TRL's check to get instead of opening them (none on a Space,
    where naming one is refused); SpecError listing every refusal and unreadable file."""
    refused = recipe_file_errors(config, on_space)
    inline, unreadable = ({}, []) if on_space else inline_file_keys(config, base_dir)
    if refused or unreadable:
        raise SpecError(refused + unreadable)
    return inline


def upload_path(value: str | Path, root: str | Path | None, field: str) -> Path:
    """An uploaded file's path, checked: with `root` (on a Space: gradio's upload folder) it must resolve to a
    regular file inside it. FileRefused naming `field` otherwise, in the same words for missing and outside paths."""
    p = Path(value)
    if root is None:
        return p
    base = Path(root).resolve()
    try:
        real = p.resolve(strict=True)
        inside = real.is_relative_to(base) and real != base and stat.S_ISREG(real.stat().st_mode)
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        raise _error(field, p.name, "is not a file uploaded to this dashboard. Upload the file again.")
    return real
