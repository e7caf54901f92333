"""The forecast panel of Run detail and the runs table's forecast column: health.forecast on a stored run."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from grpo_dashboard.store.db import Run, Store, StoreError, token_text

from .memo import LruCache
from .run_data import metric_frame, run_spec

_CACHE: LruCache[tuple[str, str], tuple[tuple[Any, ...], Any, float]] = LruCache(64)
PANEL_MIN_INTERVAL_S = 5.0  # a live run's forecast (with its bootstrap) is refitted at most this often


def run_price(run: Run) -> float | None:
    """USD per hour of an HF Jobs run's flavor (built-in price table; the live list is read where prices are shown
    on demand, not on every page tick); None for local and Slurm runs (a user-set price goes to the CLI)."""
    from grpo_dashboard.spec.flavors import BUILTIN_FLAVORS

    spec = run_spec(run)
    flavor = getattr(getattr(spec, "backend", None), "flavor", None) if spec is not None else None
    chosen = BUILTIN_FLAVORS.get(flavor) if flavor else None
    return chosen.price_per_hour if chosen is not None else None


def run_forecast(store: Store, run: Run, price_per_hour: float | None = None) -> Any:
    """health.forecast for a stored run (cached per change token); None without the doctor or without records."""
    if not run.n_records:
        return None
    try:
        from grpo_dashboard.health.forecast import forecast
    except ImportError:
        return None
    token = store.change_token(run.id)
    key = (str(store.path), f"{run.id}:{price_per_hour}")
    cached = _CACHE.get(key)
    if cached is not None and (
        cached[0] == token or (run.is_active and time.monotonic() - cached[2] < PANEL_MIN_INTERVAL_S)
    ):
        return cached[1]
    hints: dict[str, Any] = {}
    if run.max_steps:
        hints["max_steps"] = run.max_steps
    if run.started_at and run.last_time:
        hints["elapsed_s"] = max(0.0, run.last_time - run.started_at)
    price = price_per_hour if price_per_hour is not None else run_price(run)
    fc = forecast(metric_frame(store, run.id), hints, price_per_hour=price)
    within_plan(fc)
    _CACHE.put(key, (token, fc, time.monotonic()))
    return fc


def within_plan(fc: Any) -> Any:
    """The forecast's stop step held to the run's plan: never past `max_steps` (a run that reached its end is
    stopped there, whatever the fit's own 99 % step says), so the panel's table and the chart's marker show one
    recommendation inside the run. Returns `fc`, changed in place."""
    stop = getattr(fc, "stop_step", None)
    if stop and fc.max_steps and stop.get("value") is not None and stop["value"] > fc.max_steps:
        fc.stop_step = {"value": fc.max_steps, "low": fc.max_steps, "high": fc.max_steps}
    return fc


def _band(b: dict[str, Any] | None, digits: int = 3, unit: str = "") -> str:
    if b is None:
        return "—"
    v, lo, hi = b["value"], b["low"], b["high"]
    if isinstance(v, int):
        return f"{unit}{v}" + (f" ({unit}{lo}–{unit}{hi})" if lo != hi else "")
    return f"{unit}{v:.{digits}g}" + (f" ({unit}{lo:.{digits}g}–{unit}{hi:.{digits}g})" if lo != hi else "")


def forecast_markdown(fc: Any) -> str:
    """The forecast panel: ceiling, plateau, 95 % step, stop step, reward at max_steps, cost; why where it cannot."""
    if fc is None:
        return ""
    from grpo_dashboard.health.forecast import SUMMARY

    why = fc.reasons
    shown = (
        "reward_ceiling",
        "plateau_reward",
        "plateau_step",
        "stop_step",
        "reward_at_max_steps",
        "cost_so_far",
        "cost_to_plateau",
    )
    rows = [
        (
            label[:1].upper() + label[1:] + (f" ({fc.max_steps or '?'})" if key == "reward_at_max_steps" else ""),
            getattr(fc, key),
            key,
            unit,
        )
        for key, label, unit in SUMMARY
        if key in shown
    ]
    lines = [
        f"**Forecast** ({fc.source} reward" + (f", {fc.curve.model} fit" if fc.curve else "") + ")",
        "",
        "| | forecast (90 % band) |",
        "|---|---|",
    ]
    for label, band, key, unit in rows:
        text = _band(band, unit=unit) if band is not None else f"— {_page_reason(why.get(key, ''))}"
        if key == "reward_ceiling" and fc.law:
            text += f"; R² {fc.law['r2']}" + (f", {fc.law['reached']:.0%} reached" if fc.law.get("reached") else "")
        lines.append(f"| {label} | {text} |")
    if fc.saving:
        lines.append(
            f"\nStopping at step {fc.saving['at_step']} would save ${fc.saving['value']:.2f} for an "
            f"expected loss of {fc.saving['reward_loss']:.3g} reward."
        )
    return "\n".join(lines)


CLI_PRICE_HINT = "pass --flavor for HF Jobs or --price-per-hour"
PAGE_PRICE_HINT = "type the hardware's price per hour in the Cost field"


def _page_reason(reason: str) -> str:
    """A forecast's reason as the run page says it: the page has a price field, not the CLI's flags."""
    return reason.replace(CLI_PRICE_HINT, PAGE_PRICE_HINT)


def cost_markdown(store: Store, run: Run, price_per_hour: float | None) -> str:
    """The forecast's cost rows at `price_per_hour` (USD per hour of the run's hardware, all GPUs): so far, to the
    plateau, to max_steps and what stopping at the recommended step saves; why where it cannot say."""
    if price_per_hour is None:
        return "Type the price per hour of the run's hardware (all GPUs, USD) to see what the run costs."
    if not isinstance(price_per_hour, (int, float)) or not price_per_hour >= 0:
        return f"✖ **price per hour** = {price_per_hour!r}: must be a number ≥ 0 (USD per hour, all GPUs)."
    fc = run_forecast(store, run, price_per_hour=float(price_per_hour))
    if fc is None:
        return "No metrics logged yet: nothing to cost."
    rows = [
        ("Cost so far", fc.cost_so_far, "cost_so_far"),
        ("Cost to the plateau", fc.cost_to_plateau, "cost_to_plateau"),
        ("Cost to max_steps", fc.cost_to_max_steps, "cost_to_max_steps"),
    ]
    lines = [f"**Cost at ${price_per_hour:g}/h**", "", "| | forecast (90 % band) |", "|---|---|"]
    for label, band, key in rows:
        text = _band(band, unit="$", digits=3) if band is not None else f"— {_page_reason(fc.reasons.get(key, ''))}"
        lines.append(f"| {label} | {text} |")
    if fc.saving:
        lines.append(
            f"\nStopping at step {fc.saving['at_step']} would save ${fc.saving['value']:.2f} for an expected loss of "
            f"{fc.saving['reward_loss']:.3g} reward."
        )
    return "\n".join(lines)


_CELLS: LruCache[tuple[str, str], tuple[tuple[Any, ...], float, str]] = LruCache(512)
CELL_MIN_INTERVAL_S = 30.0
CELL_KEYS = (
    "reward",
    "eval_reward",
)  # what `health.forecast.reward_series` reads  # a live run's forecast cell is refitted at most this often


def forecast_cell(store: Store, run: Run, saved: dict[str, tuple[str, str]] | None = None) -> str:
    """The runs table's forecast column: `0.42 by 360` (plateau reward, 95 % step), `flat 0.5`, or `—`.

    Kept in the store for finished runs (like the health badge) and refitted at most every CELL_MIN_INTERVAL_S
    for live ones, so a table of hundreds of runs fits nothing on most loads; `saved`: `store.forecast_cells()`.
    """
    if not run.n_records:
        return "—"
    token = store.change_token(run.id)
    known = (saved if saved is not None else store.forecast_cells()).get(run.id)
    if known is not None and known[0] == token_text(token):
        return known[1]
    key = (str(store.path), run.id)
    cached = _CELLS.get(key)
    if cached is not None and (
        cached[0] == token or (run.is_active and time.monotonic() - cached[1] < CELL_MIN_INTERVAL_S)
    ):
        return cached[2]
    try:
        cell = _cell(store, run)
    except Exception:  # a forecast must never break the runs table
        cell = "—"
    _CELLS.put(key, (token, time.monotonic(), cell))
    if not run.is_active:
        try:
            store.save_forecast_cell(run.id, token, cell)
        except StoreError:  # a read-only data directory: the cell is only recomputed next time
            pass
    return cell


def _cell(store: Store, run: Run) -> str:
    from grpo_dashboard.health.fits import FLAT_MODELS
    from grpo_dashboard.health.forecast import forecast
    from grpo_dashboard.health.series import MetricFrame

    # The cell's numbers (plateau, its step, the fitted family) come from the reward series alone; the rest of the
    # frame would only feed the entropy law and the cost, which the cell does not show.
    whole = metric_frame(store, run.id)
    frame = MetricFrame({k: v for k, v in whole.columns.items() if k in CELL_KEYS}, whole.n_records)
    fc = forecast(frame, {"max_steps": run.max_steps} if run.max_steps else {}, bootstrap=False)
    if fc.plateau_reward is None:
        return "—"
    if fc.curve is not None and fc.curve.model in FLAT_MODELS:
        return f"flat {fc.plateau_reward['value']:.3g}"
    step = fc.plateau_step["value"] if fc.plateau_step else None
    return f"{fc.plateau_reward['value']:.3g}" + (f" by {step}" if step is not None else "")


def forecast_curves(fc: Any, store: Store, run: Run) -> dict[str, Any] | None:
    """Figure data for drawing the fit over the reward chart: observed steps/values, the fitted curve to max_steps
    with its band, and the entropy-law ceiling; None when there is no fit."""
    if fc is None or fc.curve is None:
        return None
    from grpo_dashboard.health.forecast import reward_series

    series, _ = reward_series(metric_frame(store, run.id))
    if series is None:
        return None
    # To the planned end (or the last logged step): never wider, so the fit does not stretch the chart's x axis.
    end = float(fc.max_steps or series.steps[-1])
    x = np.linspace(float(series.steps[0]), end, 200)
    y = fc.curve(x)
    spread = fc.plateau_reward["high"] - fc.plateau_reward["value"] if fc.plateau_reward else 0.0
    return {
        "observed": {"x": series.steps.tolist(), "y": series.values.tolist()},
        "fit": {"x": x.tolist(), "y": y.tolist(), "low": (y - spread).tolist(), "high": (y + spread).tolist()},
        "ceiling": fc.reward_ceiling["value"] if fc.reward_ceiling else None,
        "stop_step": fc.stop_step["value"] if fc.stop_step else None,
    }


def panel_markdown(store: Store, run: Run) -> str:
    """The Run detail forecast panel for a run ('' when there is nothing to forecast); never raises."""
    try:
        return forecast_markdown(run_forecast(store, run))
    except Exception:  # the forecast is an extra: a failure must not take the detail page down
        return ""


_FIT_COLOR = "rgba(214,39,40,0.9)"
_BAND_COLOR = "rgba(214,39,40,0.12)"


def overlay_plots(plots: dict[str, str], store: Store, run: Run, xaxis: str) -> dict[str, str]:
    """The Run detail plots with the forecast drawn in: on the reward chart the fitted curve to max_steps with its
    band, the entropy-law ceiling and the stop step; on the entropy chart the entropy the law says the forecast
    reward needs. Only on a step x axis; plots are returned unchanged when there is no fit (never raises)."""
    if xaxis != "step":
        return plots
    try:
        fc = run_forecast(store, run)
        curves = forecast_curves(fc, store, run)
        if curves is None:
            return plots
        out = dict(plots)
        if "reward" in out:
            out["reward"] = _with_traces(out["reward"], _reward_traces(curves), curves.get("stop_step"))
        law = fc.law if fc is not None else None
        if "entropy" in out and law and law.get("a"):
            needed = (law["b"] - np.asarray(curves["fit"]["y"])) / law["a"]
            ok = needed > 0
            x = np.asarray(curves["fit"]["x"])[ok]
            trace = {
                "type": "scatter",
                "x": x.tolist(),
                "y": np.log(needed[ok]).tolist(),
                "mode": "lines",
                "name": "entropy the forecast needs (R = -a e^H + b)",
                "line": {"color": _FIT_COLOR, "dash": "dot", "width": 2},
            }
            out["entropy"] = _with_traces(out["entropy"], [trace], None)
        return out
    except Exception:  # the overlay is an extra: the charts must show without it
        return plots


def _reward_traces(curves: dict[str, Any]) -> list[dict[str, Any]]:
    fit = curves["fit"]
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "x": fit["x"],
            "y": fit["low"],
            "mode": "lines",
            "line": {"width": 0},
            "showlegend": False,
            "hoverinfo": "skip",
            "name": "forecast band",
        },
        {
            "type": "scatter",
            "x": fit["x"],
            "y": fit["high"],
            "mode": "lines",
            "line": {"width": 0},
            "fill": "tonexty",
            "fillcolor": _BAND_COLOR,
            "showlegend": False,
            "hoverinfo": "skip",
            "name": "forecast band",
        },
        {
            "type": "scatter",
            "x": fit["x"],
            "y": fit["y"],
            "mode": "lines",
            "name": "forecast (fit)",
            "line": {"color": _FIT_COLOR, "dash": "dash", "width": 2},
        },
    ]
    if curves.get("ceiling") is not None:
        traces.append(
            {
                "type": "scatter",
                "x": [fit["x"][0], fit["x"][-1]],
                "y": [curves["ceiling"]] * 2,
                "mode": "lines",
                "name": "ceiling (entropy law)",
                "line": {"color": "rgba(44,160,44,0.9)", "dash": "dot", "width": 1.5},
            }
        )
    return traces


def _with_traces(plot_json: str, traces: list[dict[str, Any]], stop_step: int | None) -> str:
    figure = json.loads(plot_json)
    # `meta` marks what the forecast drew, so a reader of the figure can tell it from the logged metrics.
    figure.setdefault("data", []).extend({**t, "meta": "forecast"} for t in traces)
    if stop_step is not None:
        layout = figure.setdefault("layout", {})
        layout.setdefault("shapes", []).append(
            {
                "type": "line",
                "x0": stop_step,
                "x1": stop_step,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "line": {"color": _FIT_COLOR, "width": 1, "dash": "dot"},
            }
        )
        layout.setdefault("annotations", []).append(
            {
                "x": stop_step,
                "y": 1,
                "yref": "paper",
                "text": f"stop {stop_step}",
                "showarrow": False,
                "font": {"size": 10, "color": _FIT_COLOR},
                "yanchor": "bottom",
            }
        )
    return json.dumps(figure)
