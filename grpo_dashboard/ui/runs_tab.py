"""The "Runs" tab: every run with status, progress, elapsed, ETA, latest reward and health, refreshed by a timer.

On a Space the table holds only the signed-in user's runs, and starts empty (the page's initial values are public).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from grpo_dashboard.space import access
from grpo_dashboard.ui import byo_trl
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import overview

POLL_S = 2.0


@dataclass
class RunsTab:
    """Components the app wires to the run detail tab."""

    table: gr.Dataframe
    status_filter: gr.CheckboxGroup
    timer: gr.Timer
    last_choices: gr.State  # the run choices the pickers were last given (the app's refresh compares)


def build(ctx: UiContext) -> RunsTab:
    """Lay out the tab and wire its refresh."""
    status_filter = gr.CheckboxGroup(
        list(overview.STATUSES), value=[], label="Show only these statuses (none ticked: all)", elem_id="runs-filter"
    )
    initial = overview.runs_frame(ctx.store, runs=[] if ctx.settings.on_space else None)
    table = gr.Dataframe(
        initial,
        interactive=False,
        elem_id="runs-table",
        label="Runs (click a row to open it)",
        max_height=600,
        wrap=False,
    )
    timer = gr.Timer(POLL_S, active=False)  # ticks while the tab is shown (the app switches it)
    last_choices = gr.State(None)
    tag = byo_trl.runs_tools(ctx)  # tag filter, import a run made elsewhere

    def refresh(
        profile: gr.OAuthProfile | None,
        oauth: gr.OAuthToken | None,
        statuses: list[str] | None,
        tag_filter: str | None = None,
    ) -> Any:
        user = user_of(ctx, profile, oauth)
        # after a restart, with this user's own token
        access.resume_following(ctx.store, user, ctx.settings, ctx.backends)
        mine = access.visible_runs(ctx.store, user, list(statuses) if statuses else None, ctx.settings)
        return overview.runs_frame(ctx.store, statuses or None, runs=mine, tag=tag_filter)

    gr.on(
        [timer.tick, status_filter.change, tag.submit],
        gate(ctx, "runs_table", refresh),
        [status_filter, tag],
        [table],
        api_name="runs_table",
        concurrency_limit=None,
        show_progress="hidden",
        trigger_mode="always_last",
    )
    return RunsTab(table, status_filter, timer, last_choices)
