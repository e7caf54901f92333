"""The dashboard process (`python app.py`) is killed with SIGKILL while three local runs are live, then started again:
every run is found again and the store ends identical to each run's metrics.jsonl."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_dashboard.launch.runs import launch, metrics_path
from grpo_dashboard.store.db import Store

from .conftest import REPO, jsonl_records, same_values, smoke_dict, store_records, wait_for

pytestmark = pytest.mark.training


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dashboard(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
    return subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def serving(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_kill_dashboard_with_three_live_runs_and_restart(tiny_model: Path) -> None:
    store = Store()
    runs = [launch(smoke_dict(tiny_model, max_steps=60, seed=i), store) for i in range(3)]
    port = free_port()
    first = start_dashboard(port)
    try:
        wait_for(lambda: serving(port), timeout=300)
        wait_for(lambda: all(store.get_run(r.id).n_records >= 3 for r in runs), timeout=600)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    before = [store.get_run(r.id) for r in runs]
    assert any(r.status == "running" for r in before), "every run ended before the crash; nothing was tested"
    time.sleep(1.0)  # the runs keep writing while no dashboard is watching
    second = start_dashboard(port)
    try:
        wait_for(lambda: all(store.get_run(r.id).status == "completed" for r in runs), timeout=900)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    for r in runs:
        final = store.get_run(r.id)
        assert final.n_records == 61 and final.n_skipped == 0
        assert same_values(jsonl_records(metrics_path(final)), store_records(store, r.id))
