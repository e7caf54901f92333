"""`python -m grpo_dashboard` and the `grpo-dashboard` console script: the CLI of cli.py, plus `serve`.

`serve` is what `python app.py` does (build the app, launch it with `launch_options()`); it lives here, the layer above
cli.py, because it is the one command that needs the UI and cli.py does not import gradio.
"""

from __future__ import annotations

import argparse
import sys

from grpo_dashboard.cli import EXIT_OK
from grpo_dashboard.cli import main as cli_main


def serve(args: argparse.Namespace) -> int:
    """Serve the dashboard until interrupted; --host / --port, else $GRADIO_SERVER_NAME / $GRADIO_SERVER_PORT."""
    from grpo_dashboard.ui import build_app, launch_options
    from grpo_dashboard.ui.serving import limit_malloc_arenas

    limit_malloc_arenas()  # before any server thread exists
    demo = build_app()
    demo.launch(server_name=args.host, server_port=args.port, **launch_options())
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the CLI (with `serve`); returns the exit code."""
    return cli_main(argv, serve=serve)


if __name__ == "__main__":
    sys.exit(main())
