"""The System panel of Run detail (and Compare's system metrics): GPU utilisation and memory, CPU and memory of the
job, over time, from the run's `system` series (`store.series.SYSTEM_SPLIT`).

Every backend fills the same series: local and Slurm jobs log them themselves (`jobs/grpo_job_setup.SystemSampler`:
the process's CPU and resident memory at every log and, with CUDA, each GPU's utilisation and memory, also on a timer
between logs); for Hugging Face Jobs the dashboard samples the Jobs metrics stream (`launch/hf_jobs/stream.py`). A
sample's step is its wall time in ms (samples fall between logging steps), so the panel is drawn against time: on
the step (or a metric) axis it uses minutes since the run's start.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_dashboard.store.series import SYSTEM_SPLIT, SeriesArrays
from grpo_dashboard.views.plot_parts import PALETTE, chart_title, drop_none, line_traces, series_id, subplots_layout

TIME_AXES = ("wall time", "relative time")
# One subplot per quantity, in this order; a row is drawn only when the run has one of its series.
ROWS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("GPU utilisation (%)", re.compile(r"^system/gpu\d+/utilization$")),
    ("GPU memory (GB)", re.compile(r"^system/gpu\d+/memory_(used|allocated|reserved)_gb$")),
    ("GPU memory (% of total)", re.compile(r"^system/gpu\d+/memory_pct$")),
    ("CPU (%: job of its cores, process of one core)", re.compile(r"^system/(cpu/utilization|process/cpu_pct)$")),
    ("Memory (GB: job's RAM, process's RSS)", re.compile(r"^system/(memory/used_gb|process/rss_gb)$")),
    ("Memory (% of the job's RAM)", re.compile(r"^system/memory/pct$")),
)
_DASH = {"memory_allocated_gb": "dot", "memory_reserved_gb": "dash"}


def row_of(key: str) -> int | None:
    """The row (index into ROWS) a system key is drawn in, or None (e.g. a constant total)."""
    return next((i for i, (_, pattern) in enumerate(ROWS) if pattern.match(key)), None)


def panel_keys(keys: Sequence[tuple[str, str]]) -> list[str]:
    """The system keys the panel draws, by row then name."""
    drawn = [k for s, k in keys if s == SYSTEM_SPLIT and row_of(k) is not None]
    return sorted(drawn, key=lambda k: (row_of(k), _device_order(k), k))


def xaxis_of(xaxis: str) -> str:
    """The axis the system series are drawn against: the chosen time axis, else minutes since the start."""
    return xaxis if xaxis in TIME_AXES else "relative time"


def _device(key: str) -> str:
    return key.split("/")[1]


def _device_order(key: str) -> tuple[int, str]:
    device = _device(key)
    m = re.match(r"gpu(\d+)$", device)
    return (int(m.group(1)), "") if m else (1 << 30, device)


def system_spec(
    keys: Sequence[str], frames: Mapping[tuple[str, str], SeriesArrays], opts: Any, t0: float | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The System panel as plain dicts (traces, layout): one subplot per quantity present, one colour per device
    (GPU i, the job's CPU/RAM, this process), each trace marked with the axis it is drawn on (`meta.x`)."""
    opts = dataclasses.replace(opts, xaxis=xaxis_of(opts.xaxis))
    rows = sorted({r for k in keys if (r := row_of(k)) is not None})
    titles = tuple(ROWS[r][0] for r in rows)
    layout = subplots_layout(titles)
    devices = sorted({_device(k) for k in keys}, key=lambda d: _device_order(f"system/{d}"))
    traces: list[dict[str, Any]] = []
    for n, r in enumerate(rows, start=1):
        axis = "" if n == 1 else str(n)
        for key in (k for k in keys if row_of(k) == r):
            frame = frames.get((SYSTEM_SPLIT, key))
            if frame is None:
                continue
            color = PALETTE[devices.index(_device(key)) % len(PALETTE)]
            name = key.removeprefix("system/")
            for trace in line_traces(
                frame,
                name,
                color,
                opts,
                t0,
                dash=_DASH.get(key.rsplit("/", 1)[-1]),
                series_key=series_id((SYSTEM_SPLIT, key)),
            ):
                trace["meta"]["x"] = opts.xaxis
                traces.append({**trace, "xaxis": f"x{axis}", "yaxis": f"y{axis}"})
        if opts.log_y:
            layout[f"yaxis{axis}"]["type"] = "log"
    bottom = "" if len(rows) == 1 else str(len(rows))
    layout[f"xaxis{bottom}"]["title"] = {
        "text": "wall time (UTC)" if opts.xaxis == "wall time" else "minutes since start"
    }
    layout.update(
        title=chart_title("System: GPU utilisation and memory, CPU and memory (sampled over time)"),
        height=max(300, 190 * len(rows) + 60),
        hoverlabel={"namelength": -1},
        margin={"l": 55, "r": 20, "t": 60, "b": 90},
        uirevision="keep",
        legend={"orientation": "h", "y": -0.08, "yanchor": "top", "x": 0, "font": {"size": 10}},
    )
    return [drop_none(t) for t in traces], layout
