"""The store's schema versions and the forward migrations between them, applied when a store is opened.

The version is SQLite's `PRAGMA user_version`. Version 0 is a store written before versioning (every table made by
`CREATE TABLE IF NOT EXISTS`, nothing stamped) or a new, empty file; version N is what the first N entries of
MIGRATIONS make of it. A migration is frozen once released: a schema change is a new function appended to
MIGRATIONS, never an edit of an old one, so a store of any earlier version reaches the same schema.

Opening (`open_schema`) migrates only when a step is due: inside one IMMEDIATE transaction (the version is read
again inside it, so of two processes opening an old store at once the second finds it migrated), after a copy of the
file made with SQLite's backup API (`dashboard.db.bak-v<old version>` next to it, named in the log). A failing step
rolls everything back and leaves the file as it was. A store of a version newer than this code is refused before
anything is written. Every open then checks the store has each table and column this code's schema has, so a store
changed by hand or by another program fails with a message about its schema instead of on its first insert.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grpo_dashboard import __version__
from grpo_dashboard.errors import StoreError

log = logging.getLogger(__name__)

DATA_DIR_ENV = "GRPO_DASHBOARD_DATA_DIR"
UNKNOWN = "cannot be used"  # what `classify` says of a failure that is none of the known kinds
MIGRATION_BUSY_MS = 600_000  # another process's migration (its backup of a big store) may hold the lock a while


@dataclass(frozen=True)
class Migration:
    """One forward step: `apply` brings a store from version `version - 1` to `version`, inside the caller's
    transaction (plain `execute` calls only: `executescript` would commit)."""

    version: int
    summary: str
    apply: Callable[[sqlite3.Connection], None]


# Version 1: the schema of the last release before versioning, frozen here (later changes are new migrations).
V1_TABLES = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    spec_yaml TEXT NOT NULL,
    backend TEXT NOT NULL,
    external_id TEXT,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    run_dir TEXT NOT NULL,
    output_dir TEXT,
    error TEXT,
    exit_code INTEGER,
    pid INTEGER,
    pid_start TEXT,
    cancel_requested_at REAL,
    ingest_offset INTEGER NOT NULL DEFAULT 0,
    last_step INTEGER,
    max_steps INTEGER,
    last_time REAL,
    n_records INTEGER NOT NULL DEFAULT 0,
    n_skipped INTEGER NOT NULL DEFAULT 0,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS runs_status ON runs(status);
CREATE TABLE IF NOT EXISTS health (
    run_id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    badge TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS findings (
    run_id TEXT NOT NULL,
    rule TEXT NOT NULL,
    metric TEXT NOT NULL,
    severity TEXT NOT NULL,
    first_step INTEGER NOT NULL,
    status TEXT NOT NULL,
    resolved_step INTEGER,
    finding TEXT NOT NULL,
    PRIMARY KEY (run_id, rule, metric)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS forecast_cells (
    run_id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    cell TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_notes (run_id TEXT PRIMARY KEY, note TEXT NOT NULL, updated_at REAL);
CREATE TABLE IF NOT EXISTS series (
    run_id TEXT NOT NULL,
    split TEXT NOT NULL,
    key TEXT NOT NULL,
    n INTEGER NOT NULL,
    last_step INTEGER NOT NULL,
    last_value REAL,
    last_kind INTEGER NOT NULL,
    PRIMARY KEY (run_id, split, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    run_id TEXT NOT NULL,
    split TEXT NOT NULL,
    key TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    first_step INTEGER NOT NULL,
    last_step INTEGER NOT NULL,
    n INTEGER NOT NULL,
    steps BLOB NOT NULL,
    vals BLOB NOT NULL,
    times BLOB NOT NULL,
    PRIMARY KEY (run_id, split, key, chunk)
) WITHOUT ROWID
"""


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _columns(conn: sqlite3.Connection, table: str) -> list[sqlite3.Row | tuple]:
    return conn.execute(f"PRAGMA table_info({table})").fetchall()  # cid, name, type, notnull, dflt_value, pk


def _v1_tables(conn: sqlite3.Connection) -> None:
    """Every table of the last unversioned release (`run_notes`, made on a first note before, included); a table
    of an older store that lacks a column which can be added (nullable or with a default) gets it."""
    reference = sqlite3.connect(":memory:")
    try:
        for statement in _statements(V1_TABLES):
            reference.execute(statement)
        tables = [r[0] for r in reference.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        wanted = {t: _columns(reference, t) for t in tables}
    finally:
        reference.close()
    existing = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, columns in wanted.items():
        if table not in existing:
            continue
        have = {c[1] for c in _columns(conn, table)}
        for _, name, kind, notnull, default, pk in columns:
            if name in have or pk or (notnull and default is None):
                continue  # a missing key or NOT NULL column without default cannot be added: `verify` names it
            clause = (" NOT NULL" if notnull else "") + (f" DEFAULT {default}" if default is not None else "")
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}{clause}")
    for statement in _statements(V1_TABLES):
        conn.execute(statement)


def _v2_history(conn: sqlite3.Connection) -> None:
    """`schema_history`: one row per migration applied to this store (when, by which dashboard release, from which
    version, where the copy from before went), so a store's past is known when something about it looks wrong."""
    conn.execute(
        "CREATE TABLE schema_history (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, "
        "dashboard_version TEXT NOT NULL, from_version INTEGER NOT NULL, backup TEXT)"
    )


# The next schema change: a function appended here (a new column of `runs` is also a field of `db.Run`).
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the tables of the last unversioned release", _v1_tables),
    Migration(2, "schema_history, the record of migrations", _v2_history),
)
SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    """The store's schema version (`PRAGMA user_version`; 0: unversioned or new)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """The store's version; StoreError (nothing written) when it is newer than the newest `migrations` know."""
    version = user_version(conn)
    if version > len(migrations):
        raise StoreError(
            f"The dashboard's store {path} has schema version {version}, newer than this dashboard "
            f"(grpo_dashboard {__version__}) knows: it reads schema versions up to {len(migrations)}. A newer "
            f"release of the dashboard wrote it. Nothing was written. Upgrade the dashboard (install the newer "
            f"release, or pull the latest code), or set {DATA_DIR_ENV} to another folder to keep a separate "
            f"store for this version."
        )
    return version


def open_schema(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the store on `conn` (an autocommit connection to `path`) to the newest version of `migrations`, then
    check its tables; returns the version it was found at. StoreError when it is newer, a step fails (rolled back:
    the file is as it was) or its tables do not match."""
    found = refuse_newer(conn, path, migrations)
    if found < len(migrations):
        return _migrate(conn, path, migrations)
    verify(conn, path, migrations)
    return found


def _migrate(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration]) -> int:
    target = len(migrations)
    (timeout_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute(f"PRAGMA busy_timeout = {MIGRATION_BUSY_MS}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
    backup: Path | None = None
    old, failing = target, "the backup"
    try:
        old = refuse_newer(conn, path, migrations)  # again, under the lock: another process may have migrated
        if old == target:
            conn.execute("COMMIT")
            verify(conn, path, migrations)
            return old
        if conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None:  # a new file needs none
            backup = _backup(path, old)
        started = time.time()
        for step in migrations[old:]:
            failing = f"migration {step.version} ({step.summary})"
            step.apply(conn)
        failing = "recording the new version"
        conn.execute(f"PRAGMA user_version = {target}")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_history'").fetchone():
            conn.executemany(
                "INSERT OR REPLACE INTO schema_history (version, applied_at, dashboard_version, from_version, "
                "backup) VALUES (?, ?, ?, ?, ?)",
                [(m.version, started, __version__, old, str(backup) if backup else None) for m in migrations[old:]],
            )
        verify(conn, path, migrations, found=old)  # a store the steps cannot bring to the schema stays as it was
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, StoreError) or not isinstance(exc, Exception):
            raise
        why, fix = classify(exc)
        kept = f"; the copy made before it is {backup}" if backup else ""
        state = "" if why == UNKNOWN else f"; the store {why}"
        raise StoreError(
            f"The dashboard's store {path} could not be upgraded from schema version {old} to {target}: "
            f"{failing} failed ({type(exc).__name__}: {exc}{state}). The upgrade was rolled back: the store is as "
            f"it was{kept}. {fix}"
        ) from exc
    if backup is not None:
        log.warning(
            "upgraded the store %s from schema version %d to %d; the copy from before is %s", path, old, target, backup
        )
    return old


def _backup(path: Path, version: int) -> Path:
    """A copy of the store, written next to it atomically. Read through a connection of its own: SQLite's backup
    cannot read through one holding the write transaction, and this one sees the committed store that the
    transaction, holding the write lock, is about to migrate."""
    final = path.with_name(f"{path.name}.bak-v{version}")
    partial = path.with_name(f"{final.name}.partial")
    try:
        with (
            contextlib.closing(sqlite3.connect(path, timeout=30.0)) as source,
            contextlib.closing(sqlite3.connect(partial)) as target,
        ):
            source.backup(target)
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return final


@functools.lru_cache(maxsize=4)
def expected_tables(migrations: tuple[Migration, ...] = MIGRATIONS) -> dict[str, frozenset[str]]:
    """Table -> column names of the schema `migrations` make (built once, in memory)."""
    reference = sqlite3.connect(":memory:", isolation_level=None)
    try:
        reference.execute("BEGIN")
        for step in migrations:
            step.apply(reference)
        reference.execute("COMMIT")
        return _tables(reference)
    finally:
        reference.close()


def _tables(conn: sqlite3.Connection) -> dict[str, frozenset[str]]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: frozenset(c[1] for c in _columns(conn, t)) for t in names}


def verify(
    conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS, found: int | None = None
) -> None:
    """StoreError naming what is missing when the store lacks a table or column of this code's schema (`found`:
    the version the store had before a migration now being checked, for the message)."""
    have = _tables(conn)
    missing = []
    for table, columns in sorted(expected_tables(tuple(migrations)).items()):
        if table not in have:
            missing.append(f"table {table}")
        else:
            missing.extend(f"column {table}.{c}" for c in sorted(columns - have[table]))
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise StoreError(
            f"The dashboard's store {path} (schema version {user_version(conn) if found is None else found}) "
            f"does not have the schema this dashboard writes: it lacks {shown}. It was changed by hand or by "
            f"another program. Nothing was written. Restore a copy (a {path.name}.bak-v* file next to it, if "
            f"any), or set {DATA_DIR_ENV} to another folder to start a new store."
        )


def history(conn: sqlite3.Connection) -> list[dict[str, object]]:
    """The migrations applied to a store, oldest first (a store made new: the steps that made it, from 0)."""
    rows = conn.execute(
        "SELECT version, applied_at, dashboard_version, from_version, backup FROM schema_history ORDER BY version"
    ).fetchall()
    keys = ("version", "applied_at", "dashboard_version", "from_version", "backup")
    return [dict(zip(keys, tuple(r), strict=True)) for r in rows]


def classify(exc: BaseException) -> tuple[str, str]:
    """(what is wrong with the store, the fix) for a failure of SQLite or the file system."""
    low = str(exc).lower()
    elsewhere = f"set {DATA_DIR_ENV} to another folder"
    if "readonly" in low or "read-only" in low or "permission" in low or "unable to open" in low:
        return "is not writable", f"Fix its permissions, or {elsewhere} (a writable one)."
    if "full" in low or "no space" in low or "file too large" in low:
        return "is full", f"Free disk space, or {elsewhere} (on a disk with room)."
    if "locked" in low or "busy" in low:
        return (
            "is locked by another process for too long",
            f"Wait for the other dashboard or command using it to finish, or {elsewhere}.",
        )
    if any(s in low for s in ("no such table", "no such column", "has no column named", "columns but")):
        return (
            "does not have the schema this dashboard writes",
            f"It was changed by hand or by another program: restore a copy (a .bak-v* file next to it, if any), "
            f"or {elsewhere} to start a new store.",
        )
    if "malformed" in low or "not a database" in low or "disk i/o" in low:
        return (
            "is damaged or not a dashboard store",
            f"Restore a copy (a .bak-v* file next to it, if any), or {elsewhere} to start a new store.",
        )
    return UNKNOWN, f"Set {DATA_DIR_ENV} to another folder, and report this message if it persists."
