"""Managing one run from its detail page: rename it, keep a note on it, delete it (with its run directory, after
the browser's confirmation). On a Space only a signed-in user's own runs (access.manage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from grpo_dashboard.errors import BackendError, RunNotFound, StoreError
from grpo_dashboard.launch import runs
from grpo_dashboard.space import access
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import overview

MAX_NAME = 120
MAX_NOTE = 4000


@dataclass
class ManageRun:
    """The section's components."""

    name: gr.Textbox
    note: gr.Textbox
    message: gr.Markdown


def _choices(ctx: UiContext, user: access.User) -> list[tuple[str, str]]:
    return overview.run_choices(ctx.store, access.visible_runs(ctx.store, user, settings=ctx.settings))


def rename(ctx: UiContext, user: access.User, run_id: str | None, name: str) -> str:
    """Rename a run; the message to show."""
    name = (name or "").strip()
    if not run_id:
        raise gr.Error("Select a run first.")
    if not name or len(name) > MAX_NAME or "\n" in name:
        raise gr.Error(f"name: {name[:40]!r} is not usable: give 1 to {MAX_NAME} characters on one line.")
    run = _mine(ctx, user, run_id)
    try:
        ctx.store.rename_run(run.id, name)
    except ValueError as exc:  # another run has that name
        raise gr.Error(str(exc)) from None
    return f"Renamed `{run.id}` to **{name}**."


def save_note(ctx: UiContext, user: access.User, run_id: str | None, note: str) -> str:
    """Keep a note on a run; the message to show."""
    if not run_id:
        raise gr.Error("Select a run first.")
    if len(note or "") > MAX_NOTE:
        raise gr.Error(f"note: {len(note):,} characters is over the limit of {MAX_NOTE:,}; shorten it.")
    run = _mine(ctx, user, run_id)
    ctx.store.set_note(run.id, note or "")
    return f"Note saved on `{run.id}`." if (note or "").strip() else f"Note removed from `{run.id}`."


def delete(ctx: UiContext, user: access.User, run_id: str | None) -> str:
    """Delete an ended run with its run directory; the message to show."""
    if not run_id:
        raise gr.Error("Select a run first.")
    run = _mine(ctx, user, run_id)
    try:
        notes = runs.delete(ctx.store, run)
    except (BackendError, StoreError) as exc:
        raise gr.Error(str(exc)) from None
    return " ".join([f"Deleted `{run.id}` ({run.name}) and its files.", *notes])


def _mine(ctx: UiContext, user: access.User, run_id: str) -> Any:
    try:
        return access.manage(ctx.store, run_id, user, ctx.settings)
    except (RunNotFound, access.NotAllowed) as exc:
        raise gr.Error(str(exc)) from None


def build(ctx: UiContext, run_dd: gr.Dropdown) -> ManageRun:
    """The "Manage run" accordion under the run picker, wired to it."""
    with gr.Accordion("Manage run: rename, note, delete", open=False, elem_id="manage-run"):
        with gr.Row():
            name = gr.Textbox(label="Name", max_lines=1, scale=3, elem_id="manage-name")
            rename_btn = gr.Button("Rename", scale=1, elem_id="rename-btn")
        with gr.Row():
            note = gr.Textbox(
                label="Note (what this run tries, what you saw)", lines=2, scale=3, elem_id="manage-note"
            )
            note_btn = gr.Button("Save note", scale=1, elem_id="note-btn")
        delete_btn = gr.Button("Delete this run and its files…", variant="stop", size="sm", elem_id="delete-btn")
        message = gr.Markdown(elem_id="manage-message")
        # set by Delete: the picker's move to another run that follows keeps the "Deleted …" message on screen
        just_deleted = gr.State(False)

    def fill(
        profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None, deleted: bool = False
    ) -> dict[Any, Any]:
        user = user_of(ctx, profile, oauth)
        try:
            run = access.get_run(ctx.store, run_id, user, ctx.settings) if run_id else None
        except RunNotFound:
            run = None
        shown = {message: gr.skip() if deleted else "", just_deleted: False}
        if run is None:
            return {name: "", note: "", **shown}
        return {name: run.name, note: ctx.store.notes().get(run.id, ""), **shown}

    run_dd.change(
        gate(ctx, "manage_fill", fill),
        [run_dd, just_deleted],
        [name, note, message, just_deleted],
        show_progress="hidden",
        queue=False,
        api_visibility="private",
    )

    def do_rename(
        profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None, new_name: str
    ) -> dict[Any, Any]:
        user = user_of(ctx, profile, oauth)
        text = rename(ctx, user, run_id, new_name)
        return {message: text, run_dd: gr.update(choices=_choices(ctx, user), value=run_id)}

    rename_btn.click(gate(ctx, "rename_run", do_rename), [run_dd, name], [message, run_dd], api_name="rename_run")

    def do_note(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None, text: str) -> str:
        return save_note(ctx, user_of(ctx, profile, oauth), run_id, text)

    note_btn.click(gate(ctx, "note_run", do_note), [run_dd, note], [message], api_name="note_run")

    def do_delete(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None) -> Any:
        if run_id is None:  # the confirmation was declined
            return gr.skip()
        user = user_of(ctx, profile, oauth)
        text = delete(ctx, user, run_id)
        choices = _choices(ctx, user)
        return {
            message: text,
            run_dd: gr.update(choices=choices, value=choices[0][1] if choices else None),
            just_deleted: bool(choices),
        }

    confirm = (
        "(r) => (r && window.confirm('Delete run ' + r + ' and its run directory (metrics, log, samples, "
        "checkpoints)? This cannot be undone.') ? [r] : [null])"
    )
    delete_btn.click(
        gate(ctx, "delete_run", do_delete),
        [run_dd],
        [message, run_dd, just_deleted],
        api_name="delete_run",
        js=confirm,
    )
    return ManageRun(name, note, message)
