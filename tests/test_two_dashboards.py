"""Two dashboard processes (`python app.py`) on one data directory while two local runs write their records: both
monitors ingest the same runs at the same time, and the store ends holding exactly each run's metrics.jsonl (nothing
lost, nothing twice), the database intact, and both apps answering HTTP throughout.

The runs are real processes writing the job protocol to their metrics.jsonl (the job script's format: starting,
started, one log record per step, finished), without training, so that the test stays well under a minute.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.launch.runs import metrics_path
from grpo_dashboard.store.db import Run, Store

from .conftest import free_port, jsonl_records, same_values, store_records, wait_for
from .dashboard_helpers import serving, start_dashboard

pytestmark = pytest.mark.slow

STEPS = 400

WRITER = textwrap.dedent("""
    import json, math, os, sys, time
    path, go, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def put(rec):
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\\n")
    put({"v": 1, "type": "event", "event": "starting", "time": time.time(), "pid": os.getpid()})
    put({"v": 1, "type": "event", "event": "started", "time": time.time(), "max_steps": steps})
    for step in range(1, steps + 1):
        if step == 20:  # some records before the dashboards start, the rest while both ingest
            while not os.path.exists(go):
                time.sleep(0.05)
        metrics = {"loss": 1.0 / step, "reward": step / steps, "kl": math.nan if step % 50 == 0 else step * 1e-4,
                   **{f"m{k}": step + k / 100 for k in range(20)}}
        put({"v": 1, "type": "log", "split": "train", "step": step, "time": time.time(), "max_steps": steps,
             "metrics": metrics})
        time.sleep(0.02)
    put({"v": 1, "type": "event", "event": "finished", "time": time.time(), "step": steps})
""")


def answers(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=30) as response:
        return response.status == 200


def test_two_dashboards_on_one_data_dir_ingest_two_live_runs_exactly_once(tmp_path: Path) -> None:
    store = Store()
    go = tmp_path / "go"
    runs, writers = [], []
    for i in range(2):
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(run_dir / "metrics.jsonl"), str(go), str(STEPS)])
        writers.append(writer)
        run = Run(
            id=f"run{i}",
            name=f"run{i}",
            spec_yaml="",
            backend="local",
            status="running",
            created_at=time.time(),
            run_dir=str(run_dir),
            pid=writer.pid,
            pid_start=local_process.process_start_time(writer.pid),
        )
        store.insert_run(run)
        runs.append(run)
    ports = [free_port(), free_port()]
    apps = [start_dashboard(port) for port in ports]
    checks = {port: 0 for port in ports}
    try:
        wait_for(lambda: all(serving(p) for p in ports), timeout=120)
        wait_for(lambda: all(store.get_run(r.id).n_records >= 19 for r in runs), timeout=60)
        go.touch()  # both dashboards are up: the runs write the rest while both monitors ingest

        def settled() -> bool:
            for port in ports:  # every poll: both apps answer
                assert answers(port), port
                checks[port] += 1
            assert all(app.poll() is None for app in apps), "a dashboard died"
            return all(store.get_run(r.id).status == "completed" for r in runs)

        wait_for(settled, timeout=60, interval=0.1)
        for writer in writers:
            assert writer.wait(timeout=30) == 0
    finally:
        go.touch()
        for app in apps:
            app.terminate()
        for app in apps:
            app.wait(timeout=30)
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
    assert all(n >= 2 for n in checks.values()), checks
    for r in runs:
        final = store.get_run(r.id)
        path = metrics_path(final)
        assert final.n_records == STEPS and final.n_skipped == 0 and final.last_step == STEPS
        assert final.ingest_offset == path.stat().st_size
        assert same_values(jsonl_records(path), store_records(store, r.id))
        assert len(store.series(r.id, "loss")) == STEPS  # no step stored twice
        assert [e["event"] for e in store.events(r.id)] == ["starting", "started", "finished"]
        assert sum(1 for line in path.read_text().splitlines() if json.loads(line)["type"] == "log") == STEPS
    assert store.integrity_ok()  # PRAGMA integrity_check
