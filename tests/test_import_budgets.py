"""Imports within budgets, with the real store and TRL: SQL under a deadline, values, records, columns and metric
names bounded, databases opened by a quoted path, uploads only from gradio's folder, recipe files read with a size
budget (never a device or a FIFO) and never by TRL in this process."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.spec import file_policy
from grpo_dashboard.spec.trl_import import import_trl
from grpo_dashboard.store import temp_area
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.import_guard import ImportLimits
from grpo_dashboard.store.importers import ImportRunError, import_run, import_upload


def _generated_db(path: Path, rows: int, blob: int) -> Path:
    """A trackio-shaped database whose `metrics` column is computed on every read: linear in `blob`."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY, timestamp TEXT, run_name TEXT, step INTEGER, "
        "metrics TEXT GENERATED ALWAYS AS ('{\"r\": ' || length(hex(zeroblob(step * 0 + "
        f"{blob}))) || '}}') VIRTUAL); PRAGMA user_version = 2;"
    )
    conn.executemany(
        "INSERT INTO metrics (timestamp, run_name, step) VALUES ('', 'r', ?)", [(i,) for i in range(rows)]
    )
    conn.commit()
    conn.close()
    return path


def _nothing_left(store: Store, before: int) -> None:
    assert len(store.list_runs()) == before
    runs = Path(os.environ["GRPO_DASHBOARD_DATA_DIR"]) / "runs"
    assert not runs.exists() or not list(runs.iterdir())


def test_sql_runs_under_a_deadline(data_dir: Path, tmp_path: Path) -> None:
    # ~16 GB of hex made by the reads: many seconds on any machine, so only the deadline can end it in time
    db = _generated_db(tmp_path / "slow.db", 20_000, 400_000)
    store = Store()
    start = time.monotonic()
    with pytest.raises(ImportRunError, match=r"longer than the import limit of 0.5 seconds"):
        import_run(db, store, limits=ImportLimits(time_s=0.5))
    assert time.monotonic() - start < 5
    _nothing_left(store, 0)
    fast = _generated_db(tmp_path / "fast.db", 3, 10)
    assert import_run(fast, store, limits=ImportLimits(time_s=0.5)).n_records >= 3  # the same shape, cheap


def test_values_records_columns_and_names_are_bounded(data_dir: Path, tmp_path: Path) -> None:
    store = Store()
    huge = _generated_db(tmp_path / "huge.db", 1, 2_000_000)  # one 4 MB value
    with pytest.raises(ImportRunError, match="over the import limit of 1,048,576 bytes"):
        import_run(huge, store)
    names = tmp_path / "names.jsonl"
    names.write_text(
        "".join(json.dumps({"step": s, **{f"m{s}_{i}": 1.0 for i in range(10)}}) + "\n" for s in range(1, 200))
    )
    with pytest.raises(ImportRunError, match="more than 1,000 distinct metrics; at most 1,000"):
        import_run(names, store)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"step": s, "reward": 0.1}) + "\n" for s in range(1, 50)))
    with pytest.raises(ImportRunError, match="more than 10 records"):
        import_run(rows, store, limits=ImportLimits(max_records=10))
    with pytest.raises(ImportRunError, match="over the import limit of 100 bytes"):
        import_run(rows, store, limits=ImportLimits(max_bytes=100))
    wide = tmp_path / "wide.csv"
    wide.write_text("_step," + ",".join(f"c{i}" for i in range(1500)) + "\n1," + ",".join(["1"] * 1500) + "\n")
    with pytest.raises(ImportRunError, match="has 1,501 columns; at most 1,000"):
        import_run(wide, store)
    _nothing_left(store, 0)
    assert import_run(rows, store).n_records  # within the budget: imported


def test_a_database_is_opened_by_its_quoted_path(data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    odd = tmp_path / "src" / "we?ird#..%2Fname.db"
    conn = sqlite3.connect(odd)
    conn.executescript(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY, timestamp TEXT, run_name TEXT, step INTEGER, "
        "metrics TEXT); PRAGMA user_version = 2;"
    )
    conn.execute("INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES ('', 'r', 1, '{\"reward\": 1}')")
    conn.commit()
    conn.close()
    before = sorted(p.name for p in (tmp_path / "src").iterdir())
    run = import_run(odd, Store())
    assert run.name == "we?ird#..%2Fname/r" and run.n_records >= 1
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == before  # nothing created beside it
    assert not (tmp_path / "src" / "we").exists() and not (tmp_path / "name.db").exists()


def test_uploads_come_only_from_the_upload_folder(data_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "gradio"
    (root / "abc").mkdir(parents=True)
    outside = tmp_path / "secret.jsonl"
    outside.write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    (root / "abc" / "link.jsonl").symlink_to(outside)
    store = Store()
    for path in (outside, root / "abc" / "link.jsonl", root / "abc" / "missing.jsonl", root / ".." / "secret.jsonl"):
        with pytest.raises(ImportRunError, match="is not a file uploaded to this dashboard") as err:
            import_upload(path, store, owner="bob", root=root)
        assert str(tmp_path) not in str(err.value)
    (root / "abc" / "ok.jsonl").write_text(outside.read_text())
    run = import_upload(root / "abc" / "ok.jsonl", store, owner="bob", root=root)
    assert run.name == "ok" and run.output_dir is None and str(root) not in run.spec_yaml
    assert not list(temp_area.temp_root().glob("import-*"))  # the private copy is gone


def test_recipe_files_are_read_with_a_budget_never_by_trl(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for value, match in (
        ("/dev/zero", "not a regular file"),
        (str(fifo), "not a regular file"),
        (str(tmp_path / "missing.json"), "cannot be read"),
    ):
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(f"model_name_or_path: a/b\naccelerator_config: {value}\n")
        done: list[BaseException] = []

        def attempt(out: list[BaseException] = done, path: Path = recipe) -> None:
            with pytest.raises(SpecError) as err:
                import_trl(path)
            out.append(err.value)

        worker = threading.Thread(target=attempt, daemon=True)
        worker.start()
        worker.join(30)
        assert done and "accelerator_config" in str(done[0]) and match in str(done[0]), done
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"x": "y" * (file_policy.MAX_CONFIG_BYTES + 10)}))
    recipe.write_text(f"model_name_or_path: a/b\naccelerator_config: {big.name}\n")
    with pytest.raises(SpecError, match="over the limit of 1,048,576 bytes"):
        import_trl(recipe)
    (tmp_path / "accel.json").write_text(json.dumps({"split_batches": True}))
    recipe.write_text("model_name_or_path: a/b\naccelerator_config: accel.json\n")  # beside the recipe: read here
    result = import_trl(recipe)
    assert result.spec.training["accelerator_config"] == "accel.json" and result.trl_check is None


def test_on_a_space_recipes_name_no_files(monkeypatch: pytest.MonkeyPatch) -> None:
    config = {
        "model_name_or_path": "/srv/models/x",
        "dataset_name": "../data",
        "fsdp_config": "fsdp.json",
        "deepspeed": '{"zero_optimization": {"stage": 2}}',
        "datasets": [{"path": "json", "data_files": "a"}],
        "dataset_mixture": {"datasets": [{"id": "~/d"}]},
        "chat_template_path": "t.jinja",
    }
    fields = {e.field for e in file_policy.recipe_file_errors(config, on_space=True)}
    assert fields == {
        "model_name_or_path",
        "dataset_name",
        "fsdp_config",
        "datasets[0].data_files",
        "dataset_mixture.datasets[0].id",
        "chat_template_path",
    }  # inline JSON is no file
    assert file_policy.recipe_file_errors(config, on_space=False) == []
