"""The "New run" tab: presets, the generated form, YAML kept in sync both ways, Validate, command view, Launch."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from grpo_dashboard.errors import MAX_FIELD_CHARS, MAX_LISTED_ERRORS, FieldError, SpecError, short_repr, shorten
from grpo_dashboard.launch import runs
from grpo_dashboard.launch.backends import Backends
from grpo_dashboard.space import access
from grpo_dashboard.spec import forms, presets
from grpo_dashboard.spec.form_layout import SWITCHES
from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate
from grpo_dashboard.views import overview

FORM_GROUPS = [g for g in forms.GROUPS if g != "Run"]


@dataclass
class NewRunTab:
    """Components of the tab the app wires to other tabs."""

    preset: gr.Dropdown
    fields: list[forms.FormField]
    inputs: list[gr.components.Component]
    yaml: gr.Code
    command: gr.Code
    summary: gr.Markdown
    group_errors: dict[str, gr.Markdown] = field(default_factory=dict)
    launch: gr.Button | None = None
    validate: gr.Button | None = None


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")


def as_text(text: str | None) -> str | None:
    """Help text as it reads, for places that render markdown (a field's info, the rewards list): tags such as
    `<think>` and markdown characters escaped, argparse's `%%` as `%`."""
    if not text:
        return None
    text = text.replace("%%", "%")
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\1", text), quote=False)


def info_text(text: str | None) -> str | None:
    """Help or error text for a field's `info` line, as it reads. Gradio 6 shows `info` as text with only inline
    `*emphasis*`, `**strong**` and `` `code` `` applied (HTML already escaped, backslash escapes shown as they are),
    so nothing is escaped here; a `*` (TRL's `num_processes * per_device_train_batch_size`, `*args`) becomes `∗`,
    which no emphasis swallows; argparse's `%%` reads `%`."""
    if not text:
        return None
    return text.replace("%%", "%").replace("*", "∗")


def _component(f: forms.FormField, value: Any) -> gr.components.Component:
    info = info_text(f.help)
    if f.widget in ("bool", "toggle", "switch"):
        return gr.Checkbox(value=bool(value), label=f.label, info=info, elem_id=_elem(f))
    if f.widget == "choice":
        return gr.Dropdown(
            forms.choice_options(f),
            value=value,
            label=f.label,
            info=info,
            allow_custom_value=f.custom,
            elem_id=_elem(f),
        )
    if f.number_as_text:
        return gr.Textbox(
            value=value,
            label=f.label,
            info=info,
            elem_id=_elem(f),
            lines=1,
            placeholder=f"unset (default: {f.default})",
        )
    if f.widget in ("int", "float"):
        return gr.Number(
            value=value, label=f.label, info=info, precision=0 if f.widget == "int" else None, elem_id=_elem(f)
        )
    if f.widget == "rewards":
        return gr.Dataframe(
            value=value or [["", 1.0, "", "", ""]],
            headers=list(forms.REWARD_COLUMNS),
            datatype=["str", "number", "str", "str", "str"],
            interactive=True,
            column_count=len(forms.REWARD_COLUMNS),
            label="reward functions (add rows as needed)",
            elem_id=_elem(f),
        )
    return gr.Textbox(value=value, label=f.label, info=info, elem_id=_elem(f), lines=1)


def _elem(f: forms.FormField) -> str:
    return "field-" + f.key.replace(".", "-").replace("_", "-")


def _rewards_help() -> str:
    rdefs = rewards_module().REWARDS
    lines = ["Built-in rewards (TRL logs each as `rewards/<name>/mean`):"]
    for name, rdef in rdefs.items():
        params = ", ".join(f"`{k}`={v!r}" for k, v in rdef.params.items()) or "no params"
        lines.append(f"- **{as_text(name)}**: {as_text(rdef.description)} ({params})")
    return "\n".join(lines)


def build(ctx: UiContext) -> NewRunTab:
    """Lay out the tab and wire its own events."""
    fields = forms.form_fields()
    initial_yaml = presets.preset_yaml(presets.DEFAULT_PRESET)
    values = forms.values_from_yaml(initial_yaml)
    inputs: list[gr.components.Component] = []
    ordered: list[forms.FormField] = []

    def add(f: forms.FormField) -> None:
        inputs.append(_component(f, values[f.key]))
        ordered.append(f)

    group_errors: dict[str, gr.Markdown] = {}
    with gr.Row():
        preset = gr.Dropdown(
            presets.preset_names(),
            value=presets.DEFAULT_PRESET,
            label="Preset",
            scale=3,
            info="Loads a complete run spec into the form and the YAML.",
            elem_id="preset",
        )
        validate_btn = gr.Button("Validate", variant="secondary", scale=1, elem_id="validate-btn")
        launch_btn = gr.Button("Launch", variant="primary", scale=1, elem_id="launch-btn")
    summary = gr.Markdown(
        "Pick a preset or edit the form; **Validate** checks everything before launching.", elem_id="new-run-summary"
    )
    with gr.Row():
        with gr.Column(scale=3):
            for f in (f for f in fields if f.group == "Run"):
                add(f)
            for group in FORM_GROUPS:
                with gr.Accordion(group, open=group in ("Model", "Data", "Rewards", "GRPO core")):
                    group_errors[group] = gr.Markdown("", elem_classes=["field-errors"])
                    group_fields = [f for f in fields if f.group == group]
                    for f in (f for f in group_fields if f.widget == "rewards"):
                        add(f)
                        with gr.Accordion("Built-in reward functions", open=False):
                            gr.Markdown(_rewards_help())
                    plain = [f for f in group_fields if f.widget != "rewards"]
                    for i in range(0, len(plain), 3):
                        with gr.Row(equal_height=False):
                            for f in plain[i : i + 3]:
                                add(f)
        with gr.Column(scale=2):
            yaml_code = gr.Code(
                initial_yaml,
                language="yaml",
                label="Run spec (YAML, editable)",
                interactive=True,
                lines=30,
                max_lines=60,
                elem_id="spec-yaml",
                wrap_lines=True,
            )
            command = gr.Code(
                _command(initial_yaml, ctx.backends),
                language="shell",
                label="Equivalent command",
                lines=8,
                interactive=False,
                elem_id="spec-command",
            )
    tab = NewRunTab(preset, ordered, inputs, yaml_code, command, summary, group_errors, launch_btn, validate_btn)
    _wire(tab, ctx)
    return tab


def _command(yaml_text: str, backends: Backends | None = None) -> str:
    try:
        preview = overview.command_preview(RunSpec.from_yaml(yaml_text), backends)
    except (SpecError, OSError):
        preview = None
    return overview.command_text(yaml_text, preview)


def _values(tab: NewRunTab, args: tuple[Any, ...]) -> dict[str, Any]:
    return {f.key: v for f, v in zip(tab.fields, args, strict=True)}


def _form_updates(
    tab: NewRunTab, values: dict[str, Any], errors: dict[str, list[str]] | None = None
) -> dict[Any, Any]:
    """Values (or only the help text, when `values` is empty) of every field, with errors in place of help; keyed
    by the field's component."""
    errors = errors or {}
    out = {}
    for f, component in zip(tab.fields, tab.inputs, strict=True):
        kwargs: dict[str, Any] = {}
        if f.key in values:
            kwargs["value"] = values[f.key]
        msgs = errors.get(f.key)
        if f.widget != "rewards":
            kwargs["info"] = info_text("✖ " + " / ".join(_capped(msgs, 5))) if msgs else info_text(f.help)
        kwargs["elem_classes"] = ["has-error"] if msgs else []
        if f.widget == "choice" and not f.custom and f.key in values:
            options = forms.choice_options(f)
            shown = values[f.key]
            kwargs["choices"] = options if shown in (None, "") or shown in options else [*options, shown]
        out[component] = gr.update(**kwargs)
    return out


def unlisted_choices(tab: NewRunTab, values: dict[str, Any]) -> list[FieldError]:
    """Choice fields whose value (from the YAML) is none of the dropdown's options: the dropdown could not show it
    (Gradio blanks it, then refuses every later event of the form), so each is reported on its field with the
    validator's wording, and the dropdown gets the value as one more option (`_form_updates`)."""
    out = []
    for f in tab.fields:
        value = values.get(f.key)
        if f.widget != "choice" or f.custom or value in (None, "") or value in forms.choice_options(f):
            continue
        allowed = ", ".join(repr(c) for c in (f.choices or (True, False)))
        out.append(FieldError(f.key, value, f"must be one of {allowed}."))
    return out


def _group_error_updates(tab: NewRunTab, placed: dict[str, list[str]]) -> dict[Any, Any]:
    """Each group's box at the top of its section: the messages of a field with no info line of its own (the
    rewards table), and one line naming the section's other marked fields, whose messages sit beside them."""
    by_group: dict[str, list[str]] = {g: [] for g in tab.group_errors}
    marked: dict[str, list[str]] = {g: [] for g in tab.group_errors}
    for f in tab.fields:
        if not placed.get(f.key):
            continue
        if f.widget == "rewards":
            group = f.group if f.group in by_group else FORM_GROUPS[0]
            by_group[group] += [f"- ✖ **{f.key}**: {msg}" for msg in placed[f.key]]
        elif f.group in marked:  # the Run fields above the sections are in view already
            marked[f.group].append(f"**{f.key}**")
    for group, keys in marked.items():
        if keys:
            by_group[group].insert(0, f"✖ Marked below: {', '.join(keys)}")
    return {box: gr.update(value="\n".join(_capped(by_group[g]))) for g, box in tab.group_errors.items()}


def _capped(lines: list[str], most: int = MAX_LISTED_ERRORS) -> list[str]:
    """At most `most` lines, then one saying how many more there are (a spec with thousands of rewards)."""
    return lines if len(lines) <= most else [*lines[:most], f"- ... and {len(lines) - most} more"]


def _summary(errors: list[FieldError], warnings: list[FieldError], ok_text: str) -> str:
    lines = []
    if errors:
        lines.append(f"### ✖ {len(errors)} problem{'s block' if len(errors) != 1 else ' blocks'} the launch")
        lines += [
            f"- **{shorten(e.field, MAX_FIELD_CHARS)}** = `{short_repr(e.value)}`: {e.message}"
            for e in errors[:MAX_LISTED_ERRORS]
        ]
        if len(errors) > MAX_LISTED_ERRORS:
            lines.append(f"- ... and {len(errors) - MAX_LISTED_ERRORS} more")
    else:
        lines.append(ok_text)
    if warnings:
        lines.append(f"#### ▲ {len(warnings)} warning{'s' if len(warnings) != 1 else ''}")
        lines += _capped([f"- **{w.field}**: {w.message}" for w in warnings])
    return "\n".join(lines)


def check_form(
    values: dict[str, Any], yaml_text: str, base_dir: Any, user: access.User | None = None, settings: Any = None
) -> tuple[RunSpec | None, list[FieldError], list[FieldError]]:
    """Build the spec from form values over the YAML and validate it; (spec or None, errors, warnings).

    On a Space, the user's namespace fills an empty `backend.namespace`, and what the Space forbids (access.py) is
    reported before validation reads any file the spec names.
    """
    try:
        base = RunSpec.from_yaml(yaml_text) if yaml_text and yaml_text.strip() else None
        spec = forms.spec_from_values(values, base)
        if user is not None:
            spec = access.with_user_defaults(spec, user, settings)
        problems = access.spec_policy_errors(spec, base_dir, settings)
        if problems:
            return None, problems, []
        spec, report = runs.check(spec, base_dir)
    except SpecError as exc:
        return None, exc.errors, []
    return spec, report.errors, report.warnings


def _wire(tab: NewRunTab, ctx: UiContext) -> None:
    def validate(user: access.User, *args: Any) -> dict[Any, Any]:
        *vals, yaml_text = args
        _, errors, warnings = check_form(_values(tab, tuple(vals)), yaml_text, ctx.base_dir, user, ctx.settings)
        return validate_outputs(tab, errors, warnings, "### ✔ Valid: ready to launch.")

    assert tab.validate is not None  # set by build
    tab.validate.click(
        gate(ctx, "validate", validate, what="validation", pass_user=True),
        [*tab.inputs, tab.yaml],
        [tab.summary, *tab.group_errors.values(), *tab.inputs],
        api_name="validate",
    )

    def load_preset(name: str) -> dict[Any, Any]:
        text = presets.preset_yaml(name)
        values = forms.values_from_yaml(text)
        return {
            tab.yaml: text,
            tab.command: _command(text, ctx.backends),
            tab.summary: f"Loaded preset **{name}**.",
            **{box: gr.update(value="") for box in tab.group_errors.values()},
            **_form_updates(tab, values),
        }

    tab.preset.select(
        gate(ctx, "load_preset", load_preset),
        [tab.preset],
        [tab.yaml, tab.command, tab.summary, *tab.group_errors.values(), *tab.inputs],
        api_name="load_preset",
        show_progress="hidden",
        concurrency_limit=None,
    )

    linked = linked_fields(tab)

    def form_to_yaml(*args: Any) -> dict[Any, Any]:
        *vals, yaml_text = args
        values = _values(tab, tuple(vals))
        try:
            text = forms.yaml_from_values(values, yaml_text)
            now = forms.values_from_yaml(text)
        except SpecError as exc:
            return {tab.summary: _summary(exc.errors, [], "")}
        # A switch and the fields it sets show each other's change (only those that differ: a field being typed
        # in keeps its text).
        shown = {c: gr.update(value=now[f.key]) for f, c in linked if f.key in now and now[f.key] != values[f.key]}
        return {tab.yaml: text, tab.command: _command(text, ctx.backends), **shown}

    # Gradio's textbox sends `input` from its key handlers only, so a value pasted with the mouse, dropped or
    # autofilled reaches the YAML when the field loses focus.
    triggers = [c.input for c in tab.inputs]  # type: ignore[attr-defined]  # every form input has `input`
    triggers += [c.blur for c in tab.inputs if isinstance(c, gr.Textbox)]
    gr.on(
        triggers,
        gate(ctx, "form_to_yaml", form_to_yaml, what="YAML update", scrub=False),
        [*tab.inputs, tab.yaml],
        [tab.yaml, tab.command, tab.summary, *(c for _, c in linked)],
        api_name="form_to_yaml",
        trigger_mode="always_last",
        show_progress="hidden",
        concurrency_limit=None,
    )

    def yaml_to_form(yaml_text: str) -> dict[Any, Any]:
        try:
            values = forms.values_from_yaml(yaml_text)
            bad = forms.unshowable(yaml_text)
        except SpecError as exc:
            return {tab.summary: _summary(exc.errors, [], "")}
        unlisted = unlisted_choices(tab, values)
        if bad or unlisted:  # never blank a field: it keeps its value and shows what is wrong with the YAML's
            placed = {e.field: [str(e.message)] for e in [*bad, *unlisted]}
            updates = _form_updates(tab, {k: v for k, v in values.items() if k not in bad_keys(bad)}, placed)
            return {
                tab.command: _command(yaml_text, ctx.backends),
                tab.summary: _summary([*bad, *unlisted], [], ""),
                **updates,
            }
        return {
            tab.command: _command(yaml_text, ctx.backends),
            tab.summary: "YAML applied to the form.",
            **_form_updates(tab, values),
        }

    tab.yaml.input(
        gate(ctx, "yaml_to_form", yaml_to_form, what="form update", scrub=False),
        [tab.yaml],
        [tab.command, tab.summary, *tab.inputs],
        api_name="yaml_to_form",
        trigger_mode="always_last",
        show_progress="hidden",
        concurrency_limit=None,
    )


def linked_fields(tab: NewRunTab) -> list[tuple[forms.FormField, gr.components.Component]]:
    """The switches of the form and the training fields they set, with their components."""
    keys = {sw.key for sw in SWITCHES} | {f"training.{n}" for sw in SWITCHES for n in (*sw.on, *sw.off)}
    return [(f, c) for f, c in zip(tab.fields, tab.inputs, strict=True) if f.key in keys]


def bad_keys(errors: list[FieldError]) -> set[str]:
    """The fields of `errors`."""
    return {e.field for e in errors}


def validate_outputs(
    tab: NewRunTab, errors: list[FieldError], warnings: list[FieldError], ok_text: str
) -> dict[Any, Any]:
    """The summary, the group error boxes and the fields' info for a validation result, keyed by component."""
    placed, _ = forms.place_errors(errors, [f.key for f in tab.fields])
    return {
        tab.summary: _summary(errors, warnings, ok_text),
        **_group_error_updates(tab, placed),
        **_form_updates(tab, {}, placed),
    }
