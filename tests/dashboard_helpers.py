"""Helpers shared by the tests that run the dashboard as its own process (`python app.py`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from .conftest import REPO


def start_dashboard(port: int) -> subprocess.Popen[bytes]:
    """`python app.py` from the checkout, on 127.0.0.1:`port`."""
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
    return subprocess.Popen(
        [sys.executable, "app.py"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def serving(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
