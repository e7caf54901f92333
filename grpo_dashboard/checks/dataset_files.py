"""Cheap reads of local dataset files (JSON, JSONL, CSV, Parquet): columns, row count and the first rows.

Used by validation before launch; never loads a whole large file into memory except small JSON arrays.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.spec.paths import user_path

SUPPORTED: dict[str, str] = job_module().DATA_FILE_TYPES  # suffix -> datasets builder, as the job loads them


class DatasetFileError(ValueError):
    """A local dataset file that cannot be read, with the reason and the fix."""


@dataclass
class DatasetSample:
    """What validation needs to know about a dataset."""

    columns: list[str]
    rows: list[dict[str, Any]]
    num_rows: int | None


def read_sample(files: str | list[str], limit: int = 20) -> DatasetSample:
    """Read columns and up to `limit` rows from local files (all of the same type)."""
    paths = [Path(files)] if isinstance(files, str) else [Path(f) for f in files]
    if not paths:
        raise DatasetFileError("no files given; list at least one .json/.jsonl/.csv/.parquet file.")
    columns: list[str] = []
    rows: list[dict[str, Any]] = []
    total: int | None = 0
    for path in paths:
        sample = _read_one(user_path(path), limit)
        for c in sample.columns:
            if c not in columns:
                columns.append(c)
        rows.extend(sample.rows[: max(0, limit - len(rows))])
        total = None if (total is None or sample.num_rows is None) else total + sample.num_rows
    return DatasetSample(columns, rows, total)


def _read_one(path: Path, limit: int) -> DatasetSample:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED:
        raise DatasetFileError(
            f"{str(path)!r} has extension {suffix or '(none)'!r}; supported: {', '.join(SUPPORTED)}. Convert the file."
        )
    if not path.is_file():
        raise DatasetFileError(
            f"{str(path)!r} does not exist. Check the path (relative paths are from the directory you launch from)."
        )
    try:
        if suffix == ".parquet":
            return _read_parquet(path, limit)
        if suffix == ".csv":
            return _read_csv(path, limit)
        return _read_json(path, limit)
    except DatasetFileError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        raise DatasetFileError(
            f"{str(path)!r} cannot be read as {suffix[1:]}: {exc}. Fix or re-export the file."
        ) from exc


def _read_parquet(path: Path, limit: int) -> DatasetSample:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    columns = list(pf.schema_arrow.names)
    rows: list[dict[str, Any]] = []
    for batch in pf.iter_batches(batch_size=limit):
        rows = batch.to_pylist()[:limit]
        break
    return DatasetSample(columns, rows, pf.metadata.num_rows)


def _read_csv(path: Path, limit: int) -> DatasetSample:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        if not columns:
            raise DatasetFileError(f"{str(path)!r} has no header row; the first line must name the columns.")
        rows = []
        count = 0
        for row in reader:
            if None in row:
                raise DatasetFileError(
                    f"{str(path)!r} line {reader.line_num} has more fields than the header's "
                    f"{len(columns)} columns. Quote fields that contain commas, or fix the row."
                )
            if count < limit:
                rows.append(dict(row))
            count += 1
    return DatasetSample(columns, rows, count)


def _read_json(path: Path, limit: int) -> DatasetSample:
    with open(path, encoding="utf-8") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        f.seek(0)
        if head == "[":
            data = json.load(f)
            records = [r for r in data if isinstance(r, dict)]
            if len(records) != len(data):
                raise DatasetFileError(f"{str(path)!r}: a JSON array must hold one object per row.")
            return DatasetSample(_columns(records[:limit]), records[:limit], len(records))
        rows: list[dict[str, Any]] = []
        count = 0
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if count < limit:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetFileError(
                        f"{str(path)!r} line {lineno} is not valid JSON ({exc.msg}). "
                        f"Each line must be one JSON object."
                    ) from exc
                if not isinstance(obj, dict):
                    raise DatasetFileError(f"{str(path)!r} line {lineno} is a {type(obj).__name__}, not an object.")
                rows.append(obj)
            count += 1
    if count == 0:
        raise DatasetFileError(f"{str(path)!r} holds no rows. Add at least one JSON object per line.")
    return DatasetSample(_columns(rows), rows, count)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    return cols


def is_conversational(value: Any) -> bool:
    """True when a prompt value is a list of chat messages ({role, content})."""
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)
