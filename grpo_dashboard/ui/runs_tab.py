"""The "Runs" tab: every run with status, progress, elapsed, ETA, latest reward and health, refreshed by a timer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from .. import overview
from .context import UiContext

POLL_S = 2.0


@dataclass
class RunsTab:
    """Components the app wires to the run detail tab."""

    table: gr.Dataframe
    status_filter: gr.CheckboxGroup
    timer: gr.Timer


def build(ctx: UiContext) -> RunsTab:
    """Lay out the tab and wire its refresh."""
    status_filter = gr.CheckboxGroup(list(overview.STATUSES), value=[], label="Show only these statuses "
                                     "(none ticked: all)", elem_id="runs-filter")
    table = gr.Dataframe(overview.runs_frame(ctx.store), interactive=False, elem_id="runs-table",
                         label="Runs (click a row to open it)", max_height=600, wrap=False)
    timer = gr.Timer(POLL_S)

    def refresh(statuses: list[str] | None) -> Any:
        return overview.runs_frame(ctx.store, statuses or None)

    gr.on([timer.tick, status_filter.change], refresh, [status_filter], [table], api_name="runs_table",
          concurrency_limit=None, show_progress="hidden", trigger_mode="always_last")
    return RunsTab(table, status_filter, timer)
