"""`build_app()`: the whole dashboard as a gr.Blocks, wired across tabs; the only place the tabs meet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from grpo_dashboard import settings
from grpo_dashboard.errors import BackendError, SpecError
from grpo_dashboard.launch import hub_client, runs
from grpo_dashboard.space import access
from grpo_dashboard.spec import presets
from grpo_dashboard.store.db import Store
from grpo_dashboard.ui import auth, compare, detail, new_run, preflight, runs_tab
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import guarded
from grpo_dashboard.ui.serving import DashboardBlocks, short_circuit_missing_optional_imports
from grpo_dashboard.views import overview

CSS = """
.field-errors { color: #b42318; }
#runs-table table { font-variant-numeric: tabular-nums; }
#samples-table td { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 12px; }
"""


def launch_options() -> dict[str, Any]:
    """Keyword arguments for `demo.launch()` (theme and CSS moved there in Gradio 6)."""
    return {"theme": gr.themes.Soft(), "css": CSS}


def build_app(store: Store | None = None, base_dir: str | Path | None = None, monitor: bool = True
              ) -> DashboardBlocks:
    """The dashboard app; starts one ingestion Monitor for the store (as `demo.monitor`) unless `monitor=False`.

    Args:
        store: the run store (default: `Store()` in $GRPO_DASHBOARD_DATA_DIR).
        base_dir: directory that relative paths of launched specs resolve against (default: the project root,
            where `examples/` lives).
        monitor: start the background thread that ingests active runs' metrics.
    """
    short_circuit_missing_optional_imports()
    store = store or Store()
    if settings.on_space():
        hub_client.forbid_implicit_hub_token()
    ctx = UiContext(store, Path(base_dir) if base_dir else presets.PROJECT_ROOT,
                    runs.Monitor(store, on_end=overview.health_badge) if monitor else None)
    with DashboardBlocks(title="GRPO Dashboard") as demo:
        gr.Markdown("## GRPO Dashboard · configure, launch and watch TRL GRPO runs")
        who = auth.header(ctx)
        with gr.Tabs(selected="new", elem_id="main-tabs") as tabs:
            with gr.Tab("New run", id="new", elem_id="tab-new"):
                new = new_run.build(ctx)
            with gr.Tab("Pre-flight", id="preflight", elem_id="tab-preflight"):
                preflight.build(ctx, new.yaml)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs"):
                runs_t = runs_tab.build(ctx)
            with gr.Tab("Run detail", id="detail", elem_id="tab-detail"):
                det = detail.build(ctx)
            with gr.Tab("Compare", id="compare", elem_id="tab-compare"):
                compare_dd = compare.build(ctx)
        _wire_launch(ctx, new, det, tabs)
        _wire_navigation(ctx, runs_t, det, compare_dd, tabs)

        def who_text(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None) -> str:
            return auth.who_text(ctx, profile, oauth)

        demo.load(who_text, None, [who], api_name="who", show_progress="hidden")
    demo.monitor = ctx.monitor.start() if ctx.monitor else None
    demo.form_keys = [f.key for f in new.fields]
    return demo


def _wire_launch(ctx: UiContext, new: new_run.NewRunTab, det: detail.DetailTab, tabs: gr.Tabs) -> None:
    def launch(user: access.User, *args: Any) -> list[Any]:
        try:
            access.check_user_may_launch(ctx.store, user, ctx.settings)
        except access.NotAllowed as exc:
            raise gr.Error(str(exc)) from None
        *vals, yaml_text = args
        values = {f.key: v for f, v in zip(new.fields, vals, strict=True)}
        spec, errors, warnings = new_run.check_form(values, yaml_text, ctx.base_dir, user, ctx.settings)
        if spec is None or errors:
            gr.Warning(f"Not launched: {len(errors)} problem(s), listed on the form.")
            return [*new_run.validate_outputs(new, errors, warnings, ""), gr.skip(), gr.skip(), gr.skip()]
        try:
            run = access.launch(spec, ctx.store, user, base_dir=ctx.base_dir, settings=ctx.settings)
        except SpecError as exc:
            return [*new_run.validate_outputs(new, exc.errors, [], ""), gr.skip(), gr.skip(), gr.skip()]
        except (access.NotAllowed, BackendError) as exc:
            raise gr.Error(access.redact(str(exc), user.token)) from None
        text = f"### ▶ Launched `{run.id}` ({run.status}). Opening its detail page…"
        outputs = new_run.validate_outputs(new, [], warnings, text)
        choices = overview.run_choices(ctx.store, access.visible_runs(ctx.store, user, settings=ctx.settings))
        return [*outputs, gr.update(choices=choices, value=run.id), gr.Tabs(selected="detail"), run.id]

    launched = gr.Textbox(visible=False, elem_id="launched-run-id")
    new.launch.click(guarded(ctx, launch, what="launch", sign_in=False, pass_user=True), [*new.inputs, new.yaml],
                     [new.summary, *new.group_errors.values(), *new.inputs, det.run, tabs, launched],
                     api_name="launch")


def row_run_id(table: Any, row: int | None) -> str | None:
    """The run id in row `row` of the runs table (a DataFrame or list of rows), or None."""
    if row is None:
        return None
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table or [], columns=overview.RUN_COLUMNS)
    if not 0 <= row < len(frame) or "id" not in frame.columns:
        return None
    return str(frame.iloc[row]["id"])


def _wire_navigation(ctx: UiContext, runs_t: runs_tab.RunsTab, det: detail.DetailTab, compare_dd: gr.Dropdown,
                     tabs: gr.Tabs) -> None:
    def mine(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None) -> tuple[access.User, list[Any]]:
        user = auth.user_of(ctx, profile, oauth)
        return user, overview.run_choices(ctx.store, access.visible_runs(ctx.store, user, settings=ctx.settings))

    def open_row(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, table: Any,
                 evt: gr.SelectData) -> list[Any]:
        run_id = row_run_id(table, evt.index[0] if evt is not None and evt.index else None)
        if run_id is None:
            return [gr.skip(), gr.skip()]
        _, choices = mine(profile, oauth)
        if run_id not in {value for _, value in choices}:
            return [gr.skip(), gr.skip()]
        return [gr.update(choices=choices, value=run_id), gr.Tabs(selected="detail")]

    runs_t.table.select(open_row, [runs_t.table], [det.run, tabs], api_name="open_run",
                        api_visibility="undocumented")

    def open_run(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str) -> list[Any]:
        user, choices = mine(profile, oauth)
        try:
            run = access.find_run(ctx.store, run_id, user, ctx.settings)
        except LookupError as exc:
            raise gr.Error(str(exc)) from None
        return [gr.update(choices=choices, value=run.id), gr.Tabs(selected="detail")]

    ref = gr.Textbox(visible=False, elem_id="open-run-ref")
    ref.submit(open_run, [ref], [det.run, tabs], api_name="open_run_by_ref")

    def choices(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, last: list[Any] | None) -> list[Any]:
        _, current = mine(profile, oauth)
        if current == last:
            return [gr.skip(), gr.skip(), last]
        return [gr.update(choices=current), gr.update(choices=current), current]

    last_choices = gr.State(overview.run_choices(ctx.store, runs=[] if ctx.settings.on_space else None))
    runs_t.timer.tick(choices, [last_choices], [det.run, compare_dd, last_choices], api_name="run_choices",
                      concurrency_limit=None, show_progress="hidden")
