"""The Gradio web UI (the only package that imports gradio): `build_app()` returns the dashboard as gr.Blocks."""

from grpo_dashboard.ui.app import build_app, launch_options

__all__ = ["build_app", "launch_options"]
