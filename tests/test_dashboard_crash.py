"""The dashboard process (`python app.py`) is killed with SIGKILL while three local runs are live, then started again:
every run is found again and the store ends identical to each run's metrics.jsonl."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from grpo_dashboard.launch.runs import launch, metrics_path
from grpo_dashboard.store.db import Store

from .conftest import free_port, jsonl_records, same_values, smoke_dict, store_records, wait_for
from .dashboard_helpers import serving, start_dashboard

pytestmark = pytest.mark.training


def test_kill_dashboard_with_three_live_runs_and_restart(tiny_model: Path) -> None:
    store = Store()
    port = free_port()
    first = start_dashboard(port)
    try:
        # serving before the runs start: a slow start must not let them end before the crash
        wait_for(lambda: serving(port), timeout=300)
        runs = [launch(smoke_dict(tiny_model, max_steps=60, seed=i), store) for i in range(3)]
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
