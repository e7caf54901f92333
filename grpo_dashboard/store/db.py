"""The embedded store: SQLite in WAL mode holding runs, every metric value of every log record, and job events.

All SQL lives here, but for the schema and its versions (`migrations.py`: applied when a store is opened).
The data directory comes from `GRPO_DASHBOARD_DATA_DIR` (read at call time), default
`~/.grpo_dashboard`. Metrics are columnar (see `series.py`): values keep their nature (finite, ±Inf, NaN, None).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from grpo_dashboard.errors import RunNotFound, StoreError
from grpo_dashboard.redaction import redact
from grpo_dashboard.store import migrations, series
from grpo_dashboard.store.series import SeriesArrays

DATA_DIR_ENV = migrations.DATA_DIR_ENV


class RunStatus(str, Enum):
    """Lifecycle of a run; a failed run is a state, not an exception."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


TERMINAL = (RunStatus.COMPLETED.value, RunStatus.FAILED.value, RunStatus.CANCELED.value)
ACTIVE = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


@dataclass
class Run:
    """One row of the runs table."""

    id: str
    name: str
    spec_yaml: str
    backend: str
    status: str
    created_at: float
    run_dir: str
    external_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    output_dir: str | None = None
    error: str | None = None
    exit_code: int | None = None
    pid: int | None = None
    pid_start: str | None = None
    cancel_requested_at: float | None = None
    ingest_offset: int = 0
    last_step: int | None = None
    max_steps: int | None = None
    last_time: float | None = None
    n_records: int = 0
    n_skipped: int = 0
    owner: str | None = None

    @property
    def is_active(self) -> bool:
        """Queued or running."""
        return self.status in ACTIVE

    @property
    def progress(self) -> float | None:
        """Fraction of max_steps done, when known."""
        if not self.max_steps or self.max_steps <= 0 or self.last_step is None:
            return None
        return min(1.0, self.last_step / self.max_steps)


RUN_COLUMNS = [f.name for f in fields(Run)]
# Free-text columns: token-redacted on every write (tokens are never at rest, whatever a job printed).
FREE_TEXT = frozenset({"name", "error"})


def data_dir() -> Path:
    """The data directory, resolved from the environment at call time."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.home() / ".grpo_dashboard").expanduser()


def token_text(token: tuple[Any, ...]) -> str:
    """A change token as saved with a health badge (see `Store.health_badges`)."""
    return json.dumps(list(token))


class Store:
    """Thread-safe access to the SQLite store (one connection per thread)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else data_dir() / "dashboard.db"
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(_explain(self.path, exc)) from exc
        with _translated(self.path):
            # the version found (older ones are migrated); StoreError for a newer store or one lacking a column
            self.found_version = migrations.open_schema(self.connection(), self.path)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (WAL, busy timeout 30 s, autocommit with explicit transactions)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with _translated(self.path):
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
                try:
                    migrations.refuse_newer(conn, self.path)  # before the WAL switch: nothing written to it
                except StoreError:
                    conn.close()
                    raise
                conn.row_factory = sqlite3.Row
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An IMMEDIATE transaction: writers serialise, readers keep reading. SQLite failures become StoreError."""
        conn = self.connection()
        with _translated(self.path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # --- runs -------------------------------------------------------------------------------------------------
    def insert_run(self, run: Run) -> None:
        """Insert a new run row."""
        cols = ", ".join(RUN_COLUMNS)
        marks = ", ".join("?" for _ in RUN_COLUMNS)
        values = [redact(getattr(run, c)) if c in FREE_TEXT else getattr(run, c) for c in RUN_COLUMNS]
        with self.transaction() as conn:
            conn.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", values)

    def update_run(self, run_id: str, conn: sqlite3.Connection | None = None, **values: Any) -> None:
        """Set some columns of one run."""
        bad = [k for k in values if k not in RUN_COLUMNS or k == "id"]
        if bad:
            raise KeyError(f"unknown run column(s) {bad}")
        values = {k: redact(v) if k in FREE_TEXT else v for k, v in values.items()}
        sql = f"UPDATE runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?"
        if conn is not None:
            conn.execute(sql, [*values.values(), run_id])
            return
        with self.transaction() as c:
            c.execute(sql, [*values.values(), run_id])

    def finish_run(
        self,
        run_id: str,
        status: str,
        error: str | None = None,
        exit_code: int | None = None,
        conn: sqlite3.Connection | None = None,
    ) -> bool:
        """Move an active run to a terminal status; no-op (False) if it already ended."""
        sql = (
            "UPDATE runs SET status = ?, error = COALESCE(?, error), exit_code = COALESCE(?, exit_code), "
            "ended_at = COALESCE(ended_at, ?) WHERE id = ? AND status IN (?, ?)"
        )
        args = [status, redact(error), exit_code, time.time(), run_id, *ACTIVE]
        if conn is not None:
            return conn.execute(sql, args).rowcount > 0
        with self.transaction() as c:
            return c.execute(sql, args).rowcount > 0

    def get_run(self, run_id: str) -> Run:
        """One run by exact id."""
        row = self.connection().execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"No run with id {run_id!r}. List runs with `python -m grpo_dashboard runs`.")
        return Run(**dict(row))

    def find_run(self, ref: str) -> Run:
        """A run by exact id, name (the newest run of that name), or unique id prefix, in that order."""
        conn = self.connection()
        row = conn.execute("SELECT * FROM runs WHERE id = ?", (ref,)).fetchone()
        if row is None:
            row = conn.execute("SELECT * FROM runs WHERE name = ? ORDER BY created_at DESC LIMIT 1", (ref,)).fetchone()
        if row is None:
            rows = conn.execute(
                "SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created_at DESC", (_like_prefix(ref),)
            ).fetchall()
            if len(rows) > 1:
                ids = ", ".join(r["id"] for r in rows[:5])
                raise RunNotFound(f"{ref!r} matches {len(rows)} runs ({ids}...); give more of the id.")
            row = rows[0] if rows else None
        if row is None:
            raise RunNotFound(
                f"No run matches {ref!r} (by id, id prefix or name). List runs with `python -m grpo_dashboard runs`."
            )
        return Run(**dict(row))

    def list_runs(self, status: str | list[str] | None = None, owner: str | None = None) -> list[Run]:
        """Runs, newest first, optionally filtered by status(es) and owner."""
        sql, args = "SELECT * FROM runs", []
        where = []
        if status:
            statuses = [status] if isinstance(status, str) else list(status)
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            args.extend(statuses)
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC"
        return [Run(**dict(r)) for r in self.connection().execute(sql, args)]

    # --- metrics ----------------------------------------------------------------------------------------------
    def metric_keys(self, run_id: str) -> list[tuple[str, str]]:
        """(split, key) pairs present for a run."""
        rows = self.connection().execute(
            "SELECT split, key FROM series WHERE run_id = ? ORDER BY split, key", (run_id,)
        )
        return [(r[0], r[1]) for r in rows]

    def arrays(self, run_id: str, key: str, split: str = "train", since_step: int | None = None) -> SeriesArrays:
        """One metric as numpy arrays (steps, values with None and NaN as NaN, an is_none mask, times)."""
        return series.read_arrays(self.connection(), run_id, key, split, since_step)

    def arrays_all(
        self, run_id: str, since: dict[tuple[str, str], int | None] | None = None
    ) -> dict[tuple[str, str], SeriesArrays]:
        """Every metric of a run as arrays, keyed by (split, key), in one query; with `since`, only the series it
        names, each with its points after the given step (None: all of them), and none left without points."""
        return series.read_run(self.connection(), run_id, since)

    def columns(self, run_id: str) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
        """(steps, values) of every training-step series of a run, keyed by (split, key), in one query: what the
        doctor reads (`arrays_all`'s steps and values without the wall times or system samples; steps read-only)."""
        return series.read_columns(self.connection(), run_id)

    def series_heads(self, run_id: str) -> dict[tuple[str, str], tuple[int, int]]:
        """(points, last step) of every series of a run: how a reader that keeps what it read sees what changed."""
        return series.heads(self.connection(), run_id)

    def series(
        self, run_id: str, key: str, split: str = "train", since_step: int | None = None
    ) -> list[tuple[int, float | None, float | None]]:
        """(step, value, time) for one metric, ordered by step; NaN as float('nan'), None as None."""
        a = self.arrays(run_id, key, split, since_step)
        values: list[float | None] = a.values.tolist()
        for i in np.flatnonzero(a.is_none).tolist():
            values[i] = None
        return list(zip(a.steps.tolist(), values, a.times.tolist(), strict=True))

    def records(self, run_id: str) -> list[dict[str, Any]]:
        """The run's log records re-assembled as flat TRL-style dicts with a `step` key, train and eval by step."""
        per_split: dict[str, list[tuple[str, SeriesArrays]]] = {}
        for (split, key), arrays in sorted(self.arrays_all(run_id).items()):
            if split != series.SYSTEM_SPLIT:  # samples between steps, stepped by wall time: not log records
                per_split.setdefault(split, []).append((key, arrays))
        merged: list[tuple[int, int, dict[str, Any]]] = []
        for split, columns in per_split.items():
            steps = columns[0][1].steps
            if not all(np.array_equal(a.steps, steps) for _, a in columns[1:]):  # usually every key, every record
                steps = np.unique(np.concatenate([a.steps for _, a in columns]))
            rows: list[dict[str, Any]] = [{"step": s} for s in steps.tolist()]
            for key, a in columns:
                values: list[float | None] = a.values.tolist()
                for i in np.flatnonzero(a.is_none).tolist():
                    values[i] = None
                if len(a.steps) == len(steps):  # sorted unique subset of the same length: the same steps
                    for row, value in zip(rows, values, strict=True):
                        row[key] = value
                else:
                    for pos, value in zip(np.searchsorted(steps, a.steps).tolist(), values, strict=True):
                        rows[pos][key] = value
            rank = 0 if split == "train" else 1
            merged.extend((row["step"], rank, row) for row in rows)
        merged.sort(key=lambda t: (t[0], t[1]))
        return [row for _, _, row in merged]

    def latest_metrics(self, run_id: str, split: str = "train") -> dict[str, float | None]:
        """The last logged value of every key of a split."""
        rows = self.connection().execute(
            "SELECT key, last_value, last_kind FROM series WHERE run_id = ? AND split = ?", (run_id, split)
        )
        return {k: series.decode_scalar(v, kind) for k, v, kind in rows}

    def truncate_after(self, run_id: str, step: int) -> int:
        """Drop every stored point after `step` (before a resume from the checkpoint at `step`); returns how many."""
        with self.transaction() as conn:
            return series.truncate_after(conn, run_id, step)

    def shift_events(self, run_id: str) -> None:
        """Renumber a run's events below 0, keeping their order, so a new job's events (numbered by its log lines
        from 0, as a resumed Hugging Face job's are) follow them instead of colliding."""
        with self.transaction() as conn:
            row = conn.execute("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,)).fetchone()
            if row[0] is None:
                return
            shift = int(row[0]) + 1
            rows = conn.execute(
                "SELECT seq, time, event, payload FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall()
            conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
            conn.executemany(
                "INSERT INTO events (run_id, seq, time, event, payload) VALUES (?, ?, ?, ?, ?)",
                [(run_id, r[0] - shift, r[1], r[2], r[3]) for r in rows],
            )

    def count_metric_values(self, run_id: str) -> int:
        """Number of stored metric values of a run."""
        row = self.connection().execute("SELECT SUM(n) FROM series WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0] or 0)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Job events in order (payload decoded)."""
        rows = self.connection().execute(
            "SELECT seq, time, event, payload FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        return [{"seq": s, "time": t, "event": e, **json.loads(p)} for s, t, e, p in rows]

    def latest_event(self, run_id: str, event: str) -> dict[str, Any] | None:
        """The run's latest job event of one kind (payload decoded), or None."""
        row = (
            self.connection()
            .execute(
                "SELECT seq, time, event, payload FROM events WHERE run_id = ? AND event = ? "
                "ORDER BY seq DESC LIMIT 1",
                (run_id, event),
            )
            .fetchone()
        )
        return None if row is None else {"seq": row[0], "time": row[1], "event": row[2], **json.loads(row[3])}

    def ingest_offset(self, run_id: str) -> int | None:
        """The byte offset ingestion of a run has reached (None: no such run); a plain read, no write lock."""
        with _translated(self.path):
            row = self.connection().execute("SELECT ingest_offset FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def health_badges(self) -> dict[str, tuple[str, str]]:
        """Saved health badges: run id -> (the run's change token as JSON when it was computed, badge text)."""
        with _translated(self.path):
            rows = self.connection().execute("SELECT run_id, token, badge FROM health").fetchall()
        return {r: (t, b) for r, t, b in rows}

    def save_health_badge(self, run_id: str, token: tuple[Any, ...], badge: str) -> None:
        """Keep a run's health badge for its current change token (the runs table then needs no doctor pass)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO health (run_id, token, badge) VALUES (?, ?, ?)",
                (run_id, token_text(token), badge),
            )

    # --- findings history: every finding that fired on a run, with its first onset and when it resolved ---------
    def save_findings(self, run_id: str, findings: list[dict[str, Any]]) -> None:
        """Record a run's findings history (``Finding.to_dict()`` rows with ``status`` / ``resolved_step``): a
        finding already stored keeps its earliest onset; the rest of the row is the latest."""
        with self.transaction() as conn:
            known = {
                (r, m): s
                for r, m, s in conn.execute(
                    "SELECT rule, metric, first_step FROM findings WHERE run_id = ?", (run_id,)
                ).fetchall()
            }
            for f in findings:
                metric = f.get("metric") or ""
                first = min(int(f["step"]), known.get((f["rule"], metric), int(f["step"])))
                row = {**f, "step": first}
                conn.execute(
                    "INSERT OR REPLACE INTO findings (run_id, rule, metric, severity, first_step, status, "
                    "resolved_step, finding) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        f["rule"],
                        metric,
                        f["severity"],
                        first,
                        f.get("status", "active"),
                        f.get("resolved_step"),
                        json.dumps(row),
                    ),
                )

    def findings(self, run_id: str) -> list[dict[str, Any]]:
        """A run's recorded findings history (as saved by ``save_findings``), oldest onset first."""
        with _translated(self.path):
            rows = (
                self.connection()
                .execute("SELECT finding FROM findings WHERE run_id = ? ORDER BY first_step, rule", (run_id,))
                .fetchall()
            )
        return [json.loads(r[0]) for r in rows]

    def forecast_cells(self) -> dict[str, tuple[str, str]]:
        """Saved runs-table forecast cells: run id -> (the run's change token as JSON when computed, cell text)."""
        with _translated(self.path):
            rows = self.connection().execute("SELECT run_id, token, cell FROM forecast_cells").fetchall()
        return {r: (t, c) for r, t, c in rows}

    def save_forecast_cell(self, run_id: str, token: tuple[Any, ...], cell: str) -> None:
        """Keep a finished run's forecast cell for its change token (the runs table then fits nothing)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO forecast_cells (run_id, token, cell) VALUES (?, ?, ?)",
                (run_id, token_text(token), cell),
            )

    # --- naming, notes and deleting runs ------------------------------------------------------------------------
    def rename_run(self, run_id: str, name: str) -> None:
        """Give a run another display name (its id and directory stay); RunNotFound for an unknown id, ValueError for
        a name another run has (name lookups would then find the newer of the two)."""
        with self.transaction() as conn:
            taken = conn.execute(
                "SELECT id FROM runs WHERE name = ? AND id != ? ORDER BY created_at DESC LIMIT 1",
                (redact(name), run_id),
            ).fetchone()
            if taken is not None:
                raise ValueError(
                    f"name {name!r} is already the name of run {taken['id']}: `show`, `logs` and the other commands "
                    "find runs by name, so two runs may not share one. Choose another name (or rename that run first)."
                )
            if conn.execute("UPDATE runs SET name = ? WHERE id = ?", (redact(name), run_id)).rowcount == 0:
                raise RunNotFound(f"No run with id {run_id!r}. List runs with `python -m grpo_dashboard runs`.")

    def set_note(self, run_id: str, note: str) -> None:
        """Keep a free-text note on a run (an empty note removes it)."""
        self.get_run(run_id)
        with self.transaction() as conn:
            if note.strip():
                conn.execute(
                    "INSERT OR REPLACE INTO run_notes (run_id, note, updated_at) VALUES (?, ?, ?)",
                    (run_id, redact(note), time.time()),
                )
            else:
                conn.execute("DELETE FROM run_notes WHERE run_id = ?", (run_id,))

    def notes(self) -> dict[str, str]:
        """Run id -> note, for every run that has one."""
        with _translated(self.path):
            return dict(self.connection().execute("SELECT run_id, note FROM run_notes").fetchall())

    def delete_run_rows(self, run_id: str) -> None:
        """Remove a run and everything stored about it (metrics, events, badge, note, findings history, forecast
        cell) in one transaction; its files
        are the caller's (`launch.runs.delete`)."""
        with self.transaction() as conn:
            for table in ("chunks", "series", "events", "health", "run_notes", "findings", "forecast_cells"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            if conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount == 0:
                raise RunNotFound(f"No run with id {run_id!r}. List runs with `python -m grpo_dashboard runs`.")

    def change_token(self, run_id: str) -> tuple[Any, ...]:
        """A cheap value that changes whenever anything visible about the run changes (system samples of a remote
        job are written without moving the ingest offset: their newest step is part of it)."""
        row = (
            self.connection()
            .execute(
                "SELECT ingest_offset, n_records, status, last_step, "
                "(SELECT MAX(last_step) FROM series WHERE run_id = ? AND split = ?) FROM runs WHERE id = ?",
                (run_id, series.SYSTEM_SPLIT, run_id),
            )
            .fetchone()
        )
        return tuple(row) if row else ()

    def integrity_ok(self) -> bool:
        """PRAGMA integrity_check passes."""
        return self.connection().execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@contextlib.contextmanager
def _translated(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(_explain(path, exc)) from exc


def _explain(path: Path, exc: BaseException) -> str:
    why, fix = migrations.classify(exc)
    return f"The dashboard's store {path} {why} ({type(exc).__name__}: {exc}). Nothing was written. {fix}"


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
