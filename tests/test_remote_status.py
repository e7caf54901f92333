"""Run detail for Hugging Face Jobs runs: job link, timeout and the latest GPU use from the Jobs metrics stream (the
run's newest system sample)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from grpo_dashboard.launch.hf_jobs.stream import Follower
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.views.remote_status import remote_markdown


def test_job_link_timeout_and_gpu_use(tmp_path: Path) -> None:
    run = Run(
        id="r",
        name="r",
        spec_yaml="",
        backend="hf_jobs",
        status="running",
        created_at=time.time(),
        run_dir=str(tmp_path),
        external_id="abc123",
    )
    (tmp_path / "hf_job.json").write_text(
        json.dumps(
            {
                "url": "https://hf.co/jobs/alice/abc123",
                "flavor": "l4x1",
                "timeout_s": 5400,
                "timeout_reason": "estimate × 1.5",
            }
        )
    )
    store = Store()
    store.insert_run(run)
    sample = {
        "cpu_usage_pct": 37.5,
        "memory_used_bytes": 4 * 2**30,
        "memory_total_bytes": 16 * 2**30,
        "gpus": {"0": {"utilization": 91, "memory_used_bytes": 18e9, "memory_total_bytes": 24e9}},
    }
    follower = Follower(store, run.id, "alice", "abc123", api=None, run_dir=tmp_path)
    follower.store_system_sample({**sample, "cpu_usage_pct": 5}, 1.0)
    follower.store_system_sample(sample, 2.0)
    text = remote_markdown(run, store)
    assert "[abc123](https://hf.co/jobs/alice/abc123)" in text and "`l4x1`" in text and "estimate × 1.5" in text
    assert "GPU0 91% · 18 GB / 24 GB" in text and "CPU 37.5%" in text


def test_local_runs_have_no_remote_section(tmp_path: Path) -> None:
    run = Run(id="r", name="r", spec_yaml="", backend="local", status="running", created_at=0.0, run_dir=str(tmp_path))
    assert remote_markdown(run) == ""
