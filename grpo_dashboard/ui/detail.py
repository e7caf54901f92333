"""The "Run detail" tab: live charts, health findings, sample completions, spec, log tail, status, Cancel, and
managing a run (rename, note, delete).

The page's live parts (status, findings, charts, log) are pushed: the page script (static/live.js) follows the run's
stream (stream.py) and appends new points to the charts; Gradio serves the rest (spec, completions, buttons). The
same parts as Gradio outputs stay available to API clients: `detail_render`, and `detail_poll`, the polling path
(its timer is inactive in the page), where each part is recomputed only when its own cheap token moved and is
otherwise gr.skip(). Every handler resolves the run through access.py: on a Space, another user's run reads as
"not among your runs".
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.components.plot import PlotData

from grpo_dashboard.errors import BackendError, RunNotFound
from grpo_dashboard.launch import runs
from grpo_dashboard.space import access
from grpo_dashboard.store.db import Run
from grpo_dashboard.ui import byo_trl, manage_run
from grpo_dashboard.ui import trajectories as trajectories_tab
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.ui.serving import postprocessed
from grpo_dashboard.views import chart_json, charts, completions, overview, remote_status
from grpo_dashboard.views import forecast as forecast_view

POLL_S = 1.5
LOG_LINES = 200
# The page script follows the shown run with these options (and marks the page loaded: the URL then tracks tabs).
FOLLOW_JS = (
    "(r, s, l, x) => { if (window.grpoLive) { window.grpoLive.open(r, s, l, x); window.grpoLive.loaded(); }"
    " return []; }"
)


@dataclass
class DetailParts:
    """The tab's outputs by name: once as its components (`DetailTab.parts`), and as each answer's values (gr.skip()
    where a part is unchanged). `plots` maps a panel id to its plot."""

    status: Any = field(default_factory=gr.skip)
    cancel: Any = field(default_factory=gr.skip)
    findings: Any = field(default_factory=gr.skip)
    plots: dict[str, Any] = field(default_factory=dict)
    spec: Any = field(default_factory=gr.skip)
    log: Any = field(default_factory=gr.skip)
    step: Any = field(default_factory=gr.skip)
    samples: Any = field(default_factory=gr.skip)
    samples_note: Any = field(default_factory=gr.skip)
    state: Any = field(default_factory=gr.skip)

    def listed(self) -> list[Any]:
        """The parts in their order as an event's outputs (the order API clients get them in)."""
        out: list[Any] = []
        for f in fields(self):
            value = getattr(self, f.name)
            out += list(value.values()) if f.name == "plots" else [value]
        return out

    def answer(self, values: DetailParts) -> dict[Any, Any]:
        """`values` keyed by these components, part by part of the same name (a plot by its panel id)."""
        out: dict[Any, Any] = {}
        for f in fields(self):
            if f.name == "plots":
                out.update({self.plots[pid]: plot for pid, plot in values.plots.items()})
            else:
                out[getattr(self, f.name)] = getattr(values, f.name)
        return out


@dataclass
class DetailTab:
    """Components other tabs target (run selector) and the app's tab switcher needs."""

    run: gr.Dropdown
    parts: DetailParts
    manage: Any = None
    live_inputs: list[gr.components.Component] | None = None  # what the page script follows the run with
    resume: Any = None  # byo_trl.ResumeParts: the page's load fills them for the run it opens on


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _weights(run: Run) -> dict[str, float]:
    spec = overview.run_spec(run)  # None: a stored spec that no longer parses only loses the weights
    return {r.name: r.weight for r in spec.rewards} if spec is not None else {}


def samples_table(run: Run, step: Any, sort_by: str, descending: bool) -> tuple[Any, list[int], int | None]:
    """(table, available steps, shown step) for the completions view: the latest step when `step` is empty, else
    the nearest sampled step at or before it (a slider moves in steps of 1; samples come every logged step)."""
    steps = completions.sample_steps(run.run_dir, run.output_dir)
    chosen = completions.nearest_step(steps, step)
    rows = completions.read_step(run.run_dir, chosen, run.output_dir) if chosen is not None else []
    return completions.samples_frame(rows, _weights(run), sort_by, bool(descending)), steps, chosen


def render(
    ctx: UiContext,
    run_id: str | None,
    smoothing: float,
    log_y: bool,
    xaxis: str,
    follow: bool,
    step: Any,
    sort_by: str,
    descending: bool,
    state: dict[str, Any] | None,
    *,
    user: access.User | None = None,
    live: bool = False,
) -> DetailParts:
    """Every output of the tab for `user` (default: an anonymous request); unchanged parts are gr.skip(). With
    `live`, the parts the page gets from its stream (status, findings, charts, log) are skipped too."""
    user = user or access.current_user(None, None, ctx.settings)
    if not run_id:
        return DetailParts(status=gr.update(value="Select a run (or launch one from **New run**)."))
    try:
        run = access.get_run(ctx.store, run_id, user, ctx.settings)
    except access.AccessDenied as exc:
        return DetailParts(status=gr.update(value=str(exc)))
    except RunNotFound:
        return DetailParts(status=gr.update(value=f"No run {run_id!r}."))
    state = dict(state or {})
    opts = charts.ChartOptions(smoothing=float(smoothing or 0), log_y=bool(log_y), xaxis=xaxis or "step")
    token = ctx.store.change_token(run.id)
    if live:
        state["charts"] = state["log"] = None
    status = overview.status_markdown(
        run, pace=overview.recent_pace(ctx.store, run), preparing=overview.preparing_message(ctx.store, run)
    )
    remote = remote_status.remote_markdown(run, ctx.store, ctx.backends)
    if remote:
        status += f"\n\n{remote}"
    problem = ctx.monitor_problem() if run.is_active else None
    if problem:
        status += f"\n\n**{problem}**"
    out = DetailParts(status=gr.skip() if live else access.redact(status, user.token))
    if state.get("cancel") != (run.id, run.is_active):  # an update re-creates the button: only when it changes
        out.cancel = gr.update(interactive=run.is_active, visible=runs.can_cancel(run))  # absent for a read-only run
        state["cancel"] = (run.id, run.is_active)

    chart_key = (run.id, token, opts.smoothing, opts.log_y, opts.xaxis)
    found = None
    if not live and state.get("charts") != chart_key:
        # While another viewer builds this state's charts, the newest finished ones (or none) instead of waiting.
        found = chart_json.live_plots(
            ctx.store,
            run.id,
            opts,
            started_at=run.started_at,
            findings=overview.findings(ctx.store, run),
            **overview.spec_settings(run),
        )
    shown_key = None if found is None else (run.id, found[0], opts.smoothing, opts.log_y, opts.xaxis)
    if found is not None and state.get("charts") != shown_key:
        # gr.Plot passes PlotData through as is: the JSON is built once per run state, not once per viewer
        out.findings = (
            overview.findings_markdown(ctx.store, run) + "\n\n" + forecast_view.panel_markdown(ctx.store, run)
        )
        out.plots = {
            pid: PlotData(type="plotly", plot=p)
            for pid, p in forecast_view.overlay_plots(found[1], ctx.store, run, opts.xaxis).items()
        }
        state["charts"] = shown_key

    if state.get("spec") != run.id:
        out.spec = access.redact(run.spec_yaml, user.token)
        state["spec"] = run.id

    log = runs.log_path(run)
    log_key = (run.id, _size(log))
    if not live and state.get("log") != log_key:
        out.log = access.redact(overview.log_text(log, LOG_LINES), user.token) or "(no output yet)"
        state["log"] = log_key

    samples_key = (
        run.id,
        _size(completions.samples_path(run.run_dir)),
        bool(follow),
        step,
        sort_by,
        bool(descending),
        token if not Path(completions.samples_path(run.run_dir)).exists() else None,
    )
    if state.get("samples") != samples_key:
        table, steps, shown = samples_table(run, None if follow else step, sort_by, descending)
        note = (
            f"Step {shown}: {len(table)} completions."
            if shown is not None
            else "No sample completions yet (the job writes them at each logged step)."
        )
        out.step, out.samples, out.samples_note = step_update(steps, shown), table, note
        state["samples"] = samples_key
    out.state = state
    return out


def step_update(steps: list[int], shown: int | None) -> Any:
    """The step slider over the sampled steps, at `shown`."""
    if not steps:
        return gr.update(minimum=0, maximum=1, value=0, interactive=False)
    return gr.update(minimum=steps[0], maximum=max(steps[-1], steps[0] + 1), value=shown, interactive=len(steps) > 1)


def charts_html() -> str:
    """The live charts' containers: a titled placeholder per panel until its first data arrives (live.js)."""
    boxes = []
    for p in charts.PANELS:
        title = html.escape(p.title)
        boxes.append(
            f'<div class="grpo-panel" id="plot-{p.id}" data-title="{title}" role="figure" '
            f'aria-label="{title}"><div class="grpo-placeholder"><h4>{title}</h4>'
            f"<p>Select a run (or launch one from New run).</p></div></div>"
        )
    return '<div id="live-charts" class="grpo-grid">' + "".join(boxes) + "</div>"


def build(ctx: UiContext) -> DetailTab:
    """Lay out the tab and wire its controls; the live parts follow the run's stream in the page."""
    choices = overview.run_choices(ctx.store, runs=[] if ctx.settings.on_space else None)
    with gr.Row(elem_classes=["grpo-detail-head"]):
        # Custom values allowed: runs appear after the page was built (the app fills the choices on load).
        run_dd = gr.Dropdown(
            choices,
            value=choices[0][1] if choices else None,
            label="Run",
            scale=4,
            elem_id="detail-run",
            allow_custom_value=True,
        )
        cancel_btn = gr.Button("Cancel run", variant="stop", scale=1, elem_id="cancel-btn")
    gr.HTML('<div id="live-status" role="status" aria-live="polite"></div>', elem_id="detail-status", js_on_load=None)
    # The light run page of the shown run (live.js keeps the link's run): a link to share that opens charts first.
    gr.HTML(
        '<a id="light-link" class="grpo-light-link" href="/grpo/run" target="_blank" rel="noopener">'
        "Charts-only page of this run (opens fast; a link to share)</a>",
        elem_id="detail-light-link",
        js_on_load=None,
    )
    # Charts first: the chart tabs come right under the run's status; health, cost and the run's controls follow
    # (the ones that are not read at a glance folded).
    tabs_slot = gr.Column(elem_id="detail-tabs-slot")
    with gr.Accordion("Health", open=True, elem_id="detail-health"):
        gr.HTML('<div id="live-findings"></div>', elem_id="detail-findings", js_on_load=None)
    resume_parts = byo_trl.detail_tools(ctx, run_dd)  # folded: Resume from a checkpoint, Export metrics
    with gr.Accordion("Cost", open=False):
        with gr.Row():
            price = gr.Number(
                None,
                label="Hardware price, USD per hour (all GPUs)",
                info="the forecast's cost rows use it (an HF Jobs run's flavor price is used without it)",
                minimum=0,
                elem_id="cost-price",
                scale=1,
            )
            cost_md = gr.Markdown(elem_id="cost-rows")
    manage = manage_run.build(ctx, run_dd)
    with tabs_slot, gr.Tabs(elem_id="detail-tabs", overflow_behavior="wrap"):
        with gr.Tab("Charts", id="charts", elem_id="tab-charts"):
            gr.HTML(charts_html(), elem_id="live-charts-box", js_on_load=None)
            with gr.Row():  # under the charts: what is read comes first, how it is drawn after
                smoothing = gr.Slider(
                    0.0, 0.99, value=0.6, step=0.01, label="Smoothing (EMA, debiased)", elem_id="smoothing"
                )
                log_y = gr.Checkbox(False, label="Log-scale y", elem_id="log-y")
                xaxis = gr.Radio(list(charts.XAXES), value="step", label="x axis", elem_id="x-axis")
        with gr.Tab("Completions", id="completions", elem_id="tab-completions"):
            with gr.Row():
                follow = gr.Checkbox(True, label="Follow the latest step", elem_id="samples-follow")
                step_sl = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="samples-step", interactive=False)
                sort_by = gr.Dropdown(
                    list(completions.SORTS),
                    value=completions.SORTS[0],
                    label="Sort by",
                    allow_custom_value=True,
                    elem_id="samples-sort",
                    info="any column: the totals, or one reward function",
                )
                descending = gr.Checkbox(True, label="Descending", elem_id="samples-desc")
            samples_note = gr.Markdown(elem_id="samples-note")
            samples_df = gr.Dataframe(
                interactive=False, wrap=True, max_height=700, elem_id="samples-table", label="Sample completions"
            )
            refresh = gr.Button(
                "Refresh completions", size="sm", elem_id="samples-refresh", elem_classes=["grpo-offscreen"]
            )
        trajectories_tab.build(ctx, run_dd)  # agent runs: conversations, tool calls, failures (ui/trajectories.py)
        with gr.Tab("Spec & log", id="speclog", elem_id="tab-speclog"):
            spec_code = gr.Code(
                language="yaml",
                label="Run spec (as launched)",
                interactive=False,
                elem_id="detail-spec",
                wrap_lines=True,
            )
            gr.HTML(
                f'<div class="grpo-log-label" id="live-log-label">Job log (last {LOG_LINES} lines, newest at '
                f'the bottom)</div><pre id="live-log" class="grpo-log" tabindex="0" '
                f'aria-labelledby="live-log-label"></pre>',
                elem_id="detail-log-box",
                js_on_load=None,
            )
    # What API clients get from detail_render / detail_poll; the page shows the pushed versions above instead.
    status = gr.Markdown(visible=False)
    findings_md = gr.Markdown(visible=False)
    plots = {p.id: gr.Plot(label=p.title, show_label=False, visible=False) for p in charts.PANELS}
    log_box = gr.Textbox(label=f"Job log (last {LOG_LINES} lines)", visible=False)
    state = gr.State({})
    timer = gr.Timer(POLL_S, active=False)
    api_render = gr.Button(visible=False)
    controls = [run_dd, smoothing, log_y, xaxis, follow, step_sl, sort_by, descending, state]
    parts = DetailParts(
        status=status,
        cancel=cancel_btn,
        findings=findings_md,
        plots=plots,
        spec=spec_code,
        log=log_box,
        step=step_sl,
        samples=samples_df,
        samples_note=samples_note,
        state=state,
    )
    outputs = parts.listed()

    def update(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, *args: Any) -> dict[Any, Any]:
        return parts.answer(render(ctx, *args, user=user_of(ctx, profile, oauth)))

    def view(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, *args: Any) -> dict[Any, Any]:
        return parts.answer(render(ctx, *args, user=user_of(ctx, profile, oauth), live=True))

    def poll(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, *args: Any) -> dict[Any, Any]:
        # The timer's inputs are plain values (no preprocessing needed); outputs are postprocessed here, in one thread.
        return postprocessed(parts.answer(render(ctx, *args, user=user_of(ctx, profile, oauth))))

    timer.tick(
        gate(ctx, "detail_poll", poll),
        controls,
        outputs,
        api_name="detail_poll",
        concurrency_limit=None,
        show_progress="hidden",
        trigger_mode="always_last",
        preprocess=False,
        postprocess=False,
    )
    # preprocess=False: the inputs are plain values, and a step outside the slider's build-time range (or none,
    # from an API client) is the handler's to resolve (samples_table), not an input error.
    api_render.click(
        gate(ctx, "detail_render", update),
        controls,
        outputs,
        api_name="detail_render",
        concurrency_limit=None,
        show_progress="hidden",
        preprocess=False,
    )
    gr.on(
        [run_dd.change, follow.input, sort_by.input, descending.input, refresh.click],
        gate(ctx, "detail_view", view),
        controls,
        outputs,
        api_name="detail_view",
        concurrency_limit=None,
        trigger_mode="always_last",
        show_progress="hidden",
        preprocess=False,
    )
    live_inputs: list[gr.components.Component] = [run_dd, smoothing, log_y, xaxis]
    gr.on(
        [run_dd.change, smoothing.release, log_y.input, xaxis.input],
        None,
        live_inputs,
        None,
        js=FOLLOW_JS,
        api_visibility="private",
    )

    def cost(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None, usd: Any) -> Any:
        if not run_id:
            return "Select a run."
        try:
            run = access.get_run(ctx.store, run_id, user_of(ctx, profile, oauth), ctx.settings)
        except RunNotFound as exc:  # missing, or another user's (AccessDenied)
            return str(exc)
        return forecast_view.cost_markdown(ctx.store, run, usd)

    gr.on(
        [price.submit, price.blur],
        gate(ctx, "forecast_cost", cost),
        [run_dd, price],
        [cost_md],
        api_name="forecast_cost",
        show_progress="hidden",
    )

    def sort_choices(table: Any) -> Any:
        columns = getattr(table, "columns", None)
        headers = list(columns) if columns is not None else []
        extra = [h for h in headers if h not in completions.SORTS and h not in ("#", "prompt", "completion")]
        return gr.update(choices=[*completions.SORTS[:-1], *extra, completions.SORTS[-1]])

    samples_df.change(
        gate(ctx, "sort_choices", sort_choices),
        [samples_df],
        [sort_by],
        show_progress="hidden",
        queue=False,
        api_visibility="private",
    )

    def pick_step(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, *args: Any) -> dict[Any, Any]:
        user = user_of(ctx, profile, oauth)
        shown = render(ctx, args[0], args[1], args[2], args[3], False, *args[5:], user=user, live=True)
        return {follow: False, **parts.answer(shown)}

    step_sl.release(
        gate(ctx, "detail_step", pick_step),
        controls,
        [follow, *outputs],
        api_name="detail_step",
        concurrency_limit=None,
        show_progress="hidden",
        preprocess=False,
    )

    def cancel(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None) -> Any:
        if not run_id:
            raise gr.Error("Select a run to cancel.")
        user = user_of(ctx, profile, oauth)
        try:
            run = access.cancel(ctx.store, run_id, user, ctx.settings, ctx.backends)
        except (RunNotFound, access.NotAllowed, BackendError) as exc:
            raise gr.Error(access.redact(str(exc), user.token)) from None
        return access.redact(overview.status_markdown(run), user.token)

    # A run may be hours of paid GPU time: the browser asks first (an empty answer cancels nothing).
    confirm = (
        "(r) => (r && window.confirm('Cancel run ' + r + '? The job is stopped; its logged metrics are kept.')"
        " ? [r] : [null])"
    )
    cancel_btn.click(
        gate(ctx, "cancel_run", guarded_cancel(cancel)), [run_dd], [status], api_name="cancel_run", js=confirm
    )
    return DetailTab(run_dd, parts, manage, live_inputs, resume_parts)


def guarded_cancel(cancel: Any) -> Any:
    """`cancel` that does nothing when the confirmation was declined (the page sends no run id)."""

    def handler(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None) -> Any:
        if run_id is None:
            return gr.skip()
        return cancel(profile, oauth, run_id)

    handler.__doc__ = cancel.__doc__
    return handler
