"""What an import may cost, and how it opens what it reads: budgets, read-only SQLite by a path the dashboard chose,
and uploads copied into a private folder under a fixed name first.

An imported file is the visitor's data: its size, its number of records, columns and distinct metric names are
bounded (each store row costs disk forever), and SQL in a database runs under a deadline (a view over a recursive
CTE or an expensive generated column could otherwise hold a core without end). A database is opened by a URI the
dashboard builds from a path it chose (quoted, `mode=ro`), never from an upload's name, which could hold `%2F`,
`?` or `#`. Each refusal is an ImportRunError that names the limit and what to do.
"""

from __future__ import annotations

import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.spec import file_policy
from grpo_dashboard.store import temp_area

SUFFIXES = (".db", ".csv", ".jsonl", ".json", ".log", ".txt", ".out")  # what an uploaded run can be


class ImportRunError(ValueError):
    """The source cannot be imported; the message names the file and what to do."""


@dataclass(frozen=True)
class ImportLimits:
    """The budget of one import."""

    max_bytes: int = 32 * 1024 * 1024  # the file read (a run's metrics are a few MB)
    max_columns: int = 1000  # metrics in one record / columns of a CSV
    max_metrics: int = 1000  # distinct metric names in the run
    max_records: int = 500_000  # logged rows
    max_values: int = 2_000_000  # metric values in all
    time_s: float = 10.0  # SQL of a database, all queries together
    max_text_bytes: int = 1024 * 1024  # one value a database returns (SQLITE_LIMIT_LENGTH): a step's metrics


LIMITS = ImportLimits()


def check_size(path: Path, label: str, limits: ImportLimits) -> None:
    """ImportRunError when the file (or the files of a folder, summed) is over `limits.max_bytes`."""
    try:
        size = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return  # the reader reports a file it cannot read
    if size > limits.max_bytes:
        raise ImportRunError(
            f"{label} is {size:,} bytes, over the import limit of {limits.max_bytes:,} bytes. "
            "Import a smaller file: export fewer metrics or steps. Nothing was written."
        )


@dataclass
class Budget:
    """Counts what a source yields, refusing as soon as a limit is passed (before the records pile up)."""

    label: str
    limits: ImportLimits = LIMITS
    records: int = 0
    values: int = 0
    names: set[str] = field(default_factory=set)

    def add(self, metrics: dict[str, Any]) -> None:
        """Count one record's metrics."""
        lim, n = self.limits, len(metrics)
        if n > lim.max_columns:
            raise self._refuse(f"has a record with {n:,} metrics; at most {lim.max_columns:,} per record")
        self.records += 1
        self.values += n
        self.names.update(metrics)
        if self.records > lim.max_records:
            raise self._refuse(f"has more than {lim.max_records:,} records; at most {lim.max_records:,}")
        if self.values > lim.max_values:
            raise self._refuse(f"has more than {lim.max_values:,} metric values; at most {lim.max_values:,}")
        if len(self.names) > lim.max_metrics:
            raise self._refuse(f"has more than {lim.max_metrics:,} distinct metrics; at most {lim.max_metrics:,}")

    def columns(self, n: int) -> None:
        """Refuse a table (CSV header) wider than the per-record limit before reading its rows."""
        if n > self.limits.max_columns:
            raise self._refuse(f"has {n:,} columns; at most {self.limits.max_columns:,} are imported")

    def _refuse(self, what: str) -> ImportRunError:
        return ImportRunError(
            f"{self.label} {what}. Export only the metrics and steps you need (e.g. W&B's "
            "`run.history(keys=[...])`) and import that. Nothing was written."
        )


def open_sqlite(path: Path, label: str, limits: ImportLimits = LIMITS, immutable: bool = False) -> sqlite3.Connection:
    """A read-only connection to the database at `path` (a path the dashboard chose: quoted into the URI), whose
    queries are stopped past `limits.time_s` (all together) and whose values are at most `limits.max_text_bytes`."""
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True)
    deadline = time.monotonic() + limits.time_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_text_bytes)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 100_000)
    conn.execute("PRAGMA trusted_schema = OFF")  # no functions with side effects from the file's own schema
    return conn


def sqlite_problem(exc: sqlite3.Error, label: str, limits: ImportLimits = LIMITS) -> ImportRunError:
    """The refusal for an SQLite error: past the time budget, a value over the size budget, or unreadable."""
    text = str(exc)
    if "interrupted" in text:
        return ImportRunError(
            f"{label}: reading the database took longer than the import limit of "
            f"{limits.time_s:g} seconds and was stopped. Export the run's metrics to CSV and "
            "import that. Nothing was written."
        )
    if "too big" in text:
        return ImportRunError(
            f"{label} holds a value over the import limit of {limits.max_text_bytes:,} bytes. "
            "Export the run's metrics to CSV and import that. Nothing was written."
        )
    return ImportRunError(
        f"{label} is not a readable SQLite database ({text}). Give a trackio project .db. Nothing was written."
    )


def upload_name(name: str) -> tuple[str, str]:
    """(the fixed file name an upload is copied to, its run name) from the name the visitor gave it."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise ImportRunError(
            f"{name!r} is not a file this import reads (its name ends in {suffix or 'nothing'}); "
            "upload a trainer_state.json, a TRL .jsonl log, a run's console output (.log/.out/.txt), a trackio .db "
            f"or a W&B history .csv ({', '.join(SUFFIXES)})."
        )
    fixed = "trainer_state.json" if name == "trainer_state.json" else f"upload{suffix}"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(name).stem).strip("-.") or "imported"
    return fixed, stem[:60]


@contextmanager
def private_copy(
    upload: str | Path, root: str | Path | None, limits: ImportLimits = LIMITS
) -> Iterator[tuple[Path, str, str]]:
    """(a private copy of the upload under a fixed name, the upload's own file name, a run name), deleted when the
    block ends. With `root` (on a Space: gradio's upload folder) the upload must be a file inside it."""
    given = Path(upload)
    label = given.name
    try:
        source = file_policy.upload_path(given, root, "upload")
    except file_policy.FileRefused as exc:
        raise ImportRunError(str(exc)) from None
    fixed, stem = upload_name(label)
    check_size(source, label, limits)
    with temp_area.scratch("import") as folder:
        target = folder / fixed
        try:
            with source.open("rb") as src, target.open("wb") as dst:
                dst.write(src.read(limits.max_bytes + 1))
        except OSError as exc:
            raise ImportRunError(f"{label} cannot be read ({exc.strerror or exc}); upload it again.") from None
        check_size(target, label, limits)  # the upload could have grown since its size was checked
        yield target, label, stem
