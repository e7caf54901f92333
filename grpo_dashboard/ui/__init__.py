"""The Gradio web UI (the only package that imports gradio): `build_app()` returns the dashboard as gr.Blocks."""

from .app import build_app, launch_options

__all__ = ["build_app", "launch_options"]
