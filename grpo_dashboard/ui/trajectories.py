"""The "Trajectories" tab of Run detail: an agent run's samples as conversations (tool calls, results, failures),
browsed by step, filtered by an extra column (environment, task, log_extra), sorted by reward, advantage, turns or
tool calls. Handlers resolve the run through access.py like the rest of the tab."""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr

from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.space import access
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import completions, overview, trajectories

MAX_SHOWN = 16


class Shown(NamedTuple):
    """What the tab shows for a run and step."""

    step: Any  # the step dropdown's update
    table: Any  # the summary table
    body: str  # Markdown of the shown trajectories


def render(
    ctx: UiContext,
    run_id: str | None,
    step: Any,
    column_filter: str,
    sort_by: str,
    descending: bool,
    *,
    user: access.User | None = None,
) -> Shown:
    """The step dropdown update, summary table and Markdown of the shown trajectories."""
    user = user or access.current_user(None, None, ctx.settings)
    if not run_id:
        return Shown(step=gr.update(), table=None, body="Select a run.")
    try:
        run = access.get_run(ctx.store, run_id, user, ctx.settings)
    except (access.AccessDenied, RunNotFound) as exc:
        return Shown(step=gr.update(), table=None, body=str(exc))
    steps = completions.sample_steps(run.run_dir, run.output_dir)
    chosen = int(step) if step not in (None, "") and int(step) in steps else (steps[-1] if steps else None)
    rows = completions.read_step(run.run_dir, chosen, run.output_dir) if chosen is not None else []
    spec = overview.run_spec(run)
    weights = {r.name: r.weight for r in spec.rewards} if spec is not None else {}
    filters = dict(part.split("=", 1) for part in (column_filter or "").split(",") if "=" in part)
    trajs = trajectories.trajectories(
        rows, weights, {k.strip(): v.strip() for k, v in filters.items()}, sort_by, bool(descending)
    )
    columns = trajectories.filter_values(rows)
    head = f"Step {chosen}: {len(trajs)} of {len(rows)} samples" + (
        f"; filter with e.g. `{next(iter(columns))}={columns[next(iter(columns))][0]}`" if columns else ""
    )
    body = "\n\n---\n\n".join(trajectories.markdown(t) for t in trajs[:MAX_SHOWN])
    return Shown(
        step=gr.update(choices=[str(s) for s in steps], value=str(chosen) if chosen is not None else None),
        table=trajectories.summary_frame(trajs),
        body=f"{head}\n\n{body}",
    )


def build(ctx: UiContext, run_dd: gr.Dropdown) -> None:
    """The tab's controls and outputs (inside the Run detail tabs)."""
    with gr.Tab("Trajectories", id="trajectories", elem_id="tab-trajectories") as tab:
        with gr.Row():
            step = gr.Dropdown([], label="Step", allow_custom_value=True, elem_id="traj-step")
            column_filter = gr.Textbox(label="Filter (column=value, ...)", elem_id="traj-filter")
            sort_by = gr.Dropdown(
                list(trajectories.SORTS), value=trajectories.SORTS[0], label="Sort by", elem_id="traj-sort"
            )
            descending = gr.Checkbox(True, label="Descending", elem_id="traj-desc")
            show = gr.Button("Show", elem_id="traj-show")
        table = gr.Dataframe(interactive=False, wrap=True, max_height=300, elem_id="traj-table")
        body = gr.Markdown(elem_id="traj-body")

    def update(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, *args: Any) -> dict[Any, Any]:
        shown = render(ctx, *args, user=user_of(ctx, profile, oauth))
        return {step: shown.step, table: shown.table, body: shown.body}

    gr.on(
        # opening the tab shows the latest sampled step at once; Show re-reads it
        [tab.select, show.click, step.input, sort_by.input, descending.input, column_filter.submit],
        gate(ctx, "detail_trajectories", update),
        [run_dd, step, column_filter, sort_by, descending],
        [step, table, body],
        api_name="detail_trajectories",
        show_progress="hidden",
    )
