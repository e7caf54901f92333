"""The store's fast paths keep their meaning: downsampled reads, resumable EMA, step encoding, bulk ingestion.

Functional checks only (values, bounds, equivalence with plain reference code); speed is measured in benchmarks/.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grpo_dashboard.store import series as series_store
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import display, downsample

from .store_helpers import append_log, new_run
from .store_helpers import reference_ema as charts_reference_ema


def reference_ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's loop (tests/store_helpers.py), as an array."""
    return np.array(charts_reference_ema(values, weight))


def reference_keep(values: np.ndarray, width: int) -> list[int]:
    """First and last; per bucket of `width`: lowest and highest finite value, first non-finite one."""
    keep: set[int] = {0, len(values) - 1}
    for lo in range(0, len(values), width):
        chunk = values[lo : lo + width]
        finite = np.isfinite(chunk)
        if finite.any():
            keep.add(lo + int(np.argmin(np.where(finite, chunk, np.inf))))
            keep.add(lo + int(np.argmax(np.where(finite, chunk, -np.inf))))
        if not finite.all():
            keep.add(lo + int(np.argmax(~finite)))
    return sorted(keep)


@pytest.mark.parametrize("weight", [0.0, 0.01, 0.6, 0.99, 0.999])
def test_ema_matches_the_reference_loop_and_resumes_exactly(weight: float) -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(0, 1, 5000)
    values[[3, 700, 701, 4000]] = [math.nan, math.inf, -math.inf, math.nan]
    expected = reference_ema(values, weight) if weight else values
    whole, _ = downsample.ema(values, weight)
    assert np.allclose(whole, expected, rtol=1e-9, atol=1e-12, equal_nan=True)
    state, parts = None, []
    for lo, hi in ((0, 1), (1, 999), (999, 1000), (1000, 5000)):
        part, state = downsample.ema(values[lo:hi], weight, state)
        parts.append(part)
    assert np.allclose(np.concatenate(parts), expected, rtol=1e-9, atol=1e-12, equal_nan=True)


def test_minmax_keeps_spikes_gaps_and_bounds_points() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(0, 1, 100_000)
    values[54_321], values[77_777], values[12_345] = 500.0, -400.0, math.nan
    keep = downsample.minmax_indices(values, 2000)
    assert len(keep) <= 2000
    assert {54_321, 77_777, 12_345} <= set(keep.tolist())
    assert list(keep) == sorted(set(keep.tolist()))
    assert list(downsample.minmax_indices(values[:1500], 2000)) == list(range(1500))


@pytest.mark.parametrize("seed", range(6))
def test_incremental_summary_equals_the_one_shot_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 20_000))
    values = rng.normal(0, 1, n)
    if seed % 2:
        values[rng.integers(0, n, max(1, n // 100))] = math.nan
    steps = np.arange(1, n + 1) * 3
    times = 1000.0 + steps
    is_none = np.isnan(values) & (rng.random(n) < 0.5)
    max_points = int(rng.integers(5, 3000))
    summary = downsample.SeriesSummary(max_points, smoothing=0.6)
    cuts = sorted({0, n, *rng.integers(0, n, 10).tolist()})
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        summary.extend(steps[lo:hi], values[lo:hi], times[lo:hi], is_none[lo:hi])
    idx = summary.indices()
    assert list(idx) == reference_keep(values, summary.width)
    assert len(idx) <= max_points or n <= max_points
    pts = summary.points()
    assert pts.total == n
    assert list(pts.steps) == list(steps[idx]) and list(pts.times) == list(times[idx])
    assert np.array_equal(pts.values, values[idx], equal_nan=True)
    assert list(pts.is_none) == list(is_none[idx])
    assert np.allclose(pts.smooth, reference_ema(values, 0.6)[idx], rtol=1e-9, equal_nan=True)


def test_summary_rejects_a_budget_too_small_for_ends_min_max_and_gap() -> None:
    with pytest.raises(ValueError, match="at least 5"):
        downsample.SeriesSummary(4)


def test_store_downsampled_follows_a_growing_run_and_keeps_its_spike(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, range(1, 5001), reward=lambda s: 9.0 if s == 3333 else s / 5000, loss=0.5)
    ingest_file(store, "r1", path)
    first = display.downsampled(store, "r1", max_points=300, smoothing=0.5)
    assert set(first) == {("train", "reward"), ("train", "loss")}
    reward = first[("train", "reward")]
    assert len(reward) <= 300 and reward.total == 5000 and 3333 in reward.steps.tolist()
    assert reward.values[reward.steps.tolist().index(3333)] == 9.0
    append_log(path, range(5001, 5101), reward=lambda s: -7.0 if s == 5050 else 1.0, loss=0.5)
    ingest_file(store, "r1", path)
    grown = display.downsampled(store, "r1", max_points=300, smoothing=0.5)[("train", "reward")]
    assert grown.total == 5100 and {3333, 5050} <= set(grown.steps.tolist())
    # The incrementally updated summary equals one built from scratch by a fresh store.
    cold = display.downsampled(Store(), "r1", max_points=300, smoothing=0.5)[("train", "reward")]
    assert list(grown.steps) == list(cold.steps)
    assert np.allclose(grown.smooth, cold.smooth, rtol=1e-12)


def test_store_downsampled_redoes_a_series_after_a_late_out_of_order_point(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, [s for s in range(1, 101) if s != 50], kl=0.1)
    ingest_file(store, "r1", path)
    before = display.downsampled(store, "r1", max_points=500)[("train", "kl")]
    assert before.total == 99 and 50 not in before.steps.tolist()
    append_log(path, [50], kl=3.0)
    ingest_file(store, "r1", path)
    after = display.downsampled(store, "r1", max_points=500)[("train", "kl")]
    assert after.total == 100 and list(after.steps) == list(range(1, 101))
    assert after.values[49] == 3.0


def test_store_downsampled_keeps_none_nan_inf_and_filters_keys(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    odd = {1: None, 2: math.nan, 3: math.inf}
    path.write_text(
        "".join(
            json.dumps(
                {
                    "type": "log",
                    "split": "train",
                    "step": s,
                    "time": float(s),
                    "metrics": {"entropy": odd.get(s, 1.0), "kl": 0.1},
                }
            )
            + "\n"
            for s in range(1, 6)
        )
    )
    ingest_file(store, "r1", path)
    pts = display.downsampled(store, "r1", keys=[("train", "entropy")])
    assert list(pts) == [("train", "entropy")]
    e = pts[("train", "entropy")]
    assert list(e.is_none) == [True, False, False, False, False]
    assert math.isnan(e.values[0]) and math.isnan(e.values[1]) and e.values[2] == math.inf


def test_evenly_spaced_steps_are_stored_compactly_and_read_back_exactly(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, range(10, 20_010, 10), loss=0.25)
    ingest_file(store, "r1", path)
    sizes = store.connection().execute("SELECT length(steps), n FROM chunks WHERE run_id = 'r1'").fetchall()
    assert all(size == 16 for size, n in sizes if n > 2)
    assert store.arrays("r1", "loss").steps.tolist() == list(range(10, 20_010, 10))
    # A late point inside an evenly spaced chunk turns it back into a raw steps blob, in order.
    append_log(path, [15], loss=0.75)
    ingest_file(store, "r1", path)
    steps = store.arrays("r1", "loss").steps.tolist()
    assert steps[:3] == [10, 15, 20] and len(steps) == 2001


@pytest.mark.parametrize("steps", [[5], [5, 9], [1, 2, 4], [3, 6, 9, 12], list(range(0, 4096, 4))])
def test_steps_blob_round_trip(steps: list[int]) -> None:
    arr = np.array(steps, dtype=np.int64)
    assert series_store.decode_steps(series_store.encode_steps(arr), len(arr)).tolist() == steps


def test_read_run_equals_per_series_reads(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, range(1, 3000), reward=lambda s: s * 0.5, kl=lambda s: None if s % 7 == 0 else s)
    ingest_file(store, "r1", path)
    everything = store.arrays_all("r1")
    for (split, key), arrays in everything.items():
        one = store.arrays("r1", key, split)
        assert arrays.steps.tolist() == one.steps.tolist()
        assert np.array_equal(arrays.values, one.values, equal_nan=True)
        assert arrays.is_none.tolist() == one.is_none.tolist()
    since = series_store.read_run(store.connection(), "r1", since={("train", "kl"): 2990})
    assert list(since) == [("train", "kl")] and since[("train", "kl")].steps.tolist() == list(range(2991, 3000))


def test_bulk_ingest_keeps_odd_values_per_column(tmp_path: Path) -> None:
    """One odd value in a column must not change how the other columns of the same records are stored."""
    store = Store()
    path = new_run(store, tmp_path)
    rows = [
        {"a": 1.5, "b": 2, "c": None, "d": "text", "e": True, "f": 10**400},
        {"a": 2.5, "b": 3, "c": 4.0, "d": 5.0, "e": False, "f": 1},
    ]
    path.write_text(
        "".join(
            json.dumps({"type": "log", "step": i + 1, "time": 1.0, "metrics": m}) + "\n" for i, m in enumerate(rows)
        )
    )
    result = ingest_file(store, "r1", path)
    assert result.records == 2 and result.skipped == 2  # "text" and the int beyond float range
    got = {k: [v for _, v, _ in store.series("r1", k)] for _, k in store.metric_keys("r1")}
    assert got == {"a": [1.5, 2.5], "b": [2.0, 3.0], "c": [None, 4.0], "d": [5.0], "e": [1.0, 0.0], "f": [1.0]}


def test_records_reassemble_sparse_train_and_eval_logs_in_step_order(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    lines = [
        {
            "type": "log",
            "split": "train",
            "step": s,
            "time": 1.0,
            "metrics": {"reward": s / 10, **({"kl": None} if s % 2 else {"kl": 0.5})},
        }
        for s in range(1, 7)
    ]
    lines.insert(3, {"type": "log", "split": "train", "step": 4, "time": 1.0, "metrics": {"entropy": 2.0}})
    lines.append({"type": "log", "split": "eval", "step": 4, "time": 1.0, "metrics": {"eval_reward": 0.9}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest_file(store, "r1", path)
    expected: dict[tuple[int, str], dict[str, Any]] = {}
    for split, key in store.metric_keys("r1"):
        for step, value, _ in store.series("r1", key, split):
            expected.setdefault((step, split), {"step": step})[key] = value
    order = sorted(expected, key=lambda k: (k[0], k[1] != "train"))
    assert store.records("r1") == [expected[k] for k in order]
    assert store.records("r1")[4] == {"step": 4, "eval_reward": 0.9}
    assert store.records("r1")[3] == {"step": 4, "entropy": 2.0, "kl": 0.5, "reward": 0.4}


def test_companion_series_rides_along_exactly_and_incrementally(tmp_path: Path) -> None:
    """A reward's std band at the mean's kept points: the std's EMA over its full series, cached across refreshes."""
    store = Store()
    path = new_run(store, tmp_path)
    mean_key, std_key = ("train", "rewards/acc/mean"), ("train", "rewards/acc/std")
    metrics = {
        "rewards/acc/mean": lambda s: math.sin(s / 50) + (5.0 if s == 777 else 0.0),
        "rewards/acc/std": lambda s: 0.1 + (s % 13) / 100,
    }
    append_log(path, range(1, 4001), **metrics)
    ingest_file(store, "r1", path)
    display.downsampled(store, "r1", 500, 0.6, companions={mean_key: std_key})
    append_log(path, range(4001, 4101), **metrics)
    ingest_file(store, "r1", path)
    pts = display.downsampled(store, "r1", 500, 0.6, companions={mean_key: std_key})[mean_key]
    std = store.arrays("r1", std_key[1])
    expected = dict(zip(std.steps.tolist(), reference_ema(std.values, 0.6).tolist(), strict=True))
    assert len(pts) <= 500 and 777 in pts.steps.tolist() and pts.steps[-1] == 4100
    assert pts.band == pytest.approx([expected[s] for s in pts.steps.tolist()], rel=1e-9)
    cold = display.downsampled(Store(), "r1", 500, 0.6, companions={mean_key: std_key})[mean_key]
    assert list(cold.steps) == list(pts.steps) and np.allclose(cold.band, pts.band, rtol=1e-12)
    # Without a companion, aux is NaN.
    assert np.isnan(display.downsampled(store, "r1", 500, 0.6)[mean_key].band).all()


def test_companion_missing_steps_give_nan(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    append_log(path, range(1, 11), kl=0.1)
    append_log(path, range(1, 11, 2), entropy=2.0)
    ingest_file(store, "r1", path)
    pts = display.downsampled(store, "r1", companions={("train", "kl"): ("train", "entropy")})[("train", "kl")]
    assert [not math.isnan(a) for a in pts.band] == [s % 2 == 1 for s in range(1, 11)]


def test_reward_band_from_the_store_equals_the_std_ema_at_the_mean_points(tmp_path: Path) -> None:
    from grpo_dashboard.views import charts

    store = Store()
    path = new_run(store, tmp_path)
    append_log(
        path,
        range(1, 6001),
        **{
            "rewards/acc/mean": lambda s: math.cos(s / 300),
            "rewards/acc/std": lambda s: 0.2 + (s % 7) / 50,
            "reward": 0.5,
        },
    )
    ingest_file(store, "r1", path)
    opts = charts.ChartOptions(smoothing=0.6)
    fig = charts.run_figures(store, "r1", opts)["reward"]
    lo, hi, smooth = (next(t for t in fig.data if t.name == n) for n in ("acc -std", "acc ±std", "acc"))
    std = store.arrays("r1", "rewards/acc/std")
    expected = dict(zip(std.steps.tolist(), reference_ema(std.values, 0.6).tolist(), strict=True))
    assert len(hi.x) <= opts.max_points
    assert (np.array(hi.y) - np.array(lo.y)) / 2 == pytest.approx([expected[int(s)] for s in hi.x], rel=1e-9)
    assert list(hi.x) == list(smooth.x)


def test_doctor_frame_from_store_columns_equals_the_one_from_records(tmp_path: Path) -> None:
    from grpo_dashboard.health.series import MetricFrame
    from grpo_dashboard.views import overview

    store = Store()
    path = new_run(store, tmp_path)
    lines = []
    for s in range(1, 301):
        metrics: dict[str, Any] = {
            "reward": math.sin(s / 10),
            "entropy": None if s % 50 == 0 else 2 - s / 300,
            "kl": math.nan if s == 10 else 0.01,
            "train/loss": 0.1,
        }
        if s % 3:
            metrics["grad_norm"] = math.inf if s == 40 else 0.5
        lines.append({"type": "log", "split": "train", "step": s, "time": 1.0, "metrics": metrics})
        if s % 100 == 0:  # an eval record, with a name that is also a train metric
            lines.append(
                {
                    "type": "log",
                    "split": "eval",
                    "step": s,
                    "time": 1.0,
                    "metrics": {"eval_reward": 0.7, "reward": 9.0},
                }
            )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest_file(store, "r1", path)
    expected = MetricFrame.from_records(store.records("r1"))
    got = overview.metric_frame(store, "r1")
    assert got.n_records == expected.n_records == 303
    assert set(got.columns) == set(expected.columns) == {"reward", "entropy", "kl", "loss", "grad_norm", "eval_reward"}
    for key, series in expected.columns.items():
        assert got.columns[key].steps.tolist() == series.steps.tolist()
        assert np.array_equal(got.columns[key].values, series.values, equal_nan=True)


def test_plot_json_equals_plotly_own_and_is_shared_per_run_state(tmp_path: Path) -> None:
    from grpo_dashboard.views import chart_json, charts

    store = Store()
    path = new_run(store, tmp_path)
    append_log(
        path,
        range(1, 2501),
        **{
            "rewards/acc/mean": lambda s: s % 11 / 11,
            "rewards/acc/std": 0.1,
            "reward": lambda s: s / 2500,
            "grad_norm": lambda s: math.inf if s == 9 else 1,
            "completions/mean_length": 8.0,
            "custom/x": lambda s: s % 5,
        },
    )
    ingest_file(store, "r1", path)
    for xaxis in charts.XAXES:
        opts = charts.ChartOptions(xaxis=xaxis)
        figs = charts.run_figures(store, "r1", opts, max_completion_length=16, started_at=1000.0)
        plots = chart_json.run_plots(store, "r1", opts, max_completion_length=16, started_at=1000.0)
        assert list(plots) == list(figs) == list(charts.PANEL_IDS)
        for pid, fig in figs.items():
            assert json.loads(plots[pid]) == json.loads(fig.to_json())
        again = chart_json.run_plots(store, "r1", opts, max_completion_length=16, started_at=1000.0)
        assert all(again[k] is plots[k] for k in plots)  # the same run state: shared, not rebuilt
    append_log(path, [2501], reward=0.5)
    ingest_file(store, "r1", path)
    moved = chart_json.run_plots(
        store, "r1", charts.ChartOptions(xaxis="relative time"), max_completion_length=16, started_at=1000.0
    )
    assert moved["reward"] is not plots["reward"] and moved["reward"] != plots["reward"]


def test_one_display_pipeline_whole_series_equals_the_live_cache_and_compare_reads(tmp_path: Path) -> None:
    """Run detail (cached, incremental), Compare (cached, one key) and a whole series reduced at once agree."""
    store = Store()
    path = new_run(store, tmp_path)
    metrics = {
        "rewards/acc/mean": lambda s: math.sin(s / 40) + (3.0 if s == 1999 else 0.0),
        "rewards/acc/std": lambda s: None if s % 101 == 0 else 0.1 + (s % 9) / 100,
        "loss": lambda s: 1 / s,
    }
    append_log(path, range(1, 3001), **metrics)
    ingest_file(store, "r1", path)
    display.run_series(store, "r1", 0.6, 500)
    append_log(path, range(3001, 3201), **metrics)
    ingest_file(store, "r1", path)
    live = display.run_series(store, "r1", 0.6, 500)
    whole = display.reduce_all(store.arrays_all("r1"), 500, 0.6)
    mean_key = ("train", "rewards/acc/mean")
    compared = display.downsampled(store, "r1", 500, 0.6, keys=[mean_key])[mean_key]
    assert set(live) == set(whole) and np.isfinite(live[mean_key].band).any()
    for k, got in live.items():
        assert got.total == whole[k].total == 3200 and list(got.steps) == list(whole[k].steps)
        assert np.allclose(got.smooth, whole[k].smooth, rtol=1e-12, equal_nan=True)
        assert np.allclose(got.band, whole[k].band, rtol=1e-12, equal_nan=True)
    assert list(compared.steps) == list(live[mean_key].steps) and 1999 in compared.steps.tolist()
    assert np.allclose(compared.smooth, live[mean_key].smooth, rtol=1e-12)
