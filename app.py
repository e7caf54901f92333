"""Serve the GRPO Dashboard: `python app.py` (also the `app_file` of a Hugging Face Space).

Listens on 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise (Gradio reads them).
Run data lives in $GRPO_DASHBOARD_DATA_DIR (default ~/.grpo_dashboard).
"""

from grpo_dashboard.ui import build_app, launch_options
from grpo_dashboard.ui.serving import limit_malloc_arenas

limit_malloc_arenas()  # before any server thread exists
demo = build_app()

if __name__ == "__main__":
    demo.launch(**launch_options())
