"""The callback's HTTP transport against a local dashboard (not a Space): the dashboard goes down for 10 s in the
middle of a run and comes back (every line arrives exactly once), and Cancel asks the callback to stop the trainer
cleanly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.launch import runs
from grpo_dashboard.store.db import Store
from grpo_dashboard.ui import build_app

from .conftest import free_port, jsonl_records, same_values, store_records, wait_for
from .test_external_http import start_script


def local_app(store: Store, port: int) -> Any:
    demo = build_app(store, monitor=False)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    return demo


@pytest.mark.training
def test_dashboard_down_mid_run_loses_and_duplicates_nothing_and_cancel_stops_the_trainer(
    tiny_model: Path, tmp_path: Path
) -> None:
    store = Store()
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    demo = local_app(store, port)
    try:
        # slow steps (not more of them) keep the run training through the 10 s outage
        proc = start_script(tiny_model, tmp_path / "d", url, "--steps", "12", "--step-sleep", "2")
        run = wait_for(lambda: (r := store.list_runs()) and r[0].n_records >= 2 and r[0], timeout=180)
        demo.close()  # the dashboard goes away mid-run
        down_from = store.get_run(run.id).last_step
        time.sleep(10)
        assert proc.poll() is None  # still training: the outage is in the middle of the run
        demo = local_app(store, port)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
        assert "not answering" in out  # warned (once) while it was down
        run = wait_for(lambda: (r := store.get_run(run.id)).status == "completed" and r, timeout=60)
        (spool,) = (tmp_path / "d" / "spool").iterdir()
        assert down_from < 12 and run.last_step == 12
        assert down_from < store.get_run(run.id).last_step  # steps trained while it was down arrived
        # every line exactly once: the dashboard's copy is byte for byte the script's
        assert (Path(run.run_dir) / "metrics.jsonl").read_bytes() == (spool / "metrics.jsonl").read_bytes()
        assert same_values(store_records(store, run.id), jsonl_records(spool / "metrics.jsonl"))
        logs = [json.loads(x) for x in (spool / "metrics.jsonl").read_text().splitlines()]
        assert run.n_records == sum(1 for r in logs if r["type"] == "log" and r["split"] != "system")
        # Cancel over HTTP: the trainer stops at the end of a step and the run ends canceled
        proc = start_script(tiny_model, tmp_path / "c", url, "--steps", "200", "--step-sleep", "0.3")
        other = wait_for(lambda: [r for r in store.list_runs() if r.id != run.id and r.n_records >= 1], timeout=180)[0]
        assert runs.can_cancel(other)
        runs.cancel(store, other)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
        other = wait_for(lambda: (r := store.get_run(other.id)).status == "canceled" and r, timeout=60)
        assert other.last_step < 200
    finally:
        demo.close()
