"""Pre-flight tab: before paying for GPUs, inspect the dataset, run the reward contract check (sandboxed) and estimate
memory, flavor, time and cost, all from the spec in the New run tab's YAML view.

On a Space the spec's code and file rules (access.py) hold here too, and the reward check needs a signed-in user."""

from __future__ import annotations

from typing import Any

import gradio as gr

from .. import access
from ..errors import SpecError
from ..spec import RunSpec
from .auth import user_of
from .context import UiContext


def _spec(yaml_text: str, ctx: UiContext | None = None) -> RunSpec:
    try:
        spec = RunSpec.from_yaml(yaml_text or "")
    except SpecError as exc:
        raise gr.Error(f"The spec in the New run tab cannot be read: {exc}") from exc
    problems = access.spec_policy_errors(spec, ctx.base_dir, ctx.settings, for_launch=False) if ctx else []
    if problems:
        raise gr.Error("Not on this Space: " + " ".join(f"{e.field} = {e.value!r} {e.message}" for e in problems))
    return spec


def inspect_text(ctx: UiContext, yaml_text: str) -> str:
    """Markdown report of the dataset inspector."""
    from ..dataset_inspect import inspect_dataset

    spec = _spec(yaml_text, ctx)
    try:
        return "```\n" + inspect_dataset(spec, base_dir=ctx.base_dir).to_text() + "\n```"
    except (SpecError, ValueError, OSError) as exc:
        return f"**Dataset problem:** {exc}"


def rewards_text(ctx: UiContext, yaml_text: str, rows: float, user: access.User | None = None) -> str:
    """Markdown report of the reward contract check (rewards run in a sandboxed subprocess, never in this process)."""
    from ..reward_check import check_rewards

    spec = _spec(yaml_text)
    try:
        access.check_may_run_rewards(spec, user or access.ANONYMOUS, ctx.base_dir, ctx.settings)
    except access.NotAllowed as exc:
        raise gr.Error(str(exc)) from None
    try:
        report = check_rewards(spec, n_rows=max(1, int(rows or 8)), base_dir=ctx.base_dir)
    except (SpecError, ValueError, OSError) as exc:
        return f"**Reward check could not run:** {exc}"
    verdict = "✅ no problem found" if report.ok else "⚠️ problems found"
    return f"**{verdict}**\n\n```\n{report.to_text()}\n```"


def hardware_text(ctx: UiContext, yaml_text: str) -> str:
    """Markdown report of the memory / flavor / time / cost estimate."""
    from ..hardware import estimate_for_spec

    spec = _spec(yaml_text, ctx)
    try:
        return estimate_for_spec(spec, base_dir=ctx.base_dir).to_text()
    except (SpecError, ValueError, OSError) as exc:
        return f"**Estimate not possible:** {exc}"


def build(ctx: UiContext, spec_yaml: Any) -> None:
    """The tab's widgets and events; `spec_yaml` is the New run tab's YAML component."""
    gr.Markdown("Checks run on the spec in the **New run** tab. Rewards run in a sandboxed subprocess (no network, "
                "no tokens, time and memory limits); custom reward code never runs in the dashboard process.")
    with gr.Row():
        inspect_btn = gr.Button("Inspect dataset")
        rows = gr.Number(8, label="Rows for the reward check", precision=0, minimum=1, maximum=64)
        rewards_btn = gr.Button("Check rewards")
        hardware_btn = gr.Button("Estimate hardware and cost")
    out = gr.Markdown(elem_id="preflight-report")
    inspect_btn.click(lambda y: inspect_text(ctx, y), [spec_yaml], [out], api_name="inspect_dataset")
    def check(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, yaml_text: str, n: float) -> str:
        return rewards_text(ctx, yaml_text, n, user_of(ctx, profile, oauth))

    rewards_btn.click(check, [spec_yaml, rows], [out], api_name="check_rewards", concurrency_limit=2)
    hardware_btn.click(lambda y: hardware_text(ctx, y), [spec_yaml], [out], api_name="estimate_hardware")
