"""Chart data and figures without gradio: smoothing, downsampling, panel grouping and plotly traces."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from grpo_dashboard.store.db import Run, RunStatus, Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.store.series import SeriesArrays
from grpo_dashboard.views import charts, display, downsample

from .store_helpers import reference_ema

# One real CPU step's metrics (trl_grpo.md §2.3) plus kl and an eval record's keys.
TRL_KEYS = [
    "loss",
    "grad_norm",
    "learning_rate",
    "num_tokens",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "rewards/count_letter/mean",
    "rewards/count_letter/std",
    "rewards/maybe_none/mean",
    "rewards/maybe_none/std",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "custom/mean_len_chars",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_max",
    "step_time",
    "epoch",
    "kl",
    "train_runtime",
]
EVAL_KEYS = ["eval_loss", "eval_reward", "eval_kl", "eval_runtime", "eval_rewards/count_letter/mean"]


def frame(values: list[float | None], times: list[float] | None = None, start: int = 1) -> SeriesArrays:
    steps = list(range(start, start + len(values)))
    return SeriesArrays.from_rows(zip(steps, values, times or [1000.0 + s for s in steps], strict=True))


def ema(values: list[float] | np.ndarray, weight: float) -> np.ndarray:
    """The charts' EMA over a whole series (`downsample.ema` from a fresh start)."""
    return downsample.ema(np.asarray(values, dtype=float), weight)[0]


def test_ema_matches_tensorboard_debiased_formula() -> None:
    out = ema([1.0, 2.0, 3.0], 0.5)
    assert out == pytest.approx([1.0, 1.25 / 0.75, 2.125 / 0.875])
    assert ema([5.0] * 10, 0.9) == pytest.approx([5.0] * 10)  # debiasing: no ramp from zero
    assert list(ema([1.0, 2.0], 0.0)) == [1.0, 2.0]


@pytest.mark.parametrize("weight", [0.01, 0.3, 0.6, 0.9, 0.99, 0.999])
def test_vectorised_ema_matches_the_loop_across_blocks(weight: float) -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(0, 1, 5000) + np.linspace(0, 5, 5000)
    values[[10, 1000, 4321]] = np.nan
    values[777] = np.inf
    got = ema(values, weight)
    want = np.array(reference_ema(list(values), weight))
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)
    assert np.isinf(got[777])


def test_ema_passes_nan_through_without_poisoning_later_values() -> None:
    out = ema([1.0, math.nan, 1.0, math.inf, 1.0], 0.6)
    assert math.isnan(out[1]) and math.isinf(out[3])
    assert out[[0, 2, 4]] == pytest.approx([1.0, 1.0, 1.0])


def test_downsample_keeps_spikes_and_caps_points() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(0, 1, 100_000)
    values[54_321] = 500.0
    values[77_777] = -400.0
    keep = downsample.minmax_indices(values, 2000)
    assert len(keep) <= 2000
    assert 54_321 in keep and 77_777 in keep
    assert list(keep) == sorted(set(keep))
    assert list(downsample.minmax_indices(values[:1500], 2000)) == list(range(1500))


def test_downsample_keeps_a_nan_gap_visible() -> None:
    values = np.ones(10_000)
    values[5000] = np.nan
    keep = downsample.minmax_indices(values, 2000)
    assert len(keep) <= 2000 and 5000 in keep


def test_series_from_rows_turns_none_into_nan_and_sorts() -> None:
    f = SeriesArrays.from_rows([(3, 1.0, 3.0), (1, None, 1.0), (2, float("nan"), None)])
    assert list(f.steps) == [1, 2, 3]
    assert np.isnan(f.values).tolist() == [True, True, False]
    assert len(SeriesArrays.from_rows([])) == 0


def test_group_metrics_sorts_trl_keys_into_panels() -> None:
    keys = [("train", k) for k in TRL_KEYS] + [("eval", k) for k in EVAL_KEYS]
    groups = charts.group_metrics(keys)
    assert groups["reward"] == ["rewards/count_letter/mean", "rewards/maybe_none/mean", "reward"]
    assert groups["reward_spread"] == ["frac_reward_zero_std", "reward_std"]
    assert groups["kl"] == ["kl"]
    assert set(groups["clip"]) == {
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "clip_ratio/region_mean",
        "clip_ratio/low_min",
        "clip_ratio/high_max",
    }
    assert groups["length"] == [
        "completions/mean_length",
        "completions/min_length",
        "completions/max_length",
        "completions/clipped_ratio",
    ]
    assert groups["loss"] == ["loss"]
    assert groups["log_metric"] == ["custom/mean_len_chars"]  # a reward function's log_metric: its own panel
    assert "num_tokens" in groups["other"]
    everything = [k for ks in groups.values() for k in ks]
    assert not {"epoch", "train_runtime", "rewards/count_letter/std", "eval_runtime"} & set(everything)


def test_eval_only_metric_gets_a_line_on_its_twin_panel() -> None:
    groups = charts.group_metrics([("train", "reward"), ("eval", "eval_entropy")])
    assert groups["entropy"] == ["entropy"]


def test_reward_panel_has_band_raw_smoothed_and_eval_overlay() -> None:
    frames = {
        ("train", "rewards/acc/mean"): frame([0.1, 0.2, 0.3, 0.4]),
        ("train", "rewards/acc/std"): frame([0.05, 0.05, 0.05, 0.05]),
        ("train", "reward"): frame([0.1, 0.2, 0.3, 0.4]),
        ("eval", "eval_rewards/acc/mean"): frame([0.15, 0.35], start=2),
    }
    groups = charts.group_metrics(frames.keys())
    fig = charts.panel_figure("reward", groups["reward"], frames, charts.ChartOptions(smoothing=0.5))
    names = [t.name for t in fig.data]
    assert names[:4] == ["acc -std", "acc ±std", "acc (raw)", "acc"]
    band_lo, band_hi = fig.data[0], fig.data[1]
    assert band_hi.fill == "tonexty"
    assert np.array(band_hi.y) - np.array(band_lo.y) == pytest.approx([0.1] * 4)
    smoothed = np.array(fig.data[3].y, dtype=float)
    assert np.array(band_hi.y) - smoothed == pytest.approx([0.05] * 4)
    assert np.array(fig.data[2].y, dtype=float) == pytest.approx([0.1, 0.2, 0.3, 0.4])  # raw stays visible
    eval_trace = next(t for t in fig.data if t.name == "eval acc")
    assert list(eval_trace.x) == [2, 3] and eval_trace.line.dash == "dot"
    assert any(t.name == "reward (weighted sum)" for t in fig.data)


def test_kl_panel_explains_missing_kl_when_beta_is_zero() -> None:
    fig = charts.panel_figure("kl", [], {}, charts.ChartOptions(), beta=0.0)
    assert not fig.data
    assert "KL not logged: beta is 0" in fig.layout.annotations[0].text
    fig = charts.panel_figure("kl", [], {}, charts.ChartOptions(), beta=0.04)
    assert "not logged yet" in fig.layout.annotations[0].text


def test_length_panel_draws_max_completion_length_and_clipped_ratio_on_right_axis() -> None:
    frames = {
        ("train", "completions/mean_length"): frame([5.0, 6.0]),
        ("train", "completions/clipped_ratio"): frame([0.5, 0.25]),
    }
    fig = charts.panel_figure(
        "length",
        charts.group_metrics(frames.keys())["length"],
        frames,
        charts.ChartOptions(smoothing=0),
        max_completion_length=12,
    )
    assert [s.y0 for s in fig.layout.shapes] == [12]
    clipped = next(t for t in fig.data if t.name == "clipped_ratio")
    assert clipped.yaxis == "y2" and fig.layout.yaxis2.overlaying == "y"
    assert len(fig.data) == 2  # smoothing 0: no separate raw traces


def test_long_series_is_downsampled_per_line_and_spike_survives() -> None:
    n = 50_000
    values = [0.5] * n
    values[31_000] = 9.0
    frames = {("train", "grad_norm"): frame(values)}
    fig = charts.panel_figure("grad_norm", ["grad_norm"], frames, charts.ChartOptions(smoothing=0.9))
    assert all(len(t.x) <= display.MAX_POINTS for t in fig.data)
    raw = next(t for t in fig.data if t.name.endswith("(raw)"))
    assert max(v for v in raw.y if v is not None) == 9.0


def test_log_scale_and_time_axes() -> None:
    frames = {("train", "loss"): frame([1.0, 0.1, 0.01], times=[1000.0, 1060.0, 1180.0])}
    fig = charts.panel_figure(
        "loss", ["loss"], frames, charts.ChartOptions(log_y=True, xaxis="relative time"), t0=1000.0
    )
    assert fig.layout.yaxis.type == "log"
    assert list(fig.data[-1].x) == pytest.approx([0.0, 1.0, 3.0])
    fig = charts.panel_figure("loss", ["loss"], frames, charts.ChartOptions(xaxis="wall time"))
    assert str(np.asarray(fig.data[-1].x).dtype).startswith("datetime64") or isinstance(fig.data[-1].x[0], str)


def test_nan_and_inf_become_gaps_in_plotted_values() -> None:
    frames = {("train", "loss"): frame([1.0, float("nan"), float("inf"), 2.0])}
    fig = charts.panel_figure("loss", ["loss"], frames, charts.ChartOptions(smoothing=0))
    y = np.asarray(fig.data[0].y, dtype=float)
    assert y[0] == 1.0 and y[3] == 2.0 and np.isnan(y[1:3]).all()  # NaN: plotly leaves a gap


def test_overlay_figure_one_line_per_run() -> None:
    fig = charts.overlay_figure(
        "reward", [("a", frame([0.1, 0.2])), ("b", frame([0.3, 0.4]))], charts.ChartOptions(smoothing=0)
    )
    assert [t.name for t in fig.data] == ["a", "b"]
    empty = charts.overlay_figure("reward", [], charts.ChartOptions())
    assert not empty.data


def test_run_figures_from_a_real_store(data_dir: Path) -> None:
    store = Store()
    run_dir = data_dir / "runs" / "r1"
    run_dir.mkdir(parents=True)
    store.insert_run(
        Run(
            id="r1",
            name="r1",
            spec_yaml="name: r1\n",
            backend="local",
            status=RunStatus.RUNNING.value,
            created_at=time.time(),
            run_dir=str(run_dir),
        )
    )
    lines = []
    for step in range(1, 31):
        metrics = {
            "reward": step / 30,
            "rewards/fmt/mean": step / 30,
            "rewards/fmt/std": 0.1,
            "loss": 0.01,
            "entropy": 2.0 - step / 30,
            "completions/mean_length": 8.0,
            "epoch": step / 10,
        }
        lines.append({"type": "log", "split": "train", "step": step, "time": 1000.0 + step, "metrics": metrics})
    lines.append({"type": "log", "split": "eval", "step": 30, "time": 1031.0, "metrics": {"eval_reward": 0.7}})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest_file(store, "r1", run_dir / "metrics.jsonl")
    figs = charts.run_figures(store, "r1", charts.ChartOptions(), beta=0.0, max_completion_length=16)
    assert list(figs) == list(charts.PANEL_IDS)
    assert charts.count_points(figs["reward"]) == 30
    assert "beta is 0" in figs["kl"].layout.annotations[0].text
    assert any(t.name == "eval reward (weighted sum)" for t in figs["reward"].data)
    json.dumps(figs["reward"].to_plotly_json(), default=str)  # serialisable for gr.Plot
    # The pages draw with plotly.js's basic bundle (ui/static/plotly-basic.min.js): scatter, bar and pie only.
    assert {t.type for fig in figs.values() for t in fig.data} <= {"scatter", "bar", "pie"}
    bundle = (Path(charts.__file__).parents[1] / "ui" / "static" / "plotly-basic.min.js").read_text()[:200]
    assert "plotly.js (basic - minified) v4." in bundle and "MIT license" in bundle


def test_store_summaries_keep_spikes_and_full_series_smoothing(data_dir: Path) -> None:
    store = Store()
    run_dir = data_dir / "runs" / "r2"
    run_dir.mkdir(parents=True)
    store.insert_run(
        Run(
            id="r2",
            name="r2",
            spec_yaml="name: r2\n",
            backend="local",
            status=RunStatus.RUNNING.value,
            created_at=time.time(),
            run_dir=str(run_dir),
        )
    )
    rng = np.random.default_rng(3)
    grad = rng.uniform(0.5, 1.0, 5000)
    grad[3210] = 40.0
    grad[100] = np.nan
    std = rng.uniform(0.0, 0.1, 5000)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i in range(5000):
            value = None if np.isnan(grad[i]) else float(grad[i])
            metrics = {"grad_norm": value, "rewards/r/mean": float(grad[i] / 2), "rewards/r/std": float(std[i])}
            f.write(
                json.dumps({"type": "log", "split": "train", "step": i + 1, "time": 1000.0 + i, "metrics": metrics})
                + "\n"
            )
    ingest_file(store, "r2", run_dir / "metrics.jsonl")
    opts = charts.ChartOptions(smoothing=0.9, max_points=500)
    figs = charts.run_figures(store, "r2", opts)
    assert all(len(t.x) <= 500 for fig in figs.values() for t in fig.data)
    grad_fig = figs["grad_norm"]
    raw = next(t for t in grad_fig.data if t.name.endswith("(raw)"))
    assert np.nanmax(np.asarray(raw.y, dtype=float)) == 40.0
    smoothed = next(t for t in grad_fig.data if t.name == "grad_norm")
    full = ema(np.where(np.isnan(grad), np.nan, grad), 0.9)
    steps = np.asarray(smoothed.x, dtype=int)
    ys = np.asarray(smoothed.y, dtype=float)
    ok = np.isfinite(ys)
    assert np.allclose(ys[ok], full[steps[ok] - 1], rtol=1e-6)  # EMA of every point, shown at the kept ones
    band = next(t for t in figs["reward"].data if t.name == "r ±std")
    assert 0 < len(band.x) <= 500


def test_clip_panel_explains_all_zero_ratios() -> None:
    frames = {
        ("train", "clip_ratio/low_mean"): frame([0.0, 0.0]),
        ("train", "clip_ratio/high_mean"): frame([0.0, 0.0]),
    }
    fig = charts.panel_figure("clip", ["clip_ratio/high_mean", "clip_ratio/low_mean"], frames, charts.ChartOptions())
    assert "on-policy" in fig.layout.annotations[0].text
    frames[("train", "clip_ratio/low_mean")] = frame([0.0, 0.1])
    fig = charts.panel_figure("clip", ["clip_ratio/high_mean", "clip_ratio/low_mean"], frames, charts.ChartOptions())
    assert not fig.layout.annotations


def test_learning_rate_is_never_smoothed() -> None:
    frames = {("train", "learning_rate"): frame([1e-3, 9e-4, 8e-4])}
    fig = charts.panel_figure("learning_rate", ["learning_rate"], frames, charts.ChartOptions(smoothing=0.9))
    assert len(fig.data) == 1 and list(fig.data[0].y) == pytest.approx([1e-3, 9e-4, 8e-4])


def test_a_panels_note_is_wrapped_to_fit_a_narrow_chart() -> None:
    from grpo_dashboard.views.charts import NOTE_WIDTH, empty_figure

    note = "no system samples (yet): the job samples them at each log, its GPUs also between logs"
    text = empty_figure("System", note).layout.annotations[0].text
    lines = text.split("<br>")
    assert len(lines) >= 2 and all(len(line) <= NOTE_WIDTH for line in lines), lines
    assert " ".join(lines) == note
    assert empty_figure("x", "short note").layout.annotations[0].text == "short note"
    assert empty_figure("x", "a<br>b").layout.annotations[0].text == "a<br>b"
