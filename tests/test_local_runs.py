"""Real GRPO runs on CPU through the local backend: end to end, failures, cancel, and restart of the watcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grpo_dashboard.health import load_log_frame
from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.launch.runs import cancel, launch, metrics_path, refresh, wait
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.views import charts

from .conftest import (
    REPO,
    jsonl_records,
    reward_quarters,
    same_values,
    smoke_dict,
    store_records,
    wait_for,
    write_spec,
)

pytestmark = pytest.mark.training
LEARNING_MARGIN = 0.15


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def test_streamed_local_dataset_trains_and_logs(tiny_model: Path, tmp_path: Path) -> None:
    """`dataset.streaming: true` reaches the loader (an IterableDataset, local files too) and TRL trains on it."""
    spec = smoke_dict(
        tiny_model, max_steps=3, per_device_train_batch_size=8, num_generations=4, max_completion_length=4
    )
    spec["dataset"]["streaming"] = True
    sys.path.insert(0, str(REPO / "jobs"))
    import datasets
    import grpo_job

    job_dataset = yaml.safe_load(RunSpec.from_dict(spec).to_job_yaml())["dataset"]  # what the job reads
    loaded = grpo_job.load_split(job_dataset, job_dataset["split"], job_dataset["data_files"])
    assert isinstance(loaded, datasets.IterableDataset)
    proc = cli("launch", str(write_spec(tmp_path / "stream.yaml", spec)), "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = Store().list_runs()
    assert run.status == "completed" and run.last_step == 3
    assert sorted(step for split, step in jsonl_records(metrics_path(run)) if split == "train") == [1, 2, 3]


def test_smoke_run_end_to_end_through_the_cli(tiny_model: Path, tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path / "smoke.yaml", smoke_dict(tiny_model))
    proc = cli("launch", str(spec_file), "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = Store()
    (run,) = store.list_runs()
    assert run.status == "completed" and run.exit_code in (None, 0)
    assert run.last_step == 100 and run.max_steps == 100
    on_disk = jsonl_records(metrics_path(run))
    in_store = store_records(store, run.id)
    assert len([k for k in on_disk if k[0] == "train"]) == 100
    assert run.n_records == 101  # 100 step records + TRL's final summary record (also at step 100)
    assert same_values(on_disk, in_store)
    first, last = reward_quarters(store, run.id)
    assert last > first + LEARNING_MARGIN, (first, last)
    shown = cli("show", run.id)
    assert "completed" in shown.stdout and "100/100" in shown.stdout
    assert (Path(run.run_dir) / "run.yaml").is_file() and (Path(run.run_dir) / "job.log").is_file()
    # The job's console output, as TRL printed it, reads as the same log (the doctor on a nohup.out / Slurm .out)
    # (printed with 4 significant digits, as strings)
    console, hints = load_log_frame(Path(run.run_dir) / "job.log")
    logged, _ = load_log_frame(metrics_path(run))
    assert hints["format"] == "console" and console.get("reward").steps.tolist() == list(range(1, 101))
    for key in ("reward", "entropy", "completions/mean_length", "grad_norm"):
        assert console.get(key).values == pytest.approx(logged.get(key).values, rel=1e-3, abs=1e-12), key
    assert (Path(run.output_dir) / "model.safetensors").is_file()
    assert [e["event"] for e in store.events(run.id)] == ["starting", "started", "finished"]
    # The job's own system samples (one per log on CPU) reach the store and the System chart, against time
    rss = store.arrays(run.id, "system/process/rss_gb", "system")
    assert len(rss) == run.n_records and 0.05 < rss.values.min() <= rss.values.max() < 64  # a torch process: >50 MB
    assert len(store.arrays(run.id, "system/process/cpu_pct", "system")) == run.n_records - 1
    assert not any(k.startswith("system/gpu") for _, k in store.metric_keys(run.id))  # no CUDA here
    data, layout = charts.run_specs(store, run.id, charts.ChartOptions(smoothing=0), None, None, run.started_at, ())[
        "system"
    ]
    drawn = {t["meta"]["s"]: t for t in data}
    assert drawn.keys() == {"system|system/process/rss_gb", "system|system/process/cpu_pct"}
    shown = drawn["system|system/process/rss_gb"]
    assert shown["meta"]["x"] == "relative time" and shown["y"].tolist() == rss.values.tolist()
    assert shown["x"].tolist() == pytest.approx(((rss.times - run.started_at) / 60).tolist())


def test_a_run_that_does_not_learn_fails_the_learning_margin(tiny_model: Path) -> None:
    store = Store()
    run = launch(smoke_dict(tiny_model, learning_rate=1e-9, max_steps=60), store)
    run = wait(store, run, poll_s=0.3)
    assert run.status == "completed"
    first, last = reward_quarters(store, run.id)
    assert not last > first + LEARNING_MARGIN, (first, last)


def test_reward_that_raises_fails_the_run_with_its_message(tiny_model: Path, tmp_path: Path) -> None:
    reward_file = tmp_path / "bad_reward.py"
    reward_file.write_text("def boom(completions, **kwargs):\n    raise ZeroDivisionError('reward exploded at 42')\n")
    spec = smoke_dict(tiny_model)
    spec["rewards"] = [{"name": "boom", "function": f"{reward_file}:boom"}]
    store = Store()
    run = wait(store, launch(spec, store), poll_s=0.3)
    assert run.status == "failed"
    assert run.error is not None and "ZeroDivisionError: reward exploded at 42" in run.error
    assert run.exit_code == 1
    shown = cli("show", run.id)
    assert "failed" in shown.stdout and "reward exploded at 42" in shown.stdout
    logs = cli("logs", run.id, "-n", "200")
    assert "ZeroDivisionError" in logs.stdout


def test_cancel_mid_run_stops_the_whole_process_group(tiny_model: Path) -> None:
    store = Store()
    run = launch(smoke_dict(tiny_model, max_steps=5000), store)
    wait_for(lambda: (refresh(store, store.get_run(run.id)).last_step or 0) >= 3, timeout=600)
    pgid = run.pid
    assert pgid is not None and local_process.group_alive(pgid)
    t0 = time.monotonic()
    run = cancel(store, store.get_run(run.id), wait=True)
    elapsed = time.monotonic() - t0
    assert run.status == "canceled", run
    assert elapsed < 15, f"cancel took {elapsed:.1f} s (grace period 10 s, then SIGKILL)"
    assert not local_process.group_alive(pgid), "processes of the job's group survived the cancel"
    events = [e["event"] for e in store.events(run.id)]
    assert events[-1] == "canceled"  # the job stopped at a step boundary and said so
    assert 3 <= (run.last_step or 0) < 5000


def test_watcher_killed_mid_run_and_restarted_loses_and_duplicates_nothing(tiny_model: Path) -> None:
    store = Store()
    run = launch(smoke_dict(tiny_model, max_steps=150), store)
    watch = [sys.executable, "-m", "grpo_dashboard", "watch", "--interval", "0.2", "--until-idle"]
    first = subprocess.Popen(watch, cwd=REPO, env=os.environ.copy())
    try:
        wait_for(lambda: store.get_run(run.id).n_records >= 10, timeout=600)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    ingested_before = store.get_run(run.id).n_records
    assert ingested_before < 151, "the run finished before the watcher was killed; nothing was tested"
    second = subprocess.run(watch, cwd=REPO, env=os.environ.copy(), timeout=900)
    assert second.returncode == 0
    run = store.get_run(run.id)
    assert run.status == "completed"
    assert same_values(jsonl_records(metrics_path(run)), store_records(store, run.id))
    assert run.n_records == 151 and run.n_skipped == 0


def test_vanished_and_reused_pids_are_marked_failed(tmp_path: Path) -> None:
    store = Store()
    gone = subprocess.Popen(["true"])
    gone.wait()
    live_pid = os.getpid()
    for run_id, pid, start in (("gone", gone.pid, "1"), ("reused", live_pid, "not-my-start-time")):
        run_dir = tmp_path / run_id
        run_dir.mkdir()
        (run_dir / "job.log").write_text("loading model\nRuntimeError: CUDA out of memory\n")
        store.insert_run(
            Run(
                id=run_id,
                name=run_id,
                spec_yaml="",
                backend="local",
                status="running",
                created_at=time.time(),
                run_dir=str(run_dir),
                pid=pid,
                pid_start=start,
            )
        )
        run = refresh(store, store.get_run(run_id))
        assert run.status == "failed"
        assert f"job process {pid} vanished" in run.error
        assert "RuntimeError: CUDA out of memory" in run.error
    assert local_process.is_alive(live_pid, local_process.process_start_time(live_pid))
