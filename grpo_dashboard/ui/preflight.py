"""Pre-flight tab: before paying for GPUs, inspect the dataset, run the reward contract check (sandboxed) and estimate
memory, flavor, time and cost, all from the spec in the New run tab's YAML view.

On a Space every check needs a signed-in user and runs in a fair worker pool under a time limit (guard.py,
space/policy.py), the spec's code and file rules (access.py) hold, Hub reads use the user's own token or none, and no
tokenizer of the spec is loaded here."""

from __future__ import annotations

from typing import Any

import gradio as gr

from grpo_dashboard.errors import SpecError
from grpo_dashboard.space import access
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.ui.context import UiContext
from grpo_dashboard.ui.guard import gate

FENCE = "`" * 3 + "\n"


def _spec(yaml_text: str, ctx: UiContext | None = None) -> RunSpec:
    try:
        spec = RunSpec.from_yaml(yaml_text or "")
    except SpecError as exc:
        raise gr.Error(f"The spec in the New run tab cannot be read: {exc}") from exc
    problems = access.spec_policy_errors(spec, ctx.base_dir, ctx.settings, for_launch=False) if ctx else []
    if problems:
        raise gr.Error("Not on this Space: " + " ".join(str(e) for e in problems))
    return spec


def inspect_text(ctx: UiContext, yaml_text: str, user: access.User | None = None) -> str:
    """Markdown report of the dataset inspector."""
    from grpo_dashboard.checks.dataset_inspect import inspect_dataset

    spec = _spec(yaml_text, ctx)
    user = user or access.ANONYMOUS
    try:
        report = inspect_dataset(
            spec,
            base_dir=ctx.base_dir,
            token=access.hub_token(user, ctx.settings),
            load_tokenizers=not ctx.settings.on_space,
        )
        return "```\n" + report.to_text() + "\n```"
    except (SpecError, ValueError, OSError, RuntimeError) as exc:
        return f"**Dataset problem:** {exc}"


def rewards_text(ctx: UiContext, yaml_text: str, rows: float, user: access.User | None = None) -> str:
    """Markdown report of the reward contract check (rewards run in a sandboxed subprocess, never in this process)."""
    from grpo_dashboard.checks.reward_check import check_rewards

    spec = _spec(yaml_text)
    user = user or access.ANONYMOUS
    try:
        access.check_may_run_rewards(spec, user, ctx.base_dir, ctx.settings)
    except access.NotAllowed as exc:
        raise gr.Error(str(exc)) from None
    try:
        report = check_rewards(
            spec,
            n_rows=min(64, max(1, int(rows or 8))),
            base_dir=ctx.base_dir,
            token=access.hub_token(user, ctx.settings),
        )
    except (SpecError, ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a Hub dataset that cannot load
        return f"**Reward check could not run:** {exc}"
    verdict = "✅ no problem found" if report.ok else "⚠️ problems found"
    return f"**{verdict}**\n\n```\n{report.to_text()}\n```"


def hardware_text(ctx: UiContext, yaml_text: str, user: access.User | None = None) -> str:
    """Markdown report of the memory / flavor / time / cost estimate."""
    from grpo_dashboard.checks.hardware import estimate_for_spec

    spec = _spec(yaml_text, ctx)
    user = user or access.ANONYMOUS
    try:
        text = estimate_for_spec(spec, base_dir=ctx.base_dir, token=access.hub_token(user, ctx.settings)).to_text()
        # Verbatim: as markdown, the conclusion lines would run into the memory breakdown's last bullet.
        return FENCE + text.replace(FENCE, "") + "\n" + FENCE
    except (SpecError, ValueError, OSError, RuntimeError) as exc:
        return f"**Estimate not possible:** {exc}"


NOT_RUN = "_Not run yet._"
# A refused or failed check shows its reason in a toast; its box must not keep saying it is running.
FAILED = "✖ The check did not run: its reason is in the message at the top right of the page."


def running_js(what: str, button_id: str) -> str:
    """Client-side: the check's own box says it is running the moment its button is pressed (the server's answer
    replaces it), so a check that takes a while never looks like nothing happened; its button is disabled until the
    check ends (a second press would run it again alongside)."""
    return (
        f"() => {{ const b = document.getElementById('{button_id}'); if (b) b.disabled = true; return '⏳ {what}…'; }}"
    )


def enable_js(button_id: str, text: str | None = None) -> str:
    """Client-side: the check's button pressable again once the check answered, or once it failed (then the box
    says so: `text`)."""
    answer = f" return '{text}';" if text is not None else ""
    return f"() => {{ const b = document.getElementById('{button_id}'); if (b) b.disabled = false;{answer} }}"


def build(ctx: UiContext, spec_yaml: Any) -> None:
    """The tab's widgets and events; `spec_yaml` is the New run tab's YAML component. Each check has its own
    report box, so running one keeps the others' reports."""
    gr.Markdown(
        "Checks run on the spec in the **New run** tab. Rewards run in a sandboxed subprocess (no network, "
        "no tokens, time and memory limits); custom reward code never runs in the dashboard process."
    )

    def inspect(user: access.User, yaml_text: str) -> str:
        return inspect_text(ctx, yaml_text, user)

    def check(user: access.User, yaml_text: str, n: float) -> str:
        return rewards_text(ctx, yaml_text, n, user)

    def hardware(user: access.User, yaml_text: str) -> str:
        return hardware_text(ctx, yaml_text, user)

    # (box key, button, help line, endpoint, function, what the gate calls it, what the box says while it runs)
    checks = (
        (
            "dataset",
            "Inspect dataset",
            "Reads the dataset the spec names: columns, rows, prompt lengths.",
            "inspect_dataset",
            inspect,
            "dataset inspection",
            "Reading the dataset",
        ),
        (
            "rewards",
            "Check rewards",
            "Runs each reward function on sample rows in the sandbox and flags broken contracts.",
            "check_rewards",
            check,
            "reward check",
            "Running the rewards in the sandbox",
        ),
        (
            "hardware",
            "Estimate hardware and cost",
            "Memory per GPU, a flavor that fits, time and cost.",
            "estimate_hardware",
            hardware,
            "hardware estimate",
            "Estimating memory and cost",
        ),
    )
    for key, label, help_text, name, fn, what, doing in checks:
        with gr.Column(elem_id=f"preflight-{key}-check"):
            with gr.Row(equal_height=True):
                button = gr.Button(label, scale=0, min_width=240, elem_id=f"preflight-{key}-btn")
                inputs = [spec_yaml]
                if key == "rewards":
                    rows = gr.Number(8, label="Rows for the reward check", precision=0, minimum=1, maximum=64, scale=0)
                    inputs.append(rows)
                gr.Markdown(help_text, elem_classes=["preflight-help"])
            box = gr.Markdown(NOT_RUN, elem_id=f"preflight-{key}", elem_classes=["preflight-report"])
        button_id = f"preflight-{key}-btn"
        ran = button.click(None, None, [box], js=running_js(doing, button_id), api_visibility="private").then(
            gate(ctx, name, fn, what=what, pass_user=True), inputs, [box], api_name=name
        )
        ran.success(None, None, None, js=enable_js(button_id), api_visibility="private")
        ran.failure(None, None, [box], js=enable_js(button_id, FAILED), api_visibility="private")
