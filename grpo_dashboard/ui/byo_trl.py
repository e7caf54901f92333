"""Bring your own TRL workflow, in the UI: import a TRL config (New run), resume a run from a checkpoint and download
its metrics (Run detail), import a run made elsewhere and filter runs by tag (Runs). Each tab calls one function here.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from grpo_dashboard.errors import BackendError, RunNotFound, SpecError
from grpo_dashboard.launch import runs
from grpo_dashboard.space import access
from grpo_dashboard.ui import new_run
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import overview


# --- New run: import a TRL config -------------------------------------------------------------------------------
def mapping_markdown(rows: list[Any], version: str, reason: str, check: str | None) -> str:
    """The import's mapping table as Markdown: the rows that changed something (converted, pinned, dropped,
    unsupported, ignored) first, in full; the keys kept as they are folded below them."""

    def table(part: list[Any]) -> list[str]:
        out = ["| key | action | spec field | note |", "|---|---|---|---|"]
        for r in part:
            note = str(r.note).replace("|", "\\|")
            out.append(f"| `{r.key}` | {r.action} | {('`' + r.target + '`') if r.target else '—'} | {note} |")
        return out

    changed = [r for r in rows if r.action != "mapped"]
    kept = [r for r in rows if r.action == "mapped"]
    lines = [f"TRL defaults of **{version}** ({reason}).", ""]
    if changed:
        lines += [f"**{len(changed)} of {len(rows)} keys need a look** (not kept as written):", "", *table(changed)]
    else:
        lines.append(f"All {len(rows)} keys were kept as written.")
    if kept:
        lines += [
            "",
            f"<details><summary>{len(kept)} keys kept as written</summary>",
            "",
            *table(kept),
            "",
            "</details>",
        ]
    if check:
        lines += ["", f"TRL's own check (one process here): {check}"]
    return "\n".join(lines)


def _upload_root() -> Path:
    """gradio's upload folder: on a Space an upload must be a file inside it."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder())


def _shown(text: str, on_space: bool) -> str:
    """An answer as a Space shows it: without the server's paths."""
    return access.scrub_paths(text) if on_space else text


def import_trl_text(text: str | None, upload: Any) -> tuple[str, str]:
    """(spec YAML, mapping table Markdown) of a pasted or uploaded TRL config; gr.Error naming what is wrong.

    Nothing is written. TRL's own parser and checks run in a subprocess (checks/trl_check: the dashboard process
    never imports trl), on a Space a limited one in the sandbox; there the recipe may not name files on the server's
    disk, an upload must be one of gradio's, and answers carry no server path; an upload is named by its own file name.
    """
    from grpo_dashboard.checks import trl_check
    from grpo_dashboard.settings import on_space
    from grpo_dashboard.spec.file_policy import FileRefused, upload_path
    from grpo_dashboard.spec.trl_import import import_recipe
    from grpo_dashboard.spec.trl_parse import recipe_from_file, recipe_from_text

    space = on_space()
    try:
        if upload:
            given = Path(upload if isinstance(upload, str) else upload.name)
            path = upload_path(given, _upload_root() if space else None, "upload")
            recipe = recipe_from_file(path, label=given.name, on_space=space)
        elif text and text.strip():
            recipe = recipe_from_text(text, on_space=space)
        else:
            raise gr.Error("Paste a TRL config (trl grpo --config YAML) or upload one.")
        result = import_recipe(recipe, parse=trl_check.parse_isolated if space else trl_check.parse_local)
    except (SpecError, FileRefused) as exc:
        raise gr.Error(_shown(str(exc), space)) from None
    from grpo_dashboard.spec.trl_import_result import missing_hint

    table = mapping_markdown(result.rows, result.trl_version, result.version_reason, result.trl_check)
    missing = result.missing()
    table += "\n\n" + (f"**Incomplete:** {missing_hint(missing)}.\n\n" if missing else "")
    table += f"**Import:** {result.summary()}."
    return result.spec.to_yaml(), _shown(table, space)


class ImportPanel(NamedTuple):
    """The "Import a TRL config" panel's components (placed above the New run form, wired once the form exists)."""

    pasted: Any
    upload: Any
    button: Any
    table: Any


def import_panel() -> ImportPanel:
    """The panel, closed: a user with a recipe starts here, before the long form."""
    with gr.Accordion("Import a TRL config (trl grpo --config, open-r1, ...)", open=False, elem_id="trl-import"):
        pasted = gr.Code(language="yaml", label="TRL config YAML", lines=8, interactive=True, elem_id="trl-paste")
        upload = gr.File(label="…or upload it", file_types=[".yaml", ".yml"], elem_id="trl-upload")
        button = gr.Button("Import", elem_id="trl-import-btn")
        table = gr.Markdown(elem_id="trl-mapping")
    return ImportPanel(pasted, upload, button, table)


def new_run_import(ctx: UiContext, tab: new_run.NewRunTab, panel: ImportPanel) -> None:
    """Wire the panel: Import fills the tab's YAML (and form) with the imported spec."""
    from grpo_dashboard.spec import forms

    pasted, upload, button, table = panel

    def run(text: str | None, file: Any) -> dict[Any, Any]:
        spec_yaml, md = import_trl_text(text, file)
        return {
            tab.yaml: spec_yaml,
            tab.command: new_run._command(spec_yaml),
            table: md,
            **new_run._form_updates(tab, forms.values_from_yaml(spec_yaml)),
        }

    button.click(
        gate(ctx, "import_trl", run, what="TRL import"),
        [pasted, upload],
        [tab.yaml, tab.command, table, *tab.inputs],
        api_name="import_trl",
    )


# --- Run detail: resume, metrics download -----------------------------------------------------------------------
def resume_choices(ctx: UiContext, run_id: str | None, user: access.User) -> tuple[list[str], str | None, str]:
    """(checkpoint steps, the one to preselect, a note) for a run: before the onset of its worst finding, if any."""
    from grpo_dashboard.launch.resume import checkpoint_before, checkpoints

    if not run_id:
        return [], None, ""
    try:
        run = access.get_run(ctx.store, run_id, user, ctx.settings)
    except RunNotFound:
        return [], None, ""
    refused = runs.why_not_resumable(run)
    if refused is not None:
        return [], None, refused
    steps = [str(s) for s in checkpoints(ctx.store, run, ctx.backends)]
    if not steps:
        return [], None, "No checkpoints (set `save_strategy: steps` and `save_steps` to be able to resume)."
    bad = [f for f in overview.findings(ctx.store, run) if f.severity in ("error", "warning")]
    if bad:
        worst = min(bad, key=lambda f: (f.severity != "error", f.step))
        before = checkpoint_before(ctx.store, run, int(worst.step), ctx.backends)
        if before is not None:
            return (
                steps,
                str(before[0]),
                (f"**{worst.rule}** since step {worst.step}: resume from checkpoint {before[0]}, before its onset."),
            )
    return steps, steps[-1], f"Latest checkpoint: {steps[-1]}."


def _resumable(ctx: UiContext, run_id: str | None, user: access.User) -> bool:
    try:
        return not run_id or runs.why_not_resumable(access.get_run(ctx.store, run_id, user, ctx.settings)) is None
    except RunNotFound:
        return True


def export_file(ctx: UiContext, user: access.User, run_id: str | None, suffix: str) -> str:
    """The path of a file holding the run's metrics, for gradio to serve (it copies it into its cache): written to
    the dashboard's temp area, which deletes it after temp_area.LIFETIME_S. gr.Error naming what is wrong."""
    from grpo_dashboard.store import temp_area
    from grpo_dashboard.store.export import FORMATS, export_metrics

    space = ctx.settings.on_space
    if suffix not in FORMATS:
        raise gr.Error(f"Metrics format {str(suffix)[:20]!r} is not one of {', '.join(FORMATS)}; choose one of them.")
    try:
        run = access.get_run(ctx.store, run_id or "", user, ctx.settings)
    except RunNotFound as exc:
        raise gr.Error(_shown(str(exc), space)) from None
    folder = temp_area.short_lived("metrics")
    path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', run.id)}{suffix}"
    try:
        export_metrics(ctx.store, run.id, path)
    except (OSError, ValueError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise gr.Error(_shown(f"The metrics of {run.id} could not be written ({exc}); try again.", space)) from None
    return str(path)


MAX_STEPS_LIMIT = 10**9


def new_max_steps(value: Any) -> int | None:
    """The New max_steps box as an int (None when empty); gr.Error naming the field for anything but a whole number
    from 1 to MAX_STEPS_LIMIT."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number == int(number) and 1 <= number <= MAX_STEPS_LIMIT):
        raise gr.Error(
            f"New max_steps = {str(value)[:30]!r} is not a whole number from 1 to {MAX_STEPS_LIMIT:,}; give the step "
            "the resumed run should end at, or leave it empty to keep the run's own."
        )
    return int(number)


@dataclass
class ResumeParts:
    """The Resume controls of Run detail."""

    checkpoint: gr.Dropdown
    button: gr.Button
    note: gr.Markdown
    max_steps: gr.Number

    def listed(self) -> list[gr.components.Component]:
        """The components, in output order."""
        return [self.checkpoint, self.note, self.button, self.max_steps]

    def updates(self, ctx: UiContext, run_id: str | None, user: access.User) -> dict[Any, Any]:
        """The controls for `run_id`: its checkpoints and note; none for a run the dashboard started no job of."""
        steps, chosen, text = resume_choices(ctx, run_id, user)
        shown = _resumable(ctx, run_id, user)
        return {
            self.checkpoint: gr.update(choices=steps, value=chosen, visible=shown),
            self.button: gr.update(visible=shown),
            self.note: text,
            self.max_steps: gr.update(value=None, visible=shown),
        }


def detail_tools(ctx: UiContext, run_dd: gr.Dropdown) -> ResumeParts:
    """A Resume action (checkpoint picker) and an Export metrics download, folded; the note on resuming (no
    checkpoints, an imported run) stays in view."""
    with gr.Accordion("Resume from a checkpoint, export metrics", open=False, elem_id="detail-tools"), gr.Row():
        checkpoint = gr.Dropdown([], label="Checkpoint", allow_custom_value=True, scale=1, elem_id="resume-ckpt")
        new_end = gr.Number(
            None,
            label="New max_steps",
            info="needed to train on past the run's end",
            precision=0,
            minimum=1,
            scale=1,
            elem_id="resume-max-steps",
        )
        resume_btn = gr.Button("Resume run", scale=1, elem_id="resume-btn")
        fmt = gr.Dropdown(
            [".csv", ".jsonl", ".parquet"], value=".csv", label="Metrics format", scale=1, elem_id="export-format"
        )
        export_btn = gr.Button("Export metrics", scale=1, elem_id="export-btn")
        download = gr.File(label="Metrics file", scale=2, elem_id="export-file")
    note = gr.Markdown(elem_id="resume-note")

    parts = ResumeParts(checkpoint, resume_btn, note, new_end)

    def choices(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None) -> dict[Any, Any]:
        return parts.updates(ctx, run_id, user_of(ctx, profile, oauth))  # no Resume for an imported run

    run_dd.change(
        gate(ctx, "resume_choices", choices),
        [run_dd],
        parts.listed(),
        api_name="resume_choices",
        show_progress="hidden",
    )

    def resume(
        profile: gr.OAuthProfile | None,
        oauth: gr.OAuthToken | None,
        run_id: str | None,
        step: str | None,
        end: float | None = None,
    ) -> str:
        user = user_of(ctx, profile, oauth)
        if not run_id:
            raise gr.Error("Select a run to resume.")
        max_steps = new_max_steps(end)
        try:
            run = access.resume(ctx.store, run_id, user, step or None, ctx.settings, ctx.backends, max_steps)
        except (RunNotFound, BackendError, access.NotAllowed) as exc:
            raise gr.Error(access.redact(str(exc), user.token)) from None
        return access.redact(overview.status_markdown(run) + f"\n\nResumed from step {run.last_step}.", user.token)

    resume_btn.click(
        gate(ctx, "resume_run", resume, what="resume"), [run_dd, checkpoint, new_end], [note], api_name="resume_run"
    )  # the live status follows

    # Not scrubbed by the gate: the answer is the file's path, which gradio reads to serve it (export_file's
    # messages name no server path themselves).
    def export(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, run_id: str | None, suffix: str) -> str:
        return export_file(ctx, user_of(ctx, profile, oauth), run_id, suffix)

    export_btn.click(
        gate(ctx, "export_metrics", export, what="metrics export", scrub=False),
        [run_dd, fmt],
        [download],
        api_name="export_metrics",
    )
    return parts


# --- Runs: import a run, filter by tag --------------------------------------------------------------------------
FOLLOW_IDLE_S = (1.0, 3600.0)  # the allowed range of "ends after N s without change"


def runs_tools(ctx: UiContext) -> gr.Textbox:
    """A tag filter (returned: the runs table reads it) and an import of a run made elsewhere: an upload, or (not on
    a Space, whose server paths are not the user's) a path on this machine, optionally followed while it is still
    being written (the CLI's `import-run PATH --follow`)."""
    from grpo_dashboard.store.follow import follow_in_background
    from grpo_dashboard.store.importers import ImportRunError, import_run, import_upload, other_trackio_runs

    local = not ctx.settings.on_space
    with gr.Row():
        tag = gr.Textbox(label="Only runs with this tag (or group:NAME)", scale=2, elem_id="runs-tag")
        upload = gr.File(
            label="Import a run (trainer_state.json, TRL JSONL, console .log/.out, trackio .db, W&B history .csv)",
            scale=3,
            elem_id="import-run-file",
        )
        trackio_run = gr.Textbox(
            label="trackio run (name or id; empty: the latest)",
            scale=1,
            elem_id="import-run-trackio",
        )
        button = gr.Button("Import run", scale=1, elem_id="import-run-btn")
    with gr.Row(visible=local):
        path_box = gr.Textbox(
            label="Or a path on this machine (also a TensorBoard directory or an offline W&B run directory)",
            scale=3,
            elem_id="import-run-path",
        )
        follow_box = gr.Checkbox(
            False,
            label="Follow: live while it is still being written",
            scale=1,
            elem_id="import-run-follow",
        )
        idle_box = gr.Number(
            30,
            label="Follow ends after this many seconds without change",
            scale=1,
            elem_id="import-run-idle",
        )
    note = gr.Markdown(elem_id="import-run-note")

    def run(
        profile: gr.OAuthProfile | None,
        oauth: gr.OAuthToken | None,
        file: Any,
        path: str | None = "",
        follow: bool | None = False,
        idle: float | None = 30.0,
        which: str | None = None,
    ) -> str:
        user = user_of(ctx, profile, oauth)
        chosen = (which or "").strip() or None
        space = ctx.settings.on_space
        if space and not user.username:
            raise gr.Error("Sign in to import runs: on this Space every run belongs to the user who made it.")
        path = (path or "").strip()
        if space and (path or follow):
            raise gr.Error(
                "path / follow: on this Space a run is imported from an upload; a path on the server is not read and "
                "nothing is followed. Upload the file, or send a live run with DashboardCallback's HTTP transport."
            )
        if file and path:
            raise gr.Error("Import a run: choose a file or give a path, not both.")
        if follow and not path:
            raise gr.Error("follow: give the path of the source that is being written (an upload does not grow).")
        if not file and not path:
            raise gr.Error("Choose a file to import (or give a path on this machine).")
        try:
            if follow:
                low, high = FOLLOW_IDLE_S
                if idle is None or not low <= float(idle) <= high:
                    raise gr.Error(f"Follow ends after: {idle!r} seconds is not allowed; give {low:g} to {high:g}.")
                started = follow_in_background(path, ctx.store, owner=user.username, idle_s=float(idle))
                if started is None:
                    return f"Waiting for the first records of `{path}` (up to 5 min); the run appears in Runs then."
                return (
                    f"Following **{started.name}** (`{started.id}`) live from `{path}`; it ends "
                    f"{float(idle):g} s after the source stops changing."
                )
            root = _upload_root() if space else None
            source = Path(path) if path else Path(file if isinstance(file, str) else file.name)
            if path:
                imported = import_run(path, ctx.store, owner=user.username, run_name=chosen)
            else:
                imported = import_upload(source, ctx.store, owner=user.username, root=root, run_name=chosen)
            others = other_trackio_runs(source, chosen, upload=not path, root=root)
        except ImportRunError as exc:
            raise gr.Error(_shown(str(exc), space)) from None
        text = f"Imported **{imported.name}** (`{imported.id}`, {imported.n_records} records, read-only)."
        if others:
            listed = ", ".join(f"`{r.name}` ({r.run_id})" for r in others[:20])
            more = f" and {len(others) - 20} more" if len(others) > 20 else ""
            text += (
                f" The trackio project has {len(others) + 1} runs; the others: {listed}{more}. Give one in "
                "*trackio run* to import it too."
            )
        return _shown(text, space)

    button.click(
        gate(ctx, "import_run", run, what="run import"),
        [upload, path_box, follow_box, idle_box, trackio_run],
        [note],
        api_name="import_run",
    )
    return tag
