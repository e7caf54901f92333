"""W&B runs as records: an offline run directory (`wandb/offline-run-*`, its `run-*.wandb` file, read with the
`wandb` package's protobuf classes) or a run's exported history (CSV or JSONL with `_step`).

transformers' WandbCallback logs TRL's keys as `train/<key>` / `eval/<key>` with `train/global_step`, declared as
the step metric of every key; W&B's own `_step` counts `wandb.log` calls (TRL's profiling timings are calls too),
so the trainer's step is taken from `train/global_step` where a row has it and `_step` only where none does.
"""

from __future__ import annotations

import csv
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpo_dashboard.store.import_common import (
    GLOBAL_STEP,
    Row,
    Source,
    logged_step,
    merge_steps,
    split_of,
    trl_metrics,
)
from grpo_dashboard.store.import_guard import Budget, ImportRunError

_HEADER = struct.Struct("<4sHB")  # the .wandb file: b":W&B", magic 0xBEE1, version 0
_RECORD = struct.Struct("<IHB")  # each record: checksum, length, type (LevelDB log format)
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def is_offline_run(p: Path) -> bool:
    """True for a W&B run directory (offline or synced) or a folder holding them (`wandb/`)."""
    return p.is_dir() and (any(p.glob("run-*.wandb")) or any(p.glob("*run-*/run-*.wandb")))


def wandb_file(p: Path, label: str) -> Path:
    """The run's `.wandb` file: in the run directory itself, else the latest run directory inside `p`."""
    own = sorted(p.glob("run-*.wandb"))
    if own:
        return own[-1]
    runs = sorted(p.glob("*run-*/run-*.wandb"), key=lambda f: f.parent.name.split("-", 2)[-1])
    if not runs:
        raise ImportRunError(f"{label} holds no W&B run (`run-*.wandb`). Give an offline-run-* directory.")
    return runs[-1]


def read_offline(p: Path, budget: Budget) -> Source:
    """The history and config of the W&B run at `p` (a run directory, or a `wandb/` folder: its latest run)."""
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise ImportRunError(
            f"{budget.label} is a W&B run directory; reading it needs the `wandb` package: `pip install wandb`, "
            "then import again."
        ) from None
    file = wandb_file(p, budget.label)
    rows: list[Row] = []
    config: dict[str, Any] = {}
    name = file.parent.name
    last_step, seen_global = 0, False
    for data in _records(file, budget.label):
        rec = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        try:
            rec.ParseFromString(data)
        except Exception:  # a truncated last record of a run still being written
            continue
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            raw = {_item_key(i): _value(i.value_json) for i in rec.history.item}
            stamp = raw.get("_timestamp")
            metrics = trl_metrics(raw)
            # no trainer step in the row: the last one seen, or W&B's call counter in a run that never logs one
            step = logged_step(raw, last_step if seen_global else raw.get("_step", rec.history.step.num))
            seen_global = seen_global or GLOBAL_STEP in raw
            last_step = step
            if metrics:
                budget.add(metrics)
                rows.append((split_of(metrics), int(step), float(stamp) if stamp else None, metrics))
        elif kind == "config":
            for item in rec.config.update:
                value = _value(item.value_json)
                if isinstance(value, dict) and "value" in value:
                    value = value["value"]
                if isinstance(value, (int, float, str, bool)) and not _item_key(item).startswith("_"):
                    config[_item_key(item)] = value
        elif kind == "run":
            name = rec.run.display_name or rec.run.run_id or name
    return Source("wandb", p, merge_steps(rows), config, name)


def _records(file: Path, label: str) -> Iterator[bytes]:
    data = file.read_bytes()
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != b":W&B":
        raise ImportRunError(f"{label}: {file.name} is not a W&B run file (no `:W&B` header). Nothing was written.")
    pos, parts = _HEADER.size, bytearray()
    while pos + _RECORD.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _RECORD.size:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        chunk = data[pos : pos + length]
        pos += length
        if len(chunk) < length or kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            break  # the half-written end of a run still being written (or zero padding)
        if kind == _FULL:
            yield bytes(chunk)
        elif kind == _FIRST:
            parts = bytearray(chunk)
        else:
            parts += chunk
            if kind == _LAST:
                yield bytes(parts)


def _item_key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _rows(items: Iterator[dict[str, Any]], budget: Budget) -> list[Row]:
    rows = []
    for row in items:
        step = logged_step(row, row.get("_step"))
        if step is None:
            continue
        metrics = {k: v for k, v in trl_metrics(row).items() if v is not None}
        budget.add(metrics)
        if metrics:
            stamp = row.get("_timestamp")
            when = float(stamp) if stamp not in (None, "") else None
            rows.append((split_of(metrics), _int(step, budget.label), when, metrics))
    return merge_steps(rows)


def _int(value: Any, label: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ImportRunError(f"{label} has a step {value!r} that is not a number. Nothing was written.") from None


def read_csv(p: Path, budget: Budget) -> Source:
    """A W&B history export as CSV (`run.history().to_csv(...)`)."""

    def items() -> Iterator[dict[str, Any]]:
        with p.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            budget.columns(len(reader.fieldnames or []))
            for row in reader:
                yield {k: number(v) for k, v in row.items() if k is not None}

    try:
        rows = _rows(items(), budget)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ImportRunError(f"{budget.label} is not a readable CSV ({exc}). Export the W&B history again.") from None
    if not rows:
        raise ImportRunError(
            f"{budget.label}: no rows with a `_step` column and numeric metrics; export the W&B "
            "run's history with `run.history().to_csv(...)` (it has `_step`)."
        )
    return Source("wandb", p, rows, {}, p.stem)


def number(text: Any) -> Any:
    """A CSV cell as an int or float where it is one (else as it is; None for an empty cell)."""
    if text in (None, ""):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() and "." not in str(text) and "e" not in str(text).lower() else value


def read_jsonl(p: Path, budget: Budget) -> Source:
    """A W&B history export as JSONL (one history row per line, with `_step`)."""

    def items() -> Iterator[dict[str, Any]]:
        with p.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    if isinstance(row, dict):
                        yield row

    try:
        rows = _rows(items(), budget)
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ImportRunError):
            raise
        raise ImportRunError(f"{budget.label} is not a readable JSONL file ({exc}). Nothing was written.") from None
    return Source("wandb", p, rows, {}, p.stem)
