"""Chart figures for the dashboard, without gradio: grouping of TRL metric names into panels and plotly figure
building from series reduced for display (`display.py`: EMA smoothing and spike-keeping downsampling).

Every figure keeps the raw series (faint) under its smoothed twin, draws eval metrics over their train twins, and
never sends more than `MAX_POINTS` points per line to the browser.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from grpo_dashboard.health.series import normalize_key
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.series import SYSTEM_SPLIT, SeriesArrays
from grpo_dashboard.views import display, system_panel
from grpo_dashboard.views.display import REWARD_MEAN as _REWARD_MEAN
from grpo_dashboard.views.plot_parts import (
    METRIC_XAXES,
    PALETTE,
    ChartOptions,
    chart_title,
    drop_none,
    line_traces,
    series_id,
    subplots_layout,
)

XAXES = ("step", "wall time", "relative time", *METRIC_XAXES)

# End-of-training summaries and eval bookkeeping: one value each, not curves.
SUMMARY_KEYS = frozenset(
    {
        "train_runtime",
        "train_samples_per_second",
        "train_steps_per_second",
        "total_flos",
        "train_loss",
        "epoch",
        "eval_runtime",
        "eval_samples_per_second",
        "eval_steps_per_second",
    }
)


@dataclass(frozen=True)
class Panel:
    """One chart of the run detail page: which metric keys it draws."""

    id: str
    title: str
    y_title: str


PANELS: tuple[Panel, ...] = (
    Panel("reward", "Reward per function (mean ± std)", "reward"),
    Panel("reward_spread", "Reward spread: reward_std and frac_reward_zero_std", "reward std"),
    Panel("kl", "KL to the reference model", "KL (nats / token)"),
    Panel("clip", "Clip ratios (low / high / region)", "fraction of tokens (0-1)"),
    Panel("entropy", "Entropy", "nats / token"),
    Panel("length", "Completion length and clipped ratio", "tokens"),
    Panel("grad_norm", "Gradient norm", "L2 norm"),
    Panel("learning_rate", "Learning rate", "learning rate"),
    Panel("loss", "Loss", "loss"),
    Panel("step_time", "Step time", "seconds"),
    Panel("tools", "Tool calls and failures", "per episode / share of calls"),
    Panel("tool_calls", "Calls per tool name and turns per episode", "per episode"),
    Panel("tasks", "Reward per environment / task", "reward"),
    Panel("log_metric", "Metrics logged by reward functions (log_metric)", "as logged"),
    Panel("async", "Async GRPO: sample/* staleness and queue, batch/* packing, perf/*", "as logged"),
    Panel("system", "System: GPU utilisation and memory, CPU and memory", "as sampled"),
    Panel("other", "Other metrics", "value"),
)
PANEL_IDS = tuple(p.id for p in PANELS)
UNSMOOTHED = frozenset({"learning_rate"})  # a schedule, not a noisy signal: an EMA would only make it lag
# Series drawn against a right-hand axis of their own (a 0-1 fraction beside a quantity with another unit).
SECONDARY = {
    "length": ("completions/clipped_ratio", "clipped ratio (0-1)"),
    "reward_spread": ("frac_reward_zero_std", "fraction of groups (0-1)"),
}

_EXACT = {
    "reward": "reward",
    "reward_std": "reward_spread",
    "frac_reward_zero_std": "reward_spread",
    "kl": "kl",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "loss": "loss",
    "policy_loss": "loss",
    "aux_loss": "loss",
    "step_time": "step_time",
    "cispo_clip_ratio": "clip",
}
_AGENT_SHARES = frozenset({"agent/turn_limit_ratio", "agent/malformed_ratio", "agent/repeated_failure_ratio"})
_ASYNC_PREFIXES = ("sample/", "batch/", "perf/")
# verl's own metric groups (an imported verl run): not a reward function's log_metric
_VERL_PREFIXES: tuple[str, ...] = ("actor/", "critic/", "val-core/", "val-aux/", "timing_s/", "timing_per_token_ms/")
_VERL_PREFIXES += ("global_seqlen/", "response_length/", "prompt_length/", "training/", "rollout_corr/")
# Names TRL's GRPOTrainer logs itself (any other name is a reward function's log_metric).
_TRL_PREFIXES = (
    "rewards/",
    "completions/",
    "clip_ratio/",
    "sampling/",
    "entropy",
    "kl",
    "num_tokens",
    "eval_",
    "mean_",
    "frac_",
    "global_step",
    "train_",
)
_TRL_KEYS = frozenset(
    {
        "epoch",
        "step",
        "elapsed",
        "time",
        "max_steps",
        "lr",
        "grad_norm",
        "loss",
        "learning_rate",
        "reward",
        "reward_std",
        "step_time",
        "policy_loss",
        "aux_loss",
        "cispo_clip_ratio",
        "entropy_coef",
        "total_flos",
    }
)
_LENGTH_ORDER = (
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
)
# A small explicit template: plotly's default one is deep-copied into every figure, which is slow.
_TEMPLATE = {
    "layout": {
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "font": {"color": "#2a3f5f"},
        "xaxis": {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "linecolor": "#c8d4e3"},
        "yaxis": {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8", "linecolor": "#c8d4e3"},
        "colorway": list(PALETTE),
    }
}


def panel_of(key: str) -> str | None:
    """The panel a train metric belongs to, or None for summaries and reward std (drawn as the reward band)."""
    if key in SUMMARY_KEYS or (key.startswith("rewards/") and key.endswith("/std")):
        return None
    trl = normalize_key(key)
    if trl != key and not key.startswith(("train/", "eval/")):
        # another framework's name for a TRL metric (verl's critic/score/mean, actor/pg_clipfrac, val-core/...):
        # drawn, under its own name, on the panel of the metric it is
        return panel_of(trl[5:] if trl.startswith("eval_") else trl)
    if key in _EXACT:
        return _EXACT[key]
    if _REWARD_MEAN.match(key):
        return "reward"
    if key.startswith("clip_ratio/"):
        return "clip"
    if key.startswith("completions/") and "terminated" not in key:
        return "length"
    if key.startswith("tools/") or key in _AGENT_SHARES:
        return "tools"
    if key.startswith("agent/"):
        return "tool_calls"
    if key.startswith("tasks/"):
        return "tasks" if key.endswith("/reward_mean") else None
    if key.startswith(_ASYNC_PREFIXES):
        return "async"
    if key.startswith(_VERL_PREFIXES):
        return "other"
    if not key.startswith(_TRL_PREFIXES) and key not in _TRL_KEYS:
        return "log_metric"  # TRL logs a reward function's log_metric(name, value) under the bare name
    return "other"


def group_metrics(keys: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Panel id -> train metric keys to draw, for the (split, key) pairs of a run.

    Eval keys (`eval_<name>`) are drawn on their train twin's panel; an eval metric without one gets its own line.
    System samples (split `system`) go to the System panel.
    """
    keys = list(keys)
    train = {k for s, k in keys if s == "train"}
    evals = {k for s, k in keys if s == "eval"}
    out: dict[str, list[str]] = {p: [] for p in PANEL_IDS}
    for key in sorted(train):
        panel = panel_of(key)
        if panel is not None:
            out[panel].append(key)
    for ekey in sorted(evals):
        base = ekey[5:] if ekey.startswith("eval_") else ekey
        panel = panel_of(base) if ekey not in SUMMARY_KEYS else None
        if panel is not None and base not in train:
            out[panel].append(base)
    out["system"] = system_panel.panel_keys(keys)
    out["reward"].sort(key=lambda k: (k == "reward", k))
    out["length"].sort(key=lambda k: (_LENGTH_ORDER.index(k) if k in _LENGTH_ORDER else len(_LENGTH_ORDER), k))
    return out


Spec = tuple[list[dict[str, Any]], dict[str, Any]]  # a figure as plain dicts: (traces, layout without template)


def _figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    """A figure built in one go from plain dicts, without plotly's per-property validation (~25x faster than
    add_traces + update_layout; the dicts here are fixed by this module, not user input)."""
    return go.Figure(data=data, layout={"template": _TEMPLATE, **layout}, _validate=False)


def empty_figure(title: str, note: str) -> go.Figure:
    """A figure holding only a centred note (e.g. why a metric is missing)."""
    return _figure(*_empty_spec(title, note))


NOTE_WIDTH = 52  # characters per line of a centred note: a third of a laptop screen's width shows a whole line


def wrap_note(note: str) -> str:
    """A note in lines of at most NOTE_WIDTH characters (plotly draws an annotation on one line, cut at both sides
    of a narrow chart); lines already broken with <br> are kept."""
    return "<br>".join(
        "<br>".join(textwrap.wrap(line, NOTE_WIDTH, break_long_words=False, break_on_hyphens=False) or [""])
        for line in note.split("<br>")
    )


def _empty_spec(title: str, note: str) -> Spec:
    return (
        [],
        {
            "annotations": [
                {
                    "text": wrap_note(note),
                    "x": 0.5,
                    "y": 0.5,
                    "xref": "paper",
                    "yref": "paper",
                    "showarrow": False,
                    "font": {"size": 14},
                }
            ],
            "title": chart_title(title),
            "height": 300,
            "margin": {"l": 50, "r": 20, "t": 40, "b": 40},
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
        },
    )


def _layout(title: str, y_title: str, opts: ChartOptions, secondary_title: str | None = None) -> dict[str, Any]:
    x_title = {"step": "step", "wall time": "wall time (UTC)", "relative time": "minutes since start"}.get(
        opts.xaxis, opts.xaxis
    )
    layout: dict[str, Any] = {
        "title": chart_title(title),
        "height": 340,
        "margin": {"l": 60, "r": 70 if secondary_title else 20, "t": 48, "b": 110},
        "hovermode": "x unified",
        "hoverlabel": {"namelength": -1},
        "uirevision": "keep",
        "legend": {"orientation": "h", "y": -0.42, "yanchor": "top", "x": 0, "font": {"size": 10}},
        "xaxis": {"title": {"text": x_title, "standoff": 6}, "automargin": True},
        "yaxis": {
            "title": {"text": y_title},
            "type": "log" if opts.log_y else "linear",
            "automargin": True,
            "tickformat": "~g" if opts.log_y else ".4~g",
        },
    }
    if secondary_title:
        layout["yaxis2"] = {
            "title": {"text": secondary_title},
            "overlaying": "y",
            "side": "right",
            "range": [0, 1.05],
            "showgrid": False,
            "automargin": True,
        }
    return layout


def _label(key: str) -> str:
    m = _REWARD_MEAN.match(key)
    return m.group(1) if m else key.split("/", 1)[-1] if key.startswith(("clip_ratio/", "completions/")) else key


SeriesMap = Mapping[tuple[str, str], SeriesArrays]  # series keyed by (split, key)


def panel_figure(
    panel_id: str,
    keys: Sequence[str],
    frames: SeriesMap,
    opts: ChartOptions,
    *,
    t0: float | None = None,
    beta: float | None = None,
    max_completion_length: int | None = None,
    markers: Sequence[tuple[int, str, str]] = (),
) -> go.Figure:
    """The figure of one panel: its train keys (with eval twins dashed), from whole series keyed by (split, key),
    reduced for display here (`display.reduce_all`; the run pages read theirs reduced, see `run_specs`)."""
    shown = display.reduce_all(frames, opts.max_points, opts.smoothing)
    return _figure(
        *panel_spec(
            panel_id, keys, shown, opts, t0=t0, beta=beta, max_completion_length=max_completion_length, markers=markers
        )
    )


def panel_spec(
    panel_id: str,
    keys: Sequence[str],
    frames: SeriesMap,
    opts: ChartOptions,
    *,
    t0: float | None = None,
    beta: float | None = None,
    max_completion_length: int | None = None,
    markers: Sequence[tuple[int, str, str]] = (),
) -> Spec:
    """`panel_figure` as plain dicts, from series already reduced for display."""
    panel = next(p for p in PANELS if p.id == panel_id)
    if panel_id in UNSMOOTHED:
        opts = dataclasses.replace(opts, smoothing=0.0)
    if not keys:
        if panel_id == "kl":
            note = "KL not logged: beta is 0 (no reference model, no KL penalty)" if beta == 0 else "KL not logged yet"
            return _empty_spec(panel.title, note)
        if panel_id == "system":
            return _empty_spec(
                panel.title, "no system samples (yet): the job samples them at each log, its GPUs also between logs"
            )
        return _empty_spec(panel.title, "not logged (yet)")
    if panel_id == "other":
        return _other_spec(keys, frames, opts, t0=t0)
    if panel_id == "system":
        return system_panel.system_spec(keys, frames, opts, t0)
    traces: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    secondary = None
    for i, key in enumerate(keys):
        color = PALETTE[i % len(PALETTE)]
        on_right = SECONDARY.get(panel_id, ("",))[0] == key
        if on_right:
            secondary = SECONDARY[panel_id][1]
        name = "reward (weighted sum)" if key == "reward" else _label(key)
        frame = frames.get(("train", key))
        if frame is not None:
            traces += line_traces(
                frame,
                name,
                color,
                opts,
                t0,
                dash="dash" if key == "reward" and len(keys) > 1 else None,
                secondary=on_right,
                series_key=series_id(("train", key)),
            )
        eval_frame = frames.get(("eval", f"eval_{key}"))
        if eval_frame is not None:
            traces += line_traces(
                eval_frame,
                f"eval {name}",
                color,
                opts,
                t0,
                dash="dot",
                secondary=on_right,
                series_key=series_id(("eval", f"eval_{key}")),
            )
    if panel_id == "clip" and _all_zero(frames, keys):
        annotations.append(
            {
                "text": "all 0: expected while training is exactly on-policy (num_iterations = 1, no vLLM)",
                "x": 0.5,
                "y": 0.9,
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "font": {"size": 11},
            }
        )
    if panel_id == "length" and max_completion_length:
        # What fig.add_hline draws: a line across the plot area at y, its label at the top left.
        shapes.append(
            {
                "type": "line",
                "xref": "x domain",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": max_completion_length,
                "y1": max_completion_length,
                "line": {"color": "#d62728", "dash": "dash", "width": 1},
            }
        )
        annotations.append(
            {
                "text": f"max_completion_length = {max_completion_length}",
                "showarrow": False,
                "xref": "x domain",
                "x": 0.98,
                "xanchor": "right",
                "yref": "y",
                "y": max_completion_length,
                "yanchor": "top",
                "bgcolor": "rgba(255,255,255,0.8)",
                "font": {"size": 10, "color": "#d62728"},
            }
        )
    if opts.xaxis == "step":
        for step, rule, severity in markers:  # health findings: a vertical line at the onset step
            color = FINDING_COLORS.get(severity, "#57606a")
            shapes.append(
                {
                    "type": "line",
                    "xref": "x",
                    "x0": step,
                    "x1": step,
                    "yref": "paper",
                    "y0": 0,
                    "y1": 1,
                    "line": {"color": color, "dash": "dot", "width": 1.5},
                }
            )
            annotations.append(
                {
                    "text": rule,
                    "showarrow": False,
                    "xref": "x",
                    "x": step,
                    "xanchor": "left",
                    "yref": "paper",
                    "y": 1,
                    "yanchor": "top",
                    "font": {"size": 10, "color": color},
                }
            )
    layout = _layout(panel.title, panel.y_title, opts, secondary)
    if annotations:
        layout["annotations"] = annotations
    if shapes:
        layout["shapes"] = shapes
    return [drop_none(t) for t in traces], layout


FINDING_COLORS = {"warning": "#bf8700", "error": "#cf222e"}


def _all_zero(frames: SeriesMap, keys: Sequence[str]) -> bool:
    values = [frames[("train", k)].values for k in keys if ("train", k) in frames]
    finite = [v[np.isfinite(v)] for v in values]
    return bool(finite) and all(v.size and not v.any() for v in finite)


def _other_spec(
    keys: Sequence[str], frames: SeriesMap, opts: ChartOptions, t0: float | None = None, max_rows: int = 12
) -> Spec:
    shown = list(keys)[:max_rows]
    layout = subplots_layout(tuple(shown))
    traces: list[dict[str, Any]] = []
    for i, key in enumerate(shown, start=1):
        color = PALETTE[(i - 1) % len(PALETTE)]
        axis = "" if i == 1 else str(i)
        for split, name in (("train", key), ("eval", f"eval_{key}")):
            frame = frames.get((split, name))
            if frame is not None:
                for trace in line_traces(
                    frame,
                    name,
                    color,
                    opts,
                    t0,
                    dash="dot" if split == "eval" else None,
                    series_key=series_id((split, name)),
                ):
                    traces.append({**trace, "xaxis": f"x{axis}", "yaxis": f"y{axis}"})
        if opts.log_y:
            layout[f"yaxis{axis}"]["type"] = "log"
    title = "Other metrics" + (f" (first {max_rows} of {len(keys)})" if len(keys) > max_rows else "")
    layout.update(
        title=chart_title(title),
        height=max(300, 170 * len(shown)),
        hoverlabel={"namelength": -1},
        margin={"l": 55, "r": 20, "t": 60, "b": 40},
        showlegend=False,
        uirevision="keep",
    )
    return [drop_none(t) for t in traces], layout


def count_points(fig: go.Figure) -> int:
    """Points in the figure's longest trace (what the browser draws per line)."""
    return max((len(t.x) for t in fig.data if getattr(t, "x", None) is not None), default=0)


def overlay_figure(
    metric: str, series: Sequence[tuple[str, SeriesArrays]], opts: ChartOptions, split: str = "train"
) -> go.Figure:
    """One metric of several runs on one chart (compare view), from (name, series reduced for display) pairs; time
    axes are relative to each run's first logged time."""
    traces: list[dict[str, Any]] = []
    for i, (name, one) in enumerate(series):
        times = one.times[~np.isnan(one.times)]
        t0 = float(times.min()) if times.size else None
        traces += line_traces(one, name, PALETTE[i % len(PALETTE)], opts, t0)
    if not traces:
        return empty_figure(metric or "Compare", "choose runs and a metric that they log")
    label = metric if split == "train" else f"{metric} (eval)"
    return _figure([drop_none(t) for t in traces], _layout(label, metric, opts))


def run_t0(frames: SeriesMap, started_at: float | None = None) -> float | None:
    """The time origin of a run: its start, else its first logged time."""
    if started_at is not None:
        return started_at
    times = [f.times for f in frames.values() if len(f)]
    lows = [float(np.nanmin(t)) for t in times if not np.isnan(t).all()]
    return min(lows) if lows else None


def run_figures(
    store: Store,
    run_id: str,
    opts: ChartOptions,
    *,
    beta: float | None = None,
    max_completion_length: int | None = None,
    started_at: float | None = None,
    findings: Sequence[Any] = (),
) -> dict[str, go.Figure]:
    """Every panel's figure for one run, in PANELS order; `findings` (health) mark their metric's panel."""
    specs = run_specs(store, run_id, opts, beta, max_completion_length, started_at, findings)
    return {pid: _figure(*spec) for pid, spec in specs.items()}


def on_metric(frames: SeriesMap, x: SeriesArrays) -> dict[tuple[str, str], SeriesArrays] | None:
    """The series with each step replaced by the value the monotone metric `x` (num_tokens, epoch) had there
    (interpolated between its logged steps); None when `x` is not logged or ever decreases. System samples stay as
    they are (drawn against time)."""
    ok = np.isfinite(x.values)
    xs, xv = x.steps[ok], x.values[ok]
    if len(xs) < 2 or bool(np.any(np.diff(xv) < 0)):
        return None
    out: dict[tuple[str, str], SeriesArrays] = {}
    for key, series in frames.items():
        if key[0] == SYSTEM_SPLIT:
            out[key] = series
            continue
        inside = (series.steps >= xs[0]) & (series.steps <= xs[-1])
        masked = {
            f.name: getattr(series, f.name)[inside]
            for f in dataclasses.fields(series)
            if isinstance(getattr(series, f.name), np.ndarray)
        }
        masked["steps"] = np.interp(series.steps[inside], xs, xv)
        out[key] = dataclasses.replace(series, **masked)
    return out


def run_specs(
    store: Store,
    run_id: str,
    opts: ChartOptions,
    beta: float | None,
    max_completion_length: int | None,
    started_at: float | None,
    findings: Sequence[Any],
) -> dict[str, Spec]:
    """Every panel of a run as plain dicts, in PANELS order (see `run_figures`)."""
    frames = display.run_series(store, run_id, opts.smoothing, opts.max_points)
    t0 = run_t0(frames, started_at)
    if opts.xaxis in METRIC_XAXES:
        mapped = on_metric(frames, store.arrays(run_id, opts.xaxis))
        if mapped is None:
            return noted_specs(metric_axis_note(opts.xaxis))
        frames, findings = mapped, ()  # findings mark steps: not drawn on a metric axis
    note = axis_note(frames, opts.xaxis)
    if note is not None:
        return noted_specs(note)
    marks = finding_marks(findings, group_metrics(frames.keys()))
    return specs_of(frames, opts, beta, max_completion_length, t0, marks)


def metric_axis_note(xaxis: str) -> str:
    """What every panel says when the run did not log the metric `xaxis` (num_tokens, epoch) as a growing one."""
    return f"{xaxis} is not logged as a growing metric by this run; choose step or time"


def axis_note(frames: SeriesMap, xaxis: str) -> str | None:
    """What every panel says in place of a chart when the run's metrics have no point on the time axis `xaxis`
    (an import from a log without wall-clock times), or None when they can be drawn."""
    if xaxis not in ("wall time", "relative time") or not frames:
        return None
    timed = any(bool(np.isfinite(s.times).any()) for k, s in frames.items() if k[0] != SYSTEM_SPLIT)
    return None if timed else f"{xaxis}: this run logged no wall-clock times (its log has none); choose step"


def noted_specs(note: str) -> dict[str, Spec]:
    """Every panel, in PANELS order, holding only `note`."""
    return {pid: _empty_spec(next(p.title for p in PANELS if p.id == pid), note) for pid in PANEL_IDS}


Marks = dict[str, list[tuple[int, str, str]]]  # panel id -> (step, rule, severity) of findings drawn on it


def finding_marks(findings: Sequence[Any], groups: Mapping[str, Sequence[str]]) -> Marks:
    """Panel id -> (step, rule, severity) of the warnings and errors among `findings` whose metric it draws."""
    marks: Marks = {}
    for f in findings:
        pid = next((p for p in PANEL_IDS if f.metric and f.metric in groups[p]), None)
        if pid is not None and f.severity in ("warning", "error"):
            marks.setdefault(pid, []).append((int(f.step), f.rule, f.severity))
    return marks


def specs_of(
    frames: SeriesMap,
    opts: ChartOptions,
    beta: float | None,
    max_completion_length: int | None,
    t0: float | None,
    marks: Mapping[str, Sequence[tuple[int, str, str]]],
) -> dict[str, Spec]:
    """Every panel as plain dicts from a run's series reduced for display, in PANELS order."""
    groups = group_metrics(frames.keys())
    return {
        pid: panel_spec(
            pid,
            groups[pid],
            frames,
            opts,
            t0=t0,
            beta=beta,
            max_completion_length=max_completion_length,
            markers=marks.get(pid, ()),
        )
        for pid in PANEL_IDS
    }
