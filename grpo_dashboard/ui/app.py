"""`build_app()`: the whole dashboard as a gr.Blocks, wired across tabs; the only place the tabs meet."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from grpo_dashboard import settings
from grpo_dashboard.errors import BackendError, SpecError
from grpo_dashboard.launch import hub_client, runs
from grpo_dashboard.launch.backends import Backends, shared
from grpo_dashboard.space import access
from grpo_dashboard.spec import presets
from grpo_dashboard.store import temp_area
from grpo_dashboard.store.db import Store
from grpo_dashboard.ui import auth, byo_trl, compare, detail, guard, new_run, preflight, runs_tab
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.ui.serving import DashboardBlocks, page_head, short_circuit_missing_optional_imports
from grpo_dashboard.views import charts, overview

CSS = (Path(__file__).resolve().parent / "static" / "dashboard.css").read_text()
# Ingestion passes: a live page shows a record at most this long (plus its push) after the job wrote it.
MONITOR_S = 0.2
TAB_IDS = ("new", "preflight", "runs", "detail", "compare")


def launch_options() -> dict[str, Any]:
    """Keyword arguments for `demo.launch()` (theme, CSS and the page's scripts moved there in Gradio 6)."""
    return {"theme": gr.themes.Soft(), "css": CSS, "head": page_head()}


def build_app(
    store: Store | None = None,
    base_dir: str | Path | None = None,
    monitor: bool = True,
    backends: Backends | None = None,
) -> DashboardBlocks:
    """The dashboard app; starts one ingestion Monitor for the store (as `demo.monitor`) unless `monitor=False`.

    Args:
        store: the run store (default: `Store()` in $GRPO_DASHBOARD_DATA_DIR).
        base_dir: directory that relative paths of launched specs resolve against (default: the project root,
            where `examples/` lives).
        monitor: start the background thread that ingests active runs' metrics.
        backends: the backend instances with their live state (default: the process's, `backends.shared()`).
    """
    short_circuit_missing_optional_imports()
    temp_area.sweep_temp()  # what a previous process left: pasted recipes, exports, gradio's old uploads
    store = store or Store()
    if settings.on_space():
        hub_client.forbid_implicit_hub_token()
    backends = backends or shared()
    ctx = UiContext(
        store,
        Path(base_dir) if base_dir else presets.PROJECT_ROOT,
        runs.Monitor(store, interval_s=MONITOR_S, on_end=overview.health_badge, backends=backends)
        if monitor
        else None,
        backends=backends,
    )
    with DashboardBlocks(title="GRPO Dashboard") as demo:
        gr.Markdown("## GRPO Dashboard · configure, launch and watch TRL GRPO runs", elem_id="app-title")
        who = auth.header(ctx)
        with gr.Tabs(selected="new", elem_id="main-tabs", overflow_behavior="wrap") as tabs:
            with gr.Tab("New run", id="new", elem_id="tab-new") as t_new:
                trl_panel = byo_trl.import_panel()  # paste or upload a TRL config: first, above the form
                new = new_run.build(ctx)
                byo_trl.new_run_import(ctx, new, trl_panel)
            with gr.Tab("Pre-flight", id="preflight", elem_id="tab-preflight") as t_pre:
                preflight.build(ctx, new.yaml)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs") as t_runs:
                runs_t = runs_tab.build(ctx)
            with gr.Tab("Run detail", id="detail", elem_id="tab-detail") as t_detail:
                det = detail.build(ctx)
            with gr.Tab("Compare", id="compare", elem_id="tab-compare") as t_compare:
                compare_t = compare.build(ctx)
                compare_dd = compare_t.runs
        tab_blocks = dict(zip(TAB_IDS, (t_new, t_pre, t_runs, t_detail, t_compare), strict=True))
        _wire_launch(ctx, new, det, tabs)
        _wire_navigation(ctx, runs_t, det, compare_t, tabs, t_compare)
        _wire_page_state(ctx, demo, runs_t, det, compare_dd, tabs, tab_blocks)

        def who_text(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None) -> str:
            return auth.who_text(ctx, profile, oauth)

        demo.load(gate(ctx, "who", who_text), None, [who], api_name="who", show_progress="hidden")
    guard.seal(demo, ctx)
    demo.monitor = ctx.monitor.start() if ctx.monitor else None
    demo.ctx = ctx
    demo.form_keys = [f.key for f in new.fields]
    demo.tab_ids = TAB_IDS
    return demo


def _wire_launch(ctx: UiContext, new: new_run.NewRunTab, det: detail.DetailTab, tabs: gr.Tabs) -> None:
    launched = gr.Textbox(visible=False, elem_id="launched-run-id")

    def launch(user: access.User, *args: Any) -> dict[Any, Any]:
        try:
            access.check_user_may_launch(ctx.store, user, ctx.settings)
        except access.NotAllowed as exc:
            raise gr.Error(str(exc)) from None
        *vals, yaml_text = args
        values = {f.key: v for f, v in zip(new.fields, vals, strict=True)}
        spec, errors, warnings = new_run.check_form(values, yaml_text, ctx.base_dir, user, ctx.settings)
        if spec is None or errors:
            gr.Warning(f"Not launched: {len(errors)} problem(s), listed on the form.")
            return new_run.validate_outputs(new, errors, warnings, "")
        try:
            run = access.launch(
                spec, ctx.store, user, base_dir=ctx.base_dir, settings=ctx.settings, backends=ctx.backends
            )
        except SpecError as exc:
            return new_run.validate_outputs(new, exc.errors, [], "")
        except (access.NotAllowed, BackendError) as exc:
            raise gr.Error(access.redact(str(exc), user.token)) from None
        text = f"### ▶ Launched `{run.id}` ({run.status}). Opening its detail page…"
        choices = overview.run_choices(ctx.store, access.visible_runs(ctx.store, user, settings=ctx.settings))
        return {
            **new_run.validate_outputs(new, [], warnings, text),
            det.run: gr.update(choices=choices, value=run.id),
            tabs: gr.Tabs(selected="detail"),
            launched: run.id,
        }

    assert new.launch is not None  # set by new_run.build
    new.launch.click(
        gate(ctx, "launch", launch, what="launch", pass_user=True),
        [*new.inputs, new.yaml],
        [new.summary, *new.group_errors.values(), *new.inputs, det.run, tabs, launched],
        api_name="launch",
    )
    # The page follows the new run as soon as Launch answers (URL, status and charts), not once the run picker's
    # own change has gone round the queue; a launch that failed leaves the id unchanged and fires nothing.
    assert det.live_inputs is not None
    launched.change(None, [launched, *det.live_inputs[1:]], None, js=detail.FOLLOW_JS, api_visibility="private")


def row_run_id(table: Any, row: int | None) -> str | None:
    """The run id in row `row` of the runs table (a DataFrame or list of rows), or None."""
    if row is None:
        return None
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table or [], columns=overview.RUN_COLUMNS)
    if not 0 <= row < len(frame) or "id" not in frame.columns:
        return None
    return str(frame.iloc[row]["id"])


def _wire_navigation(
    ctx: UiContext,
    runs_t: runs_tab.RunsTab,
    det: detail.DetailTab,
    compare_t: compare.CompareTab,
    tabs: gr.Tabs,
    compare_tab: gr.Tab,
) -> None:
    compare_dd, compare_refresh = compare_t.runs, compare_t.refresh

    def mine(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None) -> tuple[access.User, list[Any]]:
        user = auth.user_of(ctx, profile, oauth)
        return user, overview.run_choices(ctx.store, access.visible_runs(ctx.store, user, settings=ctx.settings))

    def open_row(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, table: Any, evt: gr.SelectData) -> Any:
        run_id = row_run_id(table, evt.index[0] if evt is not None and evt.index else None)
        if run_id is None:
            return gr.skip()
        _, choices = mine(profile, oauth)
        if run_id not in {value for _, value in choices}:
            return gr.skip()
        return {det.run: gr.update(choices=choices, value=run_id), tabs: gr.Tabs(selected="detail")}

    runs_t.table.select(
        gate(ctx, "open_run", open_row),
        [runs_t.table],
        [det.run, tabs],
        api_name="open_run",
        api_visibility="undocumented",
    )

    def open_run(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str) -> dict[Any, Any]:
        user, choices = mine(profile, oauth)
        try:
            run = access.find_run(ctx.store, run_id, user, ctx.settings)
        except LookupError as exc:
            raise gr.Error(str(exc)) from None
        return {det.run: gr.update(choices=choices, value=run.id), tabs: gr.Tabs(selected="detail")}

    ref = gr.Textbox(visible=False, elem_id="open-run-ref")
    ref.submit(gate(ctx, "open_run_by_ref", open_run), [ref], [det.run, tabs], api_name="open_run_by_ref")

    def choices(
        profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, last: list[Any] | None
    ) -> dict[Any, Any]:
        _, current = mine(profile, oauth)
        if current == last:
            return {runs_t.last_choices: last}
        return {
            det.run: gr.update(choices=current),
            compare_dd: gr.update(choices=current),
            runs_t.last_choices: current,
        }

    def compare_choices(
        profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, chosen: list[str] | None
    ) -> dict[Any, Any]:
        # Opening Compare (or its Refresh) brings in runs launched since the page loaded; with nothing chosen yet,
        # the newest two are, so the tab never opens empty.
        _, current = mine(profile, oauth)
        ids = [value for _, value in current]
        keep = [r for r in (chosen or []) if r in ids]
        return {compare_dd: gr.update(choices=current, value=keep or ids[:2])}

    compare_open = gate(ctx, "compare_choices", compare_choices)
    for trigger in (compare_tab.select, compare_refresh.click):
        trigger(compare_open, [compare_dd], [compare_dd], show_progress="hidden", api_visibility="private")

    runs_t.timer.tick(
        gate(ctx, "run_choices", choices),
        [runs_t.last_choices],
        [det.run, compare_dd, runs_t.last_choices],
        api_name="run_choices",
        concurrency_limit=None,
        show_progress="hidden",
    )


def initial_view(
    ctx: UiContext, user: access.User, query: dict[str, str]
) -> tuple[list[tuple[str, str]], str | None, str]:
    """(run choices, run to show, tab to show) for a page just loaded with these query parameters: `?run=` (an id,
    id prefix or name the user may see) and `?tab=`; without them the newest run, and its detail tab when given."""
    choices = overview.run_choices(ctx.store, access.visible_runs(ctx.store, user, settings=ctx.settings))
    ref = (query.get("run") or "").strip()
    run_id = choices[0][1] if choices else None
    if ref:
        try:
            run_id = access.find_run(ctx.store, ref, user, ctx.settings).id
        except LookupError:
            pass
    tab = str(query.get("tab")) if query.get("tab") in TAB_IDS else ("detail" if ref and run_id else "new")
    return choices, run_id, tab


def chart_settings(query: dict[str, str]) -> dict[str, Any]:
    """The run page's chart settings from the URL (`smoothing=`, `log_y=1`, `x=`), each its default when absent or
    not one the page offers."""
    try:
        smoothing = min(0.99, max(0.0, float(query.get("smoothing", "0.6"))))
    except ValueError:
        smoothing = 0.6
    x = query.get("x", "step")
    return {
        "smoothing": smoothing,
        "log_y": query.get("log_y") == "1",
        "xaxis": x if x in charts.XAXES else "step",
    }


def _wire_page_state(
    ctx: UiContext,
    demo: gr.Blocks,
    runs_t: runs_tab.RunsTab,
    det: detail.DetailTab,
    compare_dd: gr.Dropdown,
    tabs: gr.Tabs,
    tab_blocks: dict[str, Any],
) -> None:
    """Fill the pickers when the page loads (from the URL's ?run= and ?tab=), keep the tab in the URL, and poll the
    runs table only while it is shown."""

    def load(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, search: str | None) -> dict[Any, Any]:
        user = auth.user_of(ctx, profile, oauth)
        query = dict(urllib.parse.parse_qsl((search or "").lstrip("?")))
        choices, run_id, tab = initial_view(ctx, user, query)
        ids = [value for _, value in choices]
        chosen = [r for r in (query.get("compare") or "").split(",") if r in ids]
        settings_ = chart_settings(query)
        assert det.live_inputs is not None  # set by detail.build
        _, smoothing, log_y, xaxis = det.live_inputs
        # The run the page opens on is the picker's value already, often: no change event fills its Resume and
        # Cancel controls (absent for an imported run), so the load does.
        shown = access.get_run(ctx.store, run_id, user, ctx.settings) if run_id else None
        return {
            **(det.resume.updates(ctx, run_id, user) if det.resume is not None else {}),
            **(det.manage.updates(ctx, run_id, user) if det.manage is not None else {}),
            **({det.parts.cancel: gr.update(visible=runs.can_cancel(shown))} if shown is not None else {}),
            det.run: gr.update(choices=choices, value=run_id),
            compare_dd: gr.update(choices=choices, value=chosen),  # the newest two once Compare is opened
            tabs: gr.Tabs(selected=tab),
            runs_t.timer: gr.Timer(active=tab == "runs"),
            runs_t.last_choices: choices,
            smoothing: settings_["smoothing"],
            log_y: settings_["log_y"],
            xaxis: settings_["xaxis"],
        }

    # The page's own query string (a queued event's request is Gradio's, not the page's URL).
    search = gr.Textbox(visible=False)
    page_js = "() => [window.grpoLive ? window.grpoLive.initialSearch : window.location.search]"
    demo.load(
        gate(ctx, "page_state", load),
        [search],
        [
            det.run,
            compare_dd,
            tabs,
            runs_t.timer,
            runs_t.last_choices,
            *(det.live_inputs or [])[1:],
            *(det.resume.listed() if det.resume is not None else []),
            *(det.manage.listed() if det.manage is not None else []),
            det.parts.cancel,
        ],
        api_name="page_state",
        show_progress="hidden",
        js=page_js,
    ).then(None, det.live_inputs, None, js=detail.FOLLOW_JS, api_visibility="private")
    compare_dd.change(
        None,
        [compare_dd],
        None,
        js="(ids) => { window.grpoLive && window.grpoLive.setParam('compare', (ids || []).join(',')); return []; }",
        api_visibility="private",
    )
    for tab_id, block in tab_blocks.items():
        url_js = f"() => {{ window.grpoLive && window.grpoLive.setTab('{tab_id}'); return []; }}"
        timer_on = gate(ctx, "tab_timer", lambda tid=tab_id: gr.Timer(active=tid == "runs"))
        block.select(
            timer_on, None, [runs_t.timer], show_progress="hidden", queue=False, api_visibility="private", js=url_js
        )
