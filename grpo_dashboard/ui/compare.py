"""The "Compare" tab: overlay one metric of several runs and list the spec fields that differ between them."""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr

from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.space import access
from grpo_dashboard.store.external import EXTERNAL
from grpo_dashboard.store.importers import IMPORTED
from grpo_dashboard.store.series import SYSTEM_SPLIT
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import charts, display, overview, system_panel


def metric_options(ctx: UiContext, run_ids: list[str]) -> list[str]:
    """Metric keys logged by any of the runs: train keys as they are, eval keys with their eval_ prefix."""
    keys: set[str] = set()
    for rid in run_ids:
        keys.update(k for _, k in ctx.store.metric_keys(rid) if k not in charts.SUMMARY_KEYS)
    preferred = [k for k in ("reward", "kl", "entropy", "completions/mean_length") if k in keys]
    return preferred + sorted(keys - set(preferred))


def split_of(metric: str) -> str:
    """The split a Compare metric is read from: eval_ keys from eval, system samples from system (drawn against
    time), the rest from train."""
    return "eval" if metric.startswith("eval_") else SYSTEM_SPLIT if metric.startswith("system/") else "train"


class Comparison(NamedTuple):
    """What the tab shows for a choice of runs."""

    metric: Any  # the metric dropdown's update
    plot: Any  # the overlay figure
    diff: Any  # the spec fields that differ (None for fewer than two runs)


def compare(
    ctx: UiContext,
    run_ids: list[str] | None,
    metric: str | None,
    smoothing: float,
    log_y: bool,
    xaxis: str,
    user: access.User | None = None,
) -> Comparison:
    """The metric dropdown update, overlay figure and differing spec fields for the chosen runs `user` may see."""
    user = user or access.current_user(None, None, ctx.settings)
    run_ids = [r for r in (run_ids or []) if r]
    found = []
    for rid in run_ids:
        try:
            found.append(access.get_run(ctx.store, rid, user, ctx.settings))
        except RunNotFound:  # missing, or another user's (AccessDenied): left out alike
            continue
    options = metric_options(ctx, [r.id for r in found])
    if metric not in options:
        metric = options[0] if options else None
    split = split_of(metric or "")
    xaxis = "relative time" if xaxis == "wall time" else (xaxis or "step")
    opts = charts.ChartOptions(
        smoothing=float(smoothing or 0),
        log_y=bool(log_y),
        xaxis=system_panel.xaxis_of(xaxis) if split == SYSTEM_SPLIT else xaxis,
    )
    series = []
    differs = overview.differences(found)
    if metric:
        ident = (split, metric)
        for run in found:
            # The same display series (and cached summaries) as the run's own charts.
            got = display.downsampled(ctx.store, run.id, opts.max_points, opts.smoothing, keys=[ident]).get(ident)
            if got is not None and opts.xaxis in charts.METRIC_XAXES:  # a run without that metric is left out
                got = (charts.on_metric({ident: got}, ctx.store.arrays(run.id, opts.xaxis)) or {}).get(ident)
            if got is not None and len(got):
                what = differs.get(run.id)
                # made elsewhere: imported (read-only) or external (a script of its own, DashboardCallback)
                mark = f" [{run.backend}]" if run.backend in (IMPORTED, EXTERNAL) else ""
                series.append((f"{run.name} ({run.id[-6:]}{': ' + what if what else ''}){mark}", got))
    fig = charts.overlay_figure(metric or "", series, opts)
    diff = overview.spec_diff(found) if len(found) > 1 else None
    return Comparison(metric=gr.update(choices=options, value=metric), plot=fig, diff=diff)


class CompareTab(NamedTuple):
    """What the app wires: the run picker (its choices are refreshed by the app) and the Refresh button."""

    runs: gr.Dropdown
    refresh: gr.Button


def build(ctx: UiContext) -> CompareTab:
    """Lay out the tab; returns its run picker and Refresh button."""
    choices = overview.run_choices(ctx.store, runs=[] if ctx.settings.on_space else None)
    # Custom values allowed: runs appear after the page was built (choices are refreshed by a timer, per session).
    runs_dd = gr.Dropdown(
        choices, value=[], multiselect=True, label="Runs to compare", elem_id="compare-runs", allow_custom_value=True
    )
    with gr.Row():
        metric = gr.Dropdown([], label="Metric", allow_custom_value=True, elem_id="compare-metric", scale=2)
        smoothing = gr.Slider(0.0, 0.99, value=0.6, step=0.01, label="Smoothing", elem_id="compare-smoothing")
        log_y = gr.Checkbox(False, label="Log-scale y", elem_id="compare-log")
        xaxis = gr.Radio(
            ["step", "relative time", *charts.METRIC_XAXES], value="step", label="x axis", elem_id="compare-x"
        )
    plot = gr.Plot(show_label=False, elem_id="compare-plot")
    diff = gr.Dataframe(interactive=False, label="Spec fields that differ", elem_id="compare-diff", wrap=True)
    refresh_btn = gr.Button("Refresh", size="sm", elem_id="compare-refresh")

    def update(
        profile: gr.OAuthProfile | None,
        oauth: gr.OAuthToken | None,
        run_ids: list[str],
        metric_key: str | None,
        sm: float,
        log: bool,
        x: str,
    ) -> dict[Any, Any]:
        shown = compare(ctx, run_ids, metric_key, sm, log, x, user=user_of(ctx, profile, oauth))
        return {metric: shown.metric, plot: shown.plot, diff: shown.diff}

    gr.on(
        [runs_dd.change, metric.input, smoothing.release, log_y.input, xaxis.input, refresh_btn.click],
        gate(ctx, "compare", update),
        [runs_dd, metric, smoothing, log_y, xaxis],
        [metric, plot, diff],
        api_name="compare",
        concurrency_limit=None,
        trigger_mode="always_last",
        show_progress="hidden",
    )
    return CompareTab(runs_dd, refresh_btn)
