"""Managing one run from its detail page: rename it, keep a note on it, edit its tags, delete it (with its run
directory, after the browser's confirmation). On a Space only a signed-in user's own runs (access.manage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from grpo_dashboard.errors import BackendError, RunNotFound, StoreError
from grpo_dashboard.launch import runs
from grpo_dashboard.space import access
from grpo_dashboard.store import run_labels
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import overview

MAX_NAME = 120
MAX_NOTE = 4000
MAX_TAGS = 32
# Tags the dashboard sets itself: where a run came from, which its handling depends on; editing keeps them.
KEPT_TAGS = ("external", "imported")


@dataclass
class ManageRun:
    """The section's components."""

    name: gr.Textbox
    note: gr.Textbox
    tags: gr.Textbox
    message: gr.Markdown
    filled_for: gr.State  # the run the boxes hold

    def listed(self) -> list[gr.components.Component]:
        """The boxes `updates` fills, in output order."""
        return [self.name, self.note, self.tags, self.filled_for]

    def updates(self, ctx: UiContext, run_id: str | None, user: access.User) -> dict[Any, Any]:
        """The boxes for `run_id` (the page's load: the run it opens on is often the picker's value already, so no
        change event fills them)."""
        name, note, tags = _boxes(ctx, user, run_id)
        return {self.name: name, self.note: note, self.tags: tags, self.filled_for: run_id}


def _boxes(ctx: UiContext, user: access.User, run_id: str | None) -> tuple[str, str, str]:
    """(name, note, tags) of a run the user may see; empty ones for none."""
    try:
        run = access.get_run(ctx.store, run_id, user, ctx.settings) if run_id else None
    except RunNotFound:
        run = None
    if run is None:
        return "", "", ""
    return run.name, ctx.store.notes().get(run.id, ""), ", ".join(run_labels.run_tags(run))


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


def save_tags(ctx: UiContext, user: access.User, run_id: str | None, text: str) -> str:
    """Set a run's tags to the comma-separated `text` (the dashboard's own tags stay); the message to show."""
    if not run_id:
        raise gr.Error("Select a run first.")
    wanted = list(dict.fromkeys(t.strip() for t in (text or "").split(",") if t.strip()))
    if len(wanted) > MAX_TAGS:
        raise gr.Error(f"tags: {len(wanted)} tags is over the limit of {MAX_TAGS}; keep fewer.")
    run = _mine(ctx, user, run_id)
    before = run_labels.run_tags(run)
    kept = [t for t in before if t in KEPT_TAGS and t not in wanted]
    try:
        tags = run_labels.set_tags(
            ctx.store, run, [t for t in wanted if t not in before], [t for t in before if t not in wanted + kept]
        )
    except ValueError as exc:
        raise gr.Error(f"tags: {exc}") from None
    shown = ", ".join(f"`{t}`" for t in tags) or "none"
    note = f" ({', '.join(kept)} kept: the dashboard sets it)" if kept else ""
    return f"Tags of `{run.id}`: {shown}{note}."


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
    with gr.Accordion("Manage run: rename, note, tags, delete", open=False, elem_id="manage-run"):
        with gr.Row():
            name = gr.Textbox(label="Name", max_lines=1, scale=3, elem_id="manage-name")
            rename_btn = gr.Button("Rename", scale=1, elem_id="rename-btn")
        with gr.Row():
            note = gr.Textbox(
                label="Note (what this run tries, what you saw)", lines=2, scale=3, elem_id="manage-note"
            )
            note_btn = gr.Button("Save note", scale=1, elem_id="note-btn")
        with gr.Row():
            tags = gr.Textbox(label="Tags (comma-separated)", max_lines=1, scale=3, elem_id="manage-tags")
            tags_btn = gr.Button("Save tags", scale=1, elem_id="tags-btn")
        delete_btn = gr.Button("Delete this run and its files…", variant="stop", size="sm", elem_id="delete-btn")
        message = gr.Markdown(elem_id="manage-message")
        # set by Delete: the picker's move to another run that follows keeps the "Deleted …" message on screen
        just_deleted = gr.State(False)
        # the run the boxes were filled for: the picker refreshing its choices (a status change) re-sends the same
        # run, and refilling then would wipe what the user is typing
        filled_for = gr.State(None)

    def fill(
        profile: gr.OAuthProfile | None,
        oauth: gr.OAuthToken | None,
        run_id: str | None,
        deleted: bool = False,
        filled: str | None = None,
    ) -> dict[Any, Any]:
        if run_id and run_id == filled and not deleted:
            return {name: gr.skip(), note: gr.skip(), tags: gr.skip(), message: gr.skip(), just_deleted: False}
        values = _boxes(ctx, user_of(ctx, profile, oauth), run_id)
        shown = {message: gr.skip() if deleted else "", just_deleted: False, filled_for: run_id}
        return {name: values[0], note: values[1], tags: values[2], **shown}

    run_dd.change(
        gate(ctx, "manage_fill", fill),
        [run_dd, just_deleted, filled_for],
        [name, note, tags, message, just_deleted, filled_for],
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

    def do_tags(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None, text: str) -> str:
        return save_tags(ctx, user_of(ctx, profile, oauth), run_id, text)

    tags_btn.click(gate(ctx, "tag_run", do_tags), [run_dd, tags], [message], api_name="tag_run")

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
    return ManageRun(name, note, tags, message, filled_for)
