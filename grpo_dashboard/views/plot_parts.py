"""The plotly pieces every chart of the dashboard is drawn with, as plain dicts: chart options, the palette, a
series' line traces (raw, smoothed, band), titles and stacked subplots. `charts.py` (the panels) and
`system_panel.py` (the System panel) both build on them.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from grpo_dashboard.store.series import SeriesArrays
from grpo_dashboard.views.display import MAX_POINTS

METRIC_XAXES = ("num_tokens", "epoch")  # logged metrics that only grow: usable as the x axis
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def series_id(ident: tuple[str, str]) -> str:
    """How a live page names a (split, key) series: `split|key`."""
    return f"{ident[0]}|{ident[1]}"


@dataclass
class ChartOptions:
    """User controls shared by all charts."""

    smoothing: float = 0.6
    log_y: bool = False
    xaxis: str = "step"
    max_points: int = MAX_POINTS


def _x(series: SeriesArrays, xaxis: str, t0: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(mask of usable points, x values) for the chosen axis (a metric axis: steps already mapped, `on_metric`)."""
    if xaxis == "step" or xaxis in METRIC_XAXES:
        return np.ones(len(series), dtype=bool), series.steps.copy()  # the cached arrays stay unshared
    times = series.times
    mask = np.isfinite(times)
    if xaxis == "wall time":
        return mask, pd.to_datetime(times[mask], unit="s", utc=True).tz_convert(None).to_numpy()
    origin = t0 if t0 is not None else (float(times[mask].min()) if mask.any() else 0.0)
    return mask, (times[mask] - origin) / 60.0


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def line_traces(
    series: SeriesArrays,
    name: str,
    color: str,
    opts: ChartOptions,
    t0: float | None = None,
    dash: str | None = None,
    secondary: bool = False,
    series_key: str | None = None,
) -> list[dict[str, Any]]:
    """The traces of one series reduced for display (`display.py`) as plain dicts: a faint raw line, the smoothed
    line on top, and a ±band around it where the series has a band (a reward's std).

    Every trace carries `meta` = {"s": series_key, "r": role} (role: value, smooth, lo, hi) and one point per point
    of the series (a gap where a value is missing), so a live page can append a series' new points to each trace
    (`views/live.py`). With log-y, values at or below zero are gaps: a log axis cannot show them.
    """
    if not len(series):
        return []
    mask, xs = _x(series, opts.xaxis, t0)
    raw = series.values[mask]
    if opts.smoothing <= 0:
        smooth = raw
    elif series.smooth is None:
        raise ValueError(f"{name}: a series for display (display.reduce) is needed to draw it smoothed")
    else:
        smooth = series.smooth[mask]
    raw, smooth = _plotted(raw, opts.log_y), _plotted(smooth, opts.log_y)
    yaxis = "y2" if secondary else "y"
    hover = "%{y:.4g}"
    traces: list[dict[str, Any]] = []

    def meta(role: str) -> dict[str, str]:
        return {"s": series_key or name, "r": role}

    if series.band is not None and np.isfinite(series.band).any():
        band = series.band[mask]
        traces.append(
            {
                "type": "scatter",
                "x": xs,
                "y": _plotted(smooth - band, opts.log_y),
                "mode": "lines",
                "line": {"width": 0},
                "legendgroup": name,
                "showlegend": False,
                "hoverinfo": "skip",
                "yaxis": yaxis,
                "name": f"{name} -std",
                "meta": meta("lo"),
            }
        )
        traces.append(
            {
                "type": "scatter",
                "x": xs,
                "y": _plotted(smooth + band, opts.log_y),
                "mode": "lines",
                "line": {"width": 0},
                "fill": "tonexty",
                "fillcolor": _rgba(color, 0.15),
                "legendgroup": name,
                "showlegend": False,
                "hoverinfo": "skip",
                "yaxis": yaxis,
                "name": f"{name} ±std",
                "meta": meta("hi"),
            }
        )
    markers = "lines+markers" if len(xs) < 30 or dash == "dot" else "lines"
    if opts.smoothing > 0:
        traces.append(
            {
                "type": "scatter",
                "x": xs,
                "y": raw,
                "mode": "lines",
                "name": f"{name} (raw)",
                "legendgroup": name,
                "showlegend": False,
                "hovertemplate": hover,
                "line": {"color": _rgba(color, 0.3), "width": 1, "dash": dash},
                "yaxis": yaxis,
                "meta": meta("value"),
            }
        )
    traces.append(
        {
            "type": "scatter",
            "x": xs,
            "y": smooth,
            "mode": markers,
            "name": name,
            "hovertemplate": hover,
            "legendgroup": name,
            "line": {"color": color, "width": 2, "dash": dash},
            "marker": {"size": 4},
            "yaxis": yaxis,
            "meta": meta("smooth" if opts.smoothing > 0 else "value"),
        }
    )
    return traces


def _plotted(values: np.ndarray, log_y: bool) -> np.ndarray:
    """Plot values: non-finite ones (and, on a log axis, those <= 0) as NaN, which plotly draws as a gap."""
    ok = np.isfinite(values)
    if log_y:
        with np.errstate(invalid="ignore"):
            ok &= values > 0
    return np.where(ok, values, np.nan)


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    """Plotly leaves unset properties out; a None (e.g. dash=None) would be sent as null."""
    return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}


def chart_title(text: str) -> dict[str, Any]:
    """A chart title at the top left, clear of plotly's toolbar (top right)."""
    return {"text": text, "font": {"size": 14}, "x": 0.01, "xanchor": "left", "xref": "paper"}


@functools.lru_cache(maxsize=64)
def _layout_json(titles: tuple[str, ...]) -> str:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.08)
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)  # the charts' own is added by charts._figure
    return json.dumps(layout)


def subplots_layout(titles: tuple[str, ...]) -> dict[str, Any]:
    """make_subplots' layout (axis domains, shared x axes, titles) for one column of rows; built once per titles."""
    return json.loads(_layout_json(titles))
