"""Schema versions of the store: a store written by main before versioning (the v0 fixture) and a store of every later
version open with everything intact; a newer store, a failing migration and a store lacking a column are refused
with a message about the schema, leaving the file as it was; two processes opening an old store migrate it once."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_dashboard.errors import StoreError
from grpo_dashboard.store import migrations
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.store.migrations import MIGRATIONS, SCHEMA_VERSION, Migration

from .conftest import REPO
from .store_contents import contents
from .store_helpers import append_log

FIXTURE = REPO / "tests" / "fixtures" / "store" / "v0_main.db"
FIXTURE_CONTENTS = json.loads((FIXTURE.with_suffix(".json")).read_text())


def v0_copy(tmp_path: Path) -> Path:
    """The v0 fixture copied into its own folder (as `dashboard.db`, so it can be migrated)."""
    folder = tmp_path / "store"
    folder.mkdir()
    return Path(shutil.copy(FIXTURE, folder / "dashboard.db"))


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection, like the store's (autocommit), with nothing of the store's code in between."""
    return sqlite3.connect(path, isolation_level=None)


def dump(path: Path) -> list[str]:
    """Every statement that re-creates the database: its schema and all rows."""
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def read_back(store: Store) -> dict[str, object]:
    return json.loads(json.dumps(contents(store)))  # as saved: tuples as lists, through JSON like the fixture


def test_the_fixture_is_a_store_of_main_before_versioning() -> None:
    conn = raw(FIXTURE)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert migrations.user_version(conn) == 0
    assert "schema_history" not in tables and {"runs", "chunks", "series", "run_notes", "findings"} <= tables
    conn.close()
    assert len(FIXTURE_CONTENTS["runs"]) == 4 and FIXTURE_CONTENTS["notes"] and len(FIXTURE_CONTENTS["badges"]) == 3


def test_v0_store_is_migrated_with_a_backup_and_everything_intact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = v0_copy(tmp_path)
    with caplog.at_level(logging.WARNING, logger="grpo_dashboard.store.migrations"):
        store = Store(path)
    backup = path.with_name("dashboard.db.bak-v0")
    assert store.found_version == 0
    assert migrations.user_version(store.connection()) == SCHEMA_VERSION
    assert read_back(store) == FIXTURE_CONTENTS  # every run row, metric point (None/NaN/±Inf), note, badge, cell
    assert dump(backup) == dump(FIXTURE), "the backup is the store as it was before the migration"
    assert f"from schema version 0 to {SCHEMA_VERSION}" in caplog.text and str(backup) in caplog.text
    assert [h["version"] for h in migrations.history(store.connection())] == list(range(1, SCHEMA_VERSION + 1))
    assert {h["backup"] for h in migrations.history(store.connection())} == {str(backup)}
    assert store.integrity_ok()

    # and it is a working store: a new run with metrics, a note, a rename, a delete
    append_log(tmp_path / "m.jsonl", range(1, 4), loss=lambda s: 1.0 / s)
    store.insert_run(
        Run(
            id="after",
            name="after",
            spec_yaml="",
            backend="local",
            status="running",
            created_at=time.time(),
            run_dir=str(tmp_path),
            owner="bob",
        )
    )
    assert ingest_file(store, "after", tmp_path / "m.jsonl").records == 3
    store.set_note("after", "made after the migration")
    store.rename_run("local-smoke", "renamed")
    store.delete_run_rows("slurm-failed")
    assert store.series("after", "loss")[2][1] == pytest.approx(1 / 3)
    assert store.notes() == {"after": "made after the migration"}
    store.close()

    caplog.clear()
    again = Store(path)  # opened again: nothing due, no second backup
    assert again.found_version == SCHEMA_VERSION and "upgraded" not in caplog.text
    assert [r.id for r in again.list_runs()][0] == "after"


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_a_store_of_every_later_version_opens(tmp_path: Path, version: int) -> None:
    path = v0_copy(tmp_path)
    conn = raw(path)
    assert migrations.open_schema(conn, path, MIGRATIONS[:version]) == 0  # the code of that version opened it
    assert migrations.user_version(conn) == version
    conn.close()
    path.with_name("dashboard.db.bak-v0").unlink()
    store = Store(path)
    assert store.found_version == version
    assert migrations.user_version(store.connection()) == SCHEMA_VERSION
    assert read_back(store) == FIXTURE_CONTENTS
    assert path.with_name("dashboard.db.bak-v0").exists() is False
    assert path.with_name(f"dashboard.db.bak-v{version}").exists() is (version < SCHEMA_VERSION)


def test_a_migrated_store_has_the_schema_of_a_new_one(tmp_path: Path) -> None:
    migrated = Store(v0_copy(tmp_path)).connection()
    new = Store(tmp_path / "new" / "dashboard.db")
    assert not (tmp_path / "new" / "dashboard.db.bak-v0").exists(), "a new store needs no backup"
    assert new.found_version == 0 and migrations.user_version(new.connection()) == SCHEMA_VERSION
    shape = "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    assert migrated.execute(shape).fetchall() == new.connection().execute(shape).fetchall()
    assert migrations._tables(migrated) == migrations._tables(new.connection()) == migrations.expected_tables()
    assert [h["from_version"] for h in migrations.history(new.connection())] == [0] * SCHEMA_VERSION


def test_migration_versions_follow_each_other() -> None:
    # a schema change is one step appended: the list is the history, numbered from 1 without gaps
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1)) and SCHEMA_VERSION == len(MIGRATIONS)


def newer_store(tmp_path: Path) -> Path:
    path = tmp_path / "newer" / "dashboard.db"
    store = Store(path)
    store.insert_run(
        Run(
            id="future",
            name="future",
            spec_yaml="",
            backend="local",
            status="completed",
            created_at=1.0,
            run_dir=str(tmp_path),
        )
    )
    store.close()
    conn = raw(path)
    conn.execute("PRAGMA journal_mode=DELETE")  # a WAL switch on opening would change the file: it must not happen
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    return path


def test_a_store_newer_than_the_code_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = newer_store(tmp_path)
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        Store(path)
    text = str(info.value)
    assert str(path) in text and f"schema version {SCHEMA_VERSION + 1}" in text
    assert f"up to {SCHEMA_VERSION}" in text and "Upgrade the dashboard" in text and "GRPO_DASHBOARD_DATA_DIR" in text
    assert "Free disk space" not in text and "permissions" not in text
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["dashboard.db"], "no backup, WAL or lock file left"


def test_the_cli_reports_a_newer_store_without_a_traceback(tmp_path: Path, data_dir: Path) -> None:
    path = newer_store(tmp_path)
    data_dir.mkdir()
    shutil.move(path, data_dir / "dashboard.db")
    result = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "runs"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=os.environ.copy(),
        timeout=120,
    )
    assert result.returncode == 5, result.stdout + result.stderr
    assert f"has schema version {SCHEMA_VERSION + 1}" in result.stderr and "Traceback" not in result.stderr


def _half_then_fail(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE runs ADD COLUMN half_done TEXT")
    conn.execute("DELETE FROM chunks")
    raise sqlite3.OperationalError("simulated failure in the middle of a migration")


def test_a_failing_migration_rolls_back_and_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = v0_copy(tmp_path)
    before = path.read_bytes()
    broken = (*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "a step that fails half way", _half_then_fail))
    conn = raw(path)
    with pytest.raises(StoreError) as info:
        migrations.open_schema(conn, path, broken)
    text = str(info.value)
    assert f"from schema version 0 to {SCHEMA_VERSION + 1}" in text
    assert f"migration {SCHEMA_VERSION + 1} (a step that fails half way) failed" in text
    assert "rolled back" in text and str(path.with_name("dashboard.db.bak-v0")) in text
    assert "Free disk space" not in text
    assert migrations.user_version(conn) == 0 and not conn.in_transaction
    conn.close()
    assert path.read_bytes() == before
    assert dump(path) == dump(FIXTURE)
    assert read_back(Store(path)) == FIXTURE_CONTENTS  # and the real code still migrates it afterwards


def test_a_v0_store_one_column_behind_gets_the_column(tmp_path: Path) -> None:
    path = v0_copy(tmp_path)
    conn = raw(path)
    conn.execute("ALTER TABLE runs DROP COLUMN owner")  # a store of a release before runs had owners
    conn.close()
    store = Store(path)
    store.insert_run(
        Run(
            id="new",
            name="new",
            spec_yaml="",
            backend="local",
            status="queued",
            created_at=2e9,
            run_dir=str(tmp_path),
            owner="carol",
        )
    )
    assert store.get_run("new").owner == "carol" and store.get_run("local-smoke").owner is None
    assert store.get_run("slurm-failed").external_id == "4242"


def test_a_store_lacking_a_column_that_cannot_be_added_says_so(tmp_path: Path) -> None:
    path = v0_copy(tmp_path)
    conn = raw(path)
    conn.execute("ALTER TABLE runs DROP COLUMN spec_yaml")  # NOT NULL without a default: no migration can add it
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        Store(path)
    text = str(info.value)
    assert "(schema version 0) does not have the schema this dashboard writes: it lacks column runs.spec_yaml" in text
    assert "Free disk space" not in text and "permissions" not in text and "GRPO_DASHBOARD_DATA_DIR" in text
    assert path.read_bytes() == before and migrations.user_version(raw(path)) == 0


def test_a_current_store_lacking_a_column_is_refused_with_the_schema_named(tmp_path: Path) -> None:
    path = tmp_path / "d" / "dashboard.db"
    Store(path).close()
    conn = raw(path)
    conn.execute("ALTER TABLE runs DROP COLUMN owner")
    conn.execute("DROP TABLE forecast_cells")
    conn.close()
    with pytest.raises(StoreError) as info:
        Store(path)
    assert (
        f"(schema version {SCHEMA_VERSION}) does not have the schema this dashboard writes: it lacks table "
        f"forecast_cells, column runs.owner."
    ) in str(info.value)


def test_a_schema_error_while_running_is_not_blamed_on_the_disk(tmp_path: Path) -> None:
    store = Store(tmp_path / "d" / "dashboard.db")
    other = raw(store.path)
    other.execute("ALTER TABLE runs DROP COLUMN owner")  # changed under a running dashboard
    other.close()
    with pytest.raises(StoreError) as info:
        store.insert_run(
            Run(
                id="x", name="x", spec_yaml="", backend="local", status="queued", created_at=1.0, run_dir=str(tmp_path)
            )
        )
    text = str(info.value)
    assert (
        "does not have the schema this dashboard writes (OperationalError: table runs has no column named owner)"
        in text
    )
    assert "Free disk space" not in text and "permissions" not in text


CHILD = textwrap.dedent("""
    import json, sys
    from grpo_dashboard.store.db import Store
    print("opening", flush=True)
    store = Store(sys.argv[1])
    print(json.dumps({"found": store.found_version, "runs": len(store.list_runs())}), flush=True)
""")


def test_two_processes_opening_an_old_store_at_once_migrate_it_once(tmp_path: Path) -> None:
    path = v0_copy(tmp_path)
    lock = raw(path)
    lock.execute("BEGIN IMMEDIATE")  # both children read version 0, then queue for the write lock behind this one
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "opening"
        time.sleep(2.0)  # past their version check, waiting in BEGIN IMMEDIATE
        assert all(c.poll() is None for c in children), "the children must wait for the lock, not fail"
        lock.execute("ROLLBACK")
        outs = [c.communicate(timeout=120) for c in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        lock.close()
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert sorted(r["found"] for r in results) == [0, SCHEMA_VERSION], results  # one migrated, the other found it
    assert all(r["runs"] == 4 for r in results)
    assert sum("upgraded the store" in err for _, err in outs) == 1
    store = Store(path)
    assert [h["version"] for h in migrations.history(store.connection())] == list(range(1, SCHEMA_VERSION + 1))
    assert read_back(store) == FIXTURE_CONTENTS
