"""System samples (CPU, memory, GPUs) as the run's `system` series: what the job's sampler writes, how the store keeps
them apart from training steps, and how the System chart, Compare, the remote status line and export show them."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grpo_dashboard.launch.hf_jobs.stream import job_system_metrics
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.export import metric_rows
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import charts
from grpo_dashboard.views.remote_status import remote_markdown

from .store_helpers import new_run

SETUP = job_module().grpo_job_setup
T0 = 1_700_000_000.0

# A Jobs metrics event as huggingface_hub yields it (two GPUs, ids in no particular order).
JOB_SAMPLE = {
    "cpu_usage_pct": 37.5,
    "cpu_millicores": 3500,
    "memory_used_bytes": 8_000_000_000,
    "memory_total_bytes": 32_000_000_000,
    "rx_bps": 0,
    "tx_bps": 0,
    "replica": "r1",
    "gpus": {
        "f00d": {"utilization": 12, "memory_used_bytes": 6_000_000_000, "memory_total_bytes": 24_000_000_000},
        "a1b2": {"utilization": 91, "memory_used_bytes": 18_000_000_000, "memory_total_bytes": 24_000_000_000},
    },
}


def _lines(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("a") as f:
        for rec in records:
            f.write(json.dumps({"v": 1, **rec}) + "\n")


def _train(step: int, reward: float) -> dict[str, Any]:
    return {
        "type": "log",
        "split": "train",
        "step": step,
        "time": T0 + step,
        "max_steps": 10,
        "metrics": {"reward": reward, "loss": 0.1},
    }


def _system(t: float, metrics: dict[str, float]) -> dict[str, Any]:
    return {"type": "log", "split": "system", "step": int(t * 1000), "time": t, "metrics": metrics}


def test_the_jobs_sampler_writes_this_processs_memory_and_cpu_without_cuda() -> None:
    emitted: list[dict[str, Any]] = []
    sampler = SETUP.SystemSampler(emitted.append, interval_s=0.01)
    assert sampler.start()._thread is None  # no CUDA here: no timer thread, samples come with the logs only
    first = sampler.sample()
    sum(i * i for i in range(300_000))  # some CPU time between the two samples
    second = sampler.sample()
    assert emitted == [first, second] and first["split"] == "system" and second["step"] > first["step"]
    assert abs(second["step"] / 1000 - second["time"]) < 0.002  # stepped by its wall time in ms
    assert not any(k.startswith("system/gpu") for k in second["metrics"])
    with open("/proc/self/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    assert second["metrics"]["system/process/rss_gb"] == pytest.approx(rss_kb * 1e3 / 1e9, rel=0.1)
    assert "system/process/cpu_pct" not in first["metrics"] and 5 < second["metrics"]["system/process/cpu_pct"] < 400
    sampler.stop()


def test_jobs_on_hf_jobs_leave_the_gpus_to_the_hubs_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETUP.SYSTEM_GPUS_ENV, "0")
    sampler = SETUP.SystemSampler(lambda record: None, interval_s=0.01)
    assert not sampler.gpus and sampler.start()._thread is None
    assert set(sampler.sample()["metrics"]) == {"system/process/rss_gb"}


def test_gpu_metrics_are_empty_without_cuda() -> None:
    assert "torch" in sys.modules or pytest.importorskip("torch")
    assert SETUP.gpu_metrics() == {}


def test_a_jobs_metrics_sample_becomes_system_metrics_with_gpus_numbered_by_id() -> None:
    m = job_system_metrics(JOB_SAMPLE)
    assert m["system/cpu/utilization"] == 37.5
    assert m["system/memory/used_gb"] == 8.0 and m["system/memory/total_gb"] == 32.0 and m["system/memory/pct"] == 25.0
    assert m["system/gpu0/utilization"] == 91 and m["system/gpu0/memory_used_gb"] == 18.0  # "a1b2" sorts first
    assert m["system/gpu0/memory_pct"] == 75.0 and m["system/gpu1/memory_pct"] == 25.0
    assert job_system_metrics({"gpus": {"x": {"utilization": None}}, "cpu_usage_pct": "n/a"}) == {}


def test_system_samples_are_series_but_not_training_steps(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    records = []
    for step in range(1, 6):
        records.append(_train(step, 0.1 * step))
        records.append(
            _system(
                T0 + step + 0.5, {"system/process/rss_gb": 1.0 + step / 10, "system/gpu0/utilization": 80.0 + step}
            )
        )
    _lines(path, records)
    res = ingest_file(store, "r1", path)
    run = store.get_run("r1")
    assert res.records == 5 and run.n_records == 5 and run.last_step == 5 and run.last_time == T0 + 5
    rss = store.arrays("r1", "system/process/rss_gb", "system")
    assert rss.steps.tolist() == [int((T0 + s + 0.5) * 1000) for s in range(1, 6)]
    assert rss.values.tolist() == pytest.approx([1.1, 1.2, 1.3, 1.4, 1.5])
    assert all(set(r) <= {"step", "reward", "loss"} for r in store.records("r1"))  # the doctor's view: steps only
    token = store.change_token("r1")
    _lines(path, [_system(T0 + 9, {"system/process/rss_gb": 2.0})])
    ingest_file(store, "r1", path)
    assert store.change_token("r1") != token and store.get_run("r1").last_step == 5
    from grpo_dashboard.health.loaders import load_log_records

    logged, _ = load_log_records(path)  # `doctor metrics.jsonl` reads training records only
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5] and all("reward" in r for r in logged)
    # A resume from the checkpoint at step 3 drops the later steps; the samples (wall time) stay
    store.truncate_after("r1", 3)
    assert store.arrays("r1", "reward").steps.tolist() == [1, 2, 3]
    assert len(store.arrays("r1", "system/process/rss_gb", "system")) == 6
    # export-metrics: the samples are rows of split "system", their step their wall time in ms
    rows = [r for r in metric_rows(store, "r1") if r["split"] == "system"]
    assert len(rows) == 6 and rows[0]["step"] == int((T0 + 1.5) * 1000) and rows[0]["time"] == T0 + 1.5


def test_the_system_panel_draws_every_device_per_quantity_against_time(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    _lines(
        path,
        [_train(s, 0.1 * s) for s in range(1, 4)]
        + [_system(T0 + s, job_system_metrics(JOB_SAMPLE) | {"system/process/rss_gb": 0.5}) for s in range(1, 4)],
    )
    ingest_file(store, "r1", path)
    for xaxis, expected in (("step", "relative time"), ("num_tokens", None), ("wall time", "wall time")):
        data, layout = charts.run_specs(store, "r1", charts.ChartOptions(xaxis=xaxis), None, None, T0, ())["system"]
        if expected is None:  # not logged as a metric axis by this run: every panel says so
            assert not data and "num_tokens is not logged" in layout["annotations"][0]["text"]
            continue
        titles = [a["text"] for a in layout["annotations"]]
        assert titles == [
            "GPU utilisation (%)",
            "GPU memory (GB)",
            "GPU memory (% of total)",
            "CPU (%: job of its cores, process of one core)",
            "Memory (GB: job's RAM, process's RSS)",
            "Memory (% of the job's RAM)",
        ]
        value = {t["meta"]["s"]: t for t in data if t["meta"]["r"] == "smooth"}
        assert "system|system/gpu0/memory_total_gb" not in value  # a constant: in the store, not drawn
        gpu1 = value["system|system/gpu1/utilization"]
        assert gpu1["meta"]["x"] == expected and gpu1["yaxis"] == "y"
        assert gpu1["y"].tolist() == pytest.approx([12, 12, 12])
        assert value["system|system/memory/pct"]["yaxis"] == "y6"
        if xaxis == "step":
            assert gpu1["x"].tolist() == pytest.approx([1 / 60, 2 / 60, 3 / 60])  # minutes since the start
            assert layout["xaxis6"]["title"]["text"] == "minutes since start"
        same = {value[f"system|system/gpu0/{k}"]["line"]["color"] for k in ("utilization", "memory_pct")}
        assert len(same) == 1 and same != {gpu1["line"]["color"]}  # one colour per GPU across the rows
    none = charts.run_specs(store, "r1", charts.ChartOptions(), None, None, T0, ())["reward"]
    assert none[0]  # the other panels are unchanged


def test_the_status_line_of_a_job_shows_its_newest_sample(tmp_path: Path) -> None:
    store = Store()
    run = Run(
        id="j",
        name="j",
        spec_yaml="",
        backend="hf_jobs",
        status="running",
        created_at=time.time(),
        run_dir=str(tmp_path),
        external_id="abc123",
    )
    store.insert_run(run)
    path = tmp_path / "m.jsonl"
    _lines(
        path,
        [
            _system(T0, job_system_metrics({**JOB_SAMPLE, "cpu_usage_pct": 5})),
            _system(T0 + 10, job_system_metrics(JOB_SAMPLE)),
        ],
    )
    ingest_file(store, "j", path)
    text = remote_markdown(run, store)
    assert "GPU0 91% · 18 GB / 24 GB; GPU1 12% · 6 GB / 24 GB; CPU 37.5%" in text
    assert np.isfinite(store.arrays("j", "system/cpu/utilization", "system").values).all()


def test_compare_overlays_a_system_metric_of_two_runs_against_time(tmp_path: Path) -> None:
    from grpo_dashboard.spec import presets
    from grpo_dashboard.ui.compare import compare
    from grpo_dashboard.ui.context import UiContext

    store = Store()
    for run_id, gb in (("r1", 1.0), ("r2", 2.0)):
        path = new_run(store, tmp_path, run_id)
        _lines(
            path,
            [_train(s, 0.1) for s in (1, 2)]
            + [_system(T0 + 60 * s, {"system/process/rss_gb": gb * s}) for s in (1, 2, 3)],
        )
        ingest_file(store, run_id, path)
    ctx = UiContext(store, presets.PROJECT_ROOT)
    options, fig, _ = compare(ctx, ["r1", "r2"], "system/process/rss_gb", 0.0, False, "step")
    assert "system/process/rss_gb" in options["choices"] and options["value"] == "system/process/rss_gb"
    lines = {t.name.split(" ")[0]: t for t in fig.data}
    assert list(lines["r1"].y) == [1.0, 2.0, 3.0] and list(lines["r2"].y) == [2.0, 4.0, 6.0]
    assert list(lines["r1"].x) == [0.0, 1.0, 2.0]  # minutes since each run's first sample, not ms steps
    assert fig.layout.xaxis.title.text == "minutes since start"
