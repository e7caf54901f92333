"""The doctor's column read (`Store.columns`, the runs table's first pass) returns what `arrays_all` does, bit for
bit: steps and values of every training-step series, None, NaN and ±Inf as stored, irregular and merged steps.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from grpo_dashboard.store import series as series_store
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import run_data

from .store_helpers import append_log, new_run


def assert_columns_match_arrays(store: Store, run_id: str) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """`columns` equals `arrays_all` without the system samples: same series, same steps, same value bits."""
    columns = store.columns(run_id)
    expected = {k: a for k, a in store.arrays_all(run_id).items() if k[0] != series_store.SYSTEM_SPLIT}
    assert sorted(columns) == sorted(expected)
    for ident, (steps, values) in columns.items():
        a = expected[ident]
        assert steps.dtype == np.int64 and values.dtype == np.float64
        assert np.array_equal(steps, a.steps), ident
        assert values.view(np.uint64).tolist() == a.values.view(np.uint64).tolist(), ident
    return columns


def test_columns_equal_arrays_all_on_odd_values_and_steps(tmp_path: Path) -> None:
    store = Store(tmp_path / "dashboard.db")
    path = new_run(store, tmp_path)
    odd = {5: math.nan, 6: math.inf, 7: -math.inf, 8: None, 2500: None, 2501: math.nan}
    append_log(
        path,
        range(1, 3000),
        reward=lambda s: odd.get(s, s * 0.5),
        kl=lambda s: None if s % 7 == 0 else s,
    )
    append_log(path, list(range(3000, 6000, 3)), reward=1.0)  # a second stride: the steps of the two keys differ
    ingest_file(store, "r1", path)
    conn = store.connection()
    with conn:
        # irregular steps (raw int64 blobs), an out-of-order point merged into an old chunk, another split, samples
        series_store.append_points(conn, "r1", "train", "sparse", [1, 2, 4, 8, 9, 30, 31], [1.0] * 7, [0.0] * 7)
        series_store.append_points(conn, "r1", "train", "sparse", [5, 3], [0.25, math.inf], [0.0, 0.0])
        series_store.append_points(conn, "r1", "train", "reward", [7000, 6500], [math.nan, -0.0], [0.0, 0.0])
        series_store.append_points(conn, "r1", "eval", "reward", [100, 200, 300], [0.1, None, 0.3], [0.0] * 3)
        series_store.append_points(conn, "r1", "system", "gpu0/util", [10, 20, 30], [1.0, 2.0, 3.0], [0.0] * 3)
    columns = assert_columns_match_arrays(store, "r1")
    assert ("system", "gpu0/util") not in columns and ("eval", "reward") in columns
    assert columns[("train", "sparse")][0].tolist() == [1, 2, 3, 4, 5, 8, 9, 30, 31]
    reward = columns[("train", "reward")][1]
    none = reward.view(np.uint64) == series_store.NONE_BITS
    assert int(none.sum()) == 2 and np.isposinf(reward).sum() == 1 and np.isneginf(reward).sum() == 1
    assert store.columns("no-such-run") == {}


def test_shared_steps_are_read_only_and_values_are_each_series_own(tmp_path: Path) -> None:
    store = Store(tmp_path / "dashboard.db")
    path = new_run(store, tmp_path)
    append_log(path, range(1, 2500), reward=lambda s: s * 0.5, kl=0.1, loss=lambda s: -s)
    ingest_file(store, "r1", path)
    columns = assert_columns_match_arrays(store, "r1")
    (s1, v1), (s2, v2) = columns[("train", "reward")], columns[("train", "kl")]
    assert s1 is s2 and not s1.flags.writeable  # one decode for the steps every key shares
    assert v1.flags.writeable and not np.shares_memory(v1, v2)
    v1[0] = 123.0
    assert store.columns("r1")[("train", "reward")][1][0] == 0.5


def test_metric_frame_from_columns_equals_the_frame_from_records(tmp_path: Path) -> None:
    from grpo_dashboard.health.series import MetricFrame

    store = Store(tmp_path / "dashboard.db")
    path = new_run(store, tmp_path)
    append_log(path, range(1, 1500), reward=lambda s: None if s % 11 == 0 else s * 0.5, kl=lambda s: s % 5)
    ingest_file(store, "r1", path)
    frame = run_data._read_frame(store, "r1")
    reference = MetricFrame.from_records(store.records("r1"))
    assert sorted(frame.columns) == sorted(reference.columns) and frame.n_records == reference.n_records
    for key, series in reference.columns.items():
        assert np.array_equal(frame.columns[key].steps, series.steps)
        assert np.array_equal(frame.columns[key].values, series.values, equal_nan=True)
