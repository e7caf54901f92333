"""The forecast: fits on logs whose truth is known, on real logs, what it says when it cannot, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grpo_dashboard.health import diagnose
from grpo_dashboard.health.forecast import entropy_law, fit_reward_curve, forecast
from grpo_dashboard.health.forecast_cli import forecast_main
from grpo_dashboard.health.series import MetricFrame, Series

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real_logs"


def saturating_log(
    n: int = 120,
    plateau: float = 0.8,
    tau: float = 40.0,
    noise: float = 0.03,
    seed: int = 0,
    entropy: bool = True,
    step_time: float | None = 12.0,
) -> list[dict]:
    """Reward rising 0.1 -> `plateau` as an exponential approach; entropy following the entropy-reward law."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    mean = plateau - (plateau - 0.1) * np.exp(-(steps - 1) / tau)
    reward = mean + rng.normal(0, noise, n)
    # R = -a e^H + b  =>  H = ln((b - R) / a), with a = 0.05, b = 1.0: ceiling b - a = 0.95.
    h = np.log((1.0 - np.clip(mean, None, 0.94)) / 0.05)
    out = []
    for i, s in enumerate(steps):
        rec = {"step": int(s), "reward": float(reward[i])}
        if entropy:
            rec["entropy"] = float(h[i] + rng.normal(0, 0.01))
        if step_time is not None:
            rec["step_time"] = step_time
        out.append(rec)
    return out


def test_saturating_run_plateau_step_and_band_cover_the_truth() -> None:
    records = saturating_log()
    fc = forecast(MetricFrame.from_records(records), {"max_steps": 400})
    assert fc.curve is not None and fc.curve.members[int(np.argmax(fc.curve.weights))].model == "exp"
    p = fc.plateau_reward
    assert p["low"] <= 0.8 <= p["high"] and abs(p["value"] - 0.8) < 0.05
    true_95 = 1 + 40.0 * np.log(20)  # 95 % of the gain of the exponential approach
    assert fc.plateau_step["low"] - 20 <= true_95 <= fc.plateau_step["high"] + 20
    at_end = fc.reward_at_max_steps
    assert at_end["low"] <= 0.8 <= at_end["high"]
    assert fc.stop_step["value"] <= 400
    # From the first half only, the final reward is still forecast within the band.
    half = forecast(MetricFrame.from_records(records[:60]), {}, max_steps=400)
    assert half.reward_at_max_steps["low"] <= 0.8 <= half.reward_at_max_steps["high"]


def test_entropy_law_ceiling_matches_the_generating_law() -> None:
    frame = MetricFrame.from_records(saturating_log())
    law, why = entropy_law(frame.get("entropy"), frame.get("reward"))
    assert why is None and law["r2"] > 0.8
    assert abs(law["value"] - 0.95) < 0.1 and law["low"] <= law["value"] <= law["high"]
    assert 0 < law["reached"] <= 1


def test_cost_so_far_to_plateau_and_the_saving_of_stopping() -> None:
    fc = forecast(MetricFrame.from_records(saturating_log()), {"max_steps": 400}, price_per_hour=3.6)
    per_step = 3.6 * 12.0 / 3600
    assert fc.cost_so_far["value"] == pytest.approx(120 * per_step, rel=1e-3)
    assert fc.cost_to_max_steps["value"] == pytest.approx(280 * per_step, rel=1e-3)
    assert fc.saving["value"] > 0 and fc.saving["reward_loss"] < 0.05
    assert fc.cost_to_plateau is not None


def test_what_it_says_when_it_cannot_forecast() -> None:
    few = forecast(MetricFrame.from_records(saturating_log(n=5)), {})
    assert few.plateau_reward is None and "too few reward points (5" in few.reasons["plateau_reward"]
    assert "too few" in few.reasons["reward_ceiling"]
    no_entropy = forecast(MetricFrame.from_records(saturating_log(entropy=False)), {})
    assert no_entropy.reward_ceiling is None and "no entropy logged" in no_entropy.reasons["reward_ceiling"]
    flat_h = [{**r, "entropy": 2.0} for r in saturating_log()]
    fc = forecast(MetricFrame.from_records(flat_h), {})
    assert fc.reward_ceiling is None and "entropy is not falling" in fc.reasons["reward_ceiling"]
    assert fc.plateau_reward is not None  # the curve over steps does not need entropy
    no_price = forecast(MetricFrame.from_records(saturating_log()), {"max_steps": 400})
    assert no_price.cost_so_far is None and "no price known" in no_price.reasons["cost_so_far"]
    no_time = forecast(MetricFrame.from_records(saturating_log(step_time=None)), {}, price_per_hour=1.0)
    assert no_time.cost_so_far is None and "no timing" in no_time.reasons["cost_so_far"]
    curve, why = fit_reward_curve(np.array([1, 2, 2, 3, 4, 5, 6, 7, 8]), np.linspace(0, 1, 9))
    assert curve is None and "not strictly increasing" in why
    law, why = entropy_law(
        Series("entropy", np.arange(10), np.linspace(3, 1, 10)),
        Series("reward", np.arange(10), np.linspace(0.9, 0.1, 10)),
    )
    assert law is None and "does not rise as entropy falls" in why


def test_flat_run_forecasts_no_gain_and_the_doctor_says_stop() -> None:
    rng = np.random.default_rng(3)
    records = [{"step": s, "reward": 0.5 + rng.normal(0, 0.02)} for s in range(1, 81)]
    fc = forecast(MetricFrame.from_records(records), {}, max_steps=500)
    assert abs(fc.reward_at_max_steps["value"] - 0.5) < 0.05
    (stop,) = [f for f in diagnose(records, {"max_steps": 500}) if f.rule == "forecast_stop"]
    assert stop.severity == "info" and "not worth it" in stop.message and stop.evidence["steps_left"] == 420
    rising = saturating_log(tau=400.0)
    assert not [f for f in diagnose(rising, {"max_steps": 500}) if f.rule == "forecast_stop"]
    assert not [f for f in diagnose(records) if f.rule == "forecast_stop"]  # max_steps unknown: nothing to say


# "Keep the last checkpoint" is only advice on a run that has saved one; stopping a run that saves none keeps nothing.
@pytest.mark.parametrize(
    ("saving", "says"),
    [
        ({"save_strategy": "no"}, "has saved no checkpoint by step 80 (now no), so stopping it keeps nothing"),
        ({"save_strategy": "steps", "save_steps": 100}, "has saved no checkpoint by step 80 (now steps)"),
        ({"save_strategy": "steps", "save_steps": 0.1}, "Stop here and keep the last checkpoint;"),
        ({"save_strategy": "steps", "save_steps": 50}, "Stop here and keep the last checkpoint;"),
        ({}, "keep the last checkpoint (if the run saves them"),
    ],
)
def test_the_stop_advice_follows_the_runs_checkpoints(saving: dict, says: str) -> None:
    rng = np.random.default_rng(3)
    records = [{"step": s, "reward": 0.5 + rng.normal(0, 0.02)} for s in range(1, 81)]
    (stop,) = [f for f in diagnose(records, {"max_steps": 500, **saving}) if f.rule == "forecast_stop"]
    assert says in stop.remedy, stop.remedy
    assert ("keep the last checkpoint" in stop.remedy) == ("saved no checkpoint" not in stop.remedy)


def test_a_run_that_rose_then_levelled_off_is_forecast_at_its_recent_level() -> None:
    # A climb, then a long noisy level: the held-flat recent mean predicted the held-out fifth best, and its
    # weight grows with the square of how much better it did.
    rng = np.random.default_rng(5)
    steps = np.arange(1, 201)
    mean = np.where(steps < 40, 0.2 + 0.5 * steps / 40, 0.7)
    records = [{"step": int(s), "reward": float(m + rng.normal(0, 0.05))} for s, m in zip(steps, mean, strict=True)]
    fc = forecast(MetricFrame.from_records(records), {}, max_steps=1000)
    weights = dict(zip([m.model for m in fc.curve.members], fc.curve.weights, strict=True))
    errors = {m.model: m.holdout_rmse for m in fc.curve.members}
    assert weights["level"] > weights["const"]
    ratio = weights["level"] / weights["const"]
    assert ratio == pytest.approx((errors["const"] / errors["level"]) ** 2, rel=1e-6)
    assert abs(fc.reward_at_max_steps["value"] - 0.7) < 0.03


def test_a_straight_climb_is_not_extrapolated_to_an_absurd_plateau() -> None:
    # A saturating family fitted to a straight line puts its plateau as far away as the grid allows; plateaus more
    # than half the logged range beyond the data are refused, so the forecast stays near what was seen.
    records = [{"step": s, "reward": 0.005 * s} for s in range(1, 101)]
    fc = forecast(MetricFrame.from_records(records), {}, max_steps=1000)
    assert all(m.plateau <= 0.5 + 0.5 * 0.495 + 1e-9 for m in fc.curve.members)
    assert fc.plateau_reward["value"] <= 0.75 and fc.reward_at_max_steps["value"] <= 0.75


def _write(tmp_path: Path, records: list[dict], name: str = "log.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_cli_json_keys_at_step_and_price(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path, saturating_log())
    assert (
        forecast_main([str(log), "--json", "--at-step", "300", "--max-steps", "400", "--price-per-hour", "2.5"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    for key in (
        "reward_ceiling",
        "plateau_reward",
        "plateau_step",
        "stop_step",
        "reward_at_step",
        "cost_so_far",
        "cost_to_plateau",
    ):
        assert set(out[key]) >= {"value", "low", "high"}, key
        assert out[key]["low"] <= out[key]["value"] <= out[key]["high"]
    assert out["price_per_hour"] == 2.5 and out["max_steps"] == 400
    assert forecast_main([str(log), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "reward_at_step" not in out and out["cost_so_far"] is None and "no price" in out["reasons"]["cost_so_far"]


def test_cli_short_log_says_why_and_unreadable_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = REAL / "JuncyLu__trl_DAPO__training_logs-20251022_181457-run_terminal.jsonl"
    assert forecast_main([str(short), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plateau_reward"] is None and "too few reward points (3" in out["reasons"]["plateau_reward"]
    assert forecast_main([str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\nstill not\n")
    assert forecast_main([str(bad)]) == 2
    assert forecast_main([str(short), "--at-step", "0"]) == 2
    assert "--at-step must be a step >= 1" in capsys.readouterr().err
    back = _write(tmp_path, saturating_log(n=30) + saturating_log(n=30), "resumed.jsonl")
    assert forecast_main([str(back), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plateau_reward"] is None and "goes backwards" in out["reasons"]["plateau_reward"]


def test_python_m_grpo_dashboard_forecast_with_a_jobs_flavor(tmp_path: Path) -> None:
    log = _write(tmp_path, saturating_log())
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    cmd = [
        sys.executable,
        "-m",
        "grpo_dashboard",
        "forecast",
        str(log),
        "--max-steps",
        "400",
        "--flavor",
        "a10g-small",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "plateau reward" in result.stdout and "(a10g-small, built-in price)" in result.stdout
    assert "stopping at step" in result.stdout and "cost so far" in result.stdout
    bad = subprocess.run(cmd[:-1] + ["no-such-flavor"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert bad.returncode == 2 and "unknown HF Jobs flavor 'no-such-flavor'" in bad.stderr


def test_run_detail_panel_runs_table_column_and_chart_overlay(tmp_path: Path) -> None:
    """The forecast on a stored run: the Run detail panel, the runs table's column and the fitted curves drawn over
    the reward and entropy charts."""
    from grpo_dashboard.store.db import Store
    from grpo_dashboard.store.ingest import ingest_file
    from grpo_dashboard.views import chart_json, charts, overview
    from grpo_dashboard.views import forecast as forecast_view

    from .store_helpers import append_log, new_run

    store = Store(tmp_path / "db.sqlite")
    log = new_run(store, tmp_path, "r1")
    rows = {r["step"]: r for r in saturating_log()}
    append_log(log, range(1, 121), **{k: (lambda s, k=k: rows[s][k]) for k in ("reward", "entropy", "step_time")})
    ingest_file(store, "r1", log)
    run = store.get_run("r1")
    panel = forecast_view.panel_markdown(store, run)
    assert "**Forecast**" in panel and "Plateau reward" in panel and "Reward ceiling" in panel and "R²" in panel
    assert forecast_view.forecast_cell(store, run).startswith("0.")
    frame = overview.runs_frame(store)
    assert "forecast" in frame.columns and frame.loc[0, "forecast"] == forecast_view.forecast_cell(store, run)
    plots = chart_json.run_plots(store, "r1", charts.ChartOptions())
    drawn = forecast_view.overlay_plots(plots, store, run, "step")
    reward = json.loads(drawn["reward"])
    names = [t.get("name") for t in reward["data"]]
    assert "forecast (fit)" in names and "ceiling (entropy law)" in names
    assert any(a["text"].startswith("stop ") for a in reward["layout"]["annotations"])
    assert any("entropy the forecast needs" in (t.get("name") or "") for t in json.loads(drawn["entropy"])["data"])
    assert forecast_view.overlay_plots(plots, store, run, "wall time") == plots
    empty = new_run(store, tmp_path, "r2")
    append_log(empty, range(1, 4), reward=0.5)
    ingest_file(store, "r2", empty)
    short = store.get_run("r2")
    assert forecast_view.forecast_cell(store, short) == "—"
    assert "too few reward points" in forecast_view.panel_markdown(store, short)


def test_a_run_that_collapsed_and_recovered_says_its_confidence_is_low() -> None:
    """The shared-corpus shape (exp1a rho1.00 seed 43): 0.9 for 7 logs, a collapse to 0.02-0.08, back to 0.9; the
    final collapse comes after the cut. The forecast from the cut says its confidence is low and its band reaches
    the reward's floor, so it covers a second collapse; a noisy flat run with no such fall keeps normal confidence."""
    rng = np.random.default_rng(1)
    y = np.concatenate((np.full(7, 0.88), [0.08, 0.02, 0.05], np.full(10, 0.88))) + rng.normal(0, 0.04, 20)
    records = [{"step": 5 * (i + 1), "reward": float(v)} for i, v in enumerate(y)]
    fc = forecast(MetricFrame.from_records(records), max_steps=200)
    assert fc.confidence == "low" and "collapsed once and recovered" in fc.reasons["confidence"]
    band = fc.reward_at_max_steps
    assert band is not None and band["low"] <= 0.0 <= 0.9 <= band["high"]
    assert fc.to_dict()["confidence"] == "low"
    flat = [{"step": 5 * (i + 1), "reward": float(0.5 + rng.normal(0, 0.1))} for i in range(40)]
    assert forecast(MetricFrame.from_records(flat), max_steps=400).confidence == "normal"


def test_binned_means_are_the_means_of_array_splits_groups() -> None:
    """The fit's bins are the means of np.array_split's equal-count groups, exactly, for any length past the cap."""
    from grpo_dashboard.health.fits import binned

    rng = np.random.default_rng(3)
    for n, bins in ((201, 200), (1000, 200), (12_345, 200), (10, 3), (64, 64), (65, 7)):
        x, y = np.arange(n, dtype=float) * 2.5, rng.normal(size=n)
        bx, by = binned(x, y, bins)
        groups = np.array_split(np.arange(n), bins)
        assert bx.size == by.size == bins
        assert np.array_equal(bx, [x[g].mean() for g in groups])
        assert np.array_equal(by, [y[g].mean() for g in groups])
