"""Runs from other tools, each from a real file made here: a trainer_state.json and checkpoint directory written by
transformers' TrainerState, a TRL JSONL log, a trackio project written by trackio, a TensorBoard directory written
by transformers' TensorBoardCallback, a W&B history export; then export-metrics and bad inputs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.launch.runs import refresh
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Store, data_dir
from grpo_dashboard.store.export import export_metrics, metric_rows
from grpo_dashboard.store.importers import IMPORTED, ImportRunError, import_run
from grpo_dashboard.store.series import SYSTEM_SPLIT
from grpo_dashboard.views import system_panel

from .conftest import REPO

LOGS = [
    {
        "loss": 0.1 * s,
        "reward": s / 10,
        "kl": 0.001 * s,
        "learning_rate": 1e-6,
        "epoch": s / 8,
        "num_tokens": 100.0 * s,
    }
    for s in range(1, 9)
]


def _steps(store: Store, run_id: str, key: str = "reward") -> list[tuple[int, float | None]]:
    return [(s, v) for s, v, _ in store.series(run_id, key)]


def _assert_imported(store: Store, run_id: str, kind: str) -> None:
    run = store.get_run(run_id)
    assert run.backend == IMPORTED and run.status == "completed"
    assert refresh(store, run).status == "completed"  # nothing refreshes it, nothing fails on it
    spec = RunSpec.from_yaml(run.spec_yaml)
    assert IMPORTED in spec.tags and kind in spec.tags


def test_trainer_state_and_checkpoint_dir(tmp_path: Path) -> None:
    from transformers import TrainerState

    out = tmp_path / "output"
    for step in (4, 8):
        state = TrainerState(global_step=step, max_steps=8, logging_steps=1)
        state.log_history = [{**r, "step": i + 1} for i, r in enumerate(LOGS[:step])]
        (out / f"checkpoint-{step}").mkdir(parents=True)
        state.save_to_json(str(out / f"checkpoint-{step}" / "trainer_state.json"))
    store = Store()
    run = import_run(out, store, tags=["baseline"])  # the output dir: its newest checkpoint
    assert _steps(store, run.id) == [(s, s / 10) for s in range(1, 9)]
    _assert_imported(store, run.id, "trainer_state")
    assert "baseline" in RunSpec.from_yaml(run.spec_yaml).tags
    half = import_run(out / "checkpoint-4" / "trainer_state.json", store)
    assert [s for s, _ in _steps(store, half.id)] == [1, 2, 3, 4]


def test_trl_jsonl_log_and_export_metrics_round_trip(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(json.dumps({**r, "step": i + 1}) + "\n" for i, r in enumerate(LOGS))
        + json.dumps({"eval_reward": 0.5, "step": 8})
        + "\n"
    )
    store = Store()
    run = import_run(log, store)
    _assert_imported(store, run.id, "jsonl")
    rows = metric_rows(store, run.id)
    assert [(r["step"], r["split"]) for r in rows] == [(s, "train") for s in range(1, 9)] + [(8, "eval")]
    for suffix in (".csv", ".jsonl", ".parquet"):
        path = tmp_path / f"m{suffix}"
        proc = subprocess.run(
            [sys.executable, "-m", "grpo_dashboard", "export-metrics", run.id, "-o", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.returncode == 0, proc.stderr
    back = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert back == rows
    import pandas as pd

    csv, parquet = pd.read_csv(tmp_path / "m.csv"), pd.read_parquet(tmp_path / "m.parquet")
    assert list(csv["reward"].dropna()) == [r / 10 for r in range(1, 9)] == list(parquet["reward"].dropna())
    assert list(csv["eval_reward"].dropna()) == [0.5]
    with pytest.raises(ValueError, match=r"must end in \.csv, \.jsonl, \.parquet"):
        export_metrics(store, run.id, tmp_path / "m.txt")


def test_trackio_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trackio_dir = tmp_path / "trackio"
    script = (
        "import time\nimport trackio\n"
        "trackio.init(project='grpo-proj', name='run-a', config={'learning_rate': 1e-6})\n"
        "for s in range(1, 6):\n    trackio.log({'reward': s / 10, 'kl': 0.01 * s}, step=s)\n"
        "for u in (40.0, 60.0):\n"  # what trackio's GPU and CPU monitors log, by wall time
        "    trackio.log_system({'gpu/0/utilization': u, 'gpu/0/allocated_memory': 10.0, "
        "'gpu/0/total_memory': 80.0, 'gpu/0/memory_usage': 0.125, 'gpu/0/power': 300.0, "
        "'cpu/utilization': 20.0, 'memory/used': 4.0, 'memory/percent': 12.5})\n"
        "    time.sleep(0.05)\n"
        "trackio.finish()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TRACKIO_DIR": str(trackio_dir), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    db = trackio_dir / "grpo-proj.db"
    store = Store()
    run = import_run(db, store)
    assert _steps(store, run.id) == [(s, s / 10) for s in range(1, 6)]
    assert run.name == "grpo-proj/run-a"
    assert run.max_steps == 5 and run.last_step == 5  # system samples, stepped by wall time, are not steps

    def system(key: str) -> list[float]:
        return [round(v, 3) for _, v, _ in store.series(run.id, key, SYSTEM_SPLIT)]

    assert system("system/gpu0/utilization") == [40.0, 60.0]
    assert store.series(run.id, "system/gpu0/utilization", SYSTEM_SPLIT)[0][0] > 1e12  # step = wall time in ms
    assert system("system/gpu0/memory_used_gb") == [10.737] * 2  # trackio's GiB in GB
    assert system("system/gpu0/memory_pct") == system("system/memory/pct") == [12.5, 12.5]
    assert system("system/cpu/utilization") == [20.0, 20.0]
    assert system("system/gpu0/power") == [300.0, 300.0]  # kept, under its own name
    assert {"system/gpu0/utilization", "system/gpu0/memory_used_gb", "system/memory/used_gb"} <= set(
        system_panel.panel_keys(store.metric_keys(run.id))
    )
    _assert_imported(store, run.id, "trackio")
    with pytest.raises(ImportRunError, match="no run named or with the id 'nope'"):
        import_run(db, store, run_name="nope")
    other = tmp_path / "other.db"  # a trackio database of a schema version this importer does not read
    conn = sqlite3.connect(other)
    conn.executescript(
        "CREATE TABLE metrics (id INTEGER, run_name TEXT, step "
        "INTEGER, metrics TEXT, timestamp TEXT); PRAGMA user_version = 7;"
    )
    conn.close()
    before = len(store.list_runs())
    with pytest.raises(ImportRunError, match=r"schema version 7.*reads trackio schema versions \(1, 2\)"):
        import_run(other, store)
    assert len(store.list_runs()) == before


def test_tensorboard_dir_written_by_transformers_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import TensorBoardCallback

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    state, control = TrainerState(max_steps=8), TrainerControl()
    callback = TensorBoardCallback()
    callback.on_train_begin(args, state, control)
    for i, logs in enumerate(LOGS):
        state.global_step = i + 1
        callback.on_log(args, state, control, logs=dict(logs))
    state.global_step = 8
    callback.on_log(args, state, control, logs={"eval_reward": 0.25})
    callback.on_train_end(args, state, control)
    store = Store()
    run = import_run(tmp_path / "tb", store)
    assert [(s, round(v, 6)) for s, v in _steps(store, run.id)] == [(s, s / 10) for s in range(1, 9)]
    assert [v for _, v, _ in store.series(run.id, "eval_reward", split="eval")] == [0.25]
    _assert_imported(store, run.id, "tensorboard")


def test_wandb_history_export_and_bad_paths(tmp_path: Path) -> None:
    import pandas as pd

    history = pd.DataFrame(
        [
            {
                "_step": i + 1,
                "_timestamp": 1.7e9 + i,
                "_runtime": i,
                "train/reward": r["reward"],
                "train/kl": r["kl"],
                "train/global_step": i + 1,
            }
            for i, r in enumerate(LOGS)
        ]
    )
    history.to_csv(tmp_path / "history.csv", index=False)
    store = Store()
    run = import_run(tmp_path / "history.csv", store)
    assert _steps(store, run.id) == [(s, s / 10) for s in range(1, 9)]
    _assert_imported(store, run.id, "wandb")
    runs_before = len(store.list_runs())
    with pytest.raises(ImportRunError, match="does not exist"):
        import_run(tmp_path / "missing", store)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImportRunError, match="cannot be imported"):
        import_run(tmp_path / "empty", store)
    assert len(store.list_runs()) == runs_before
    assert {p.name for p in (data_dir() / "runs").iterdir()} == {r.id for r in store.list_runs()}


def test_a_monotone_logged_metric_is_the_x_axis(tmp_path: Path) -> None:
    import numpy as np

    from grpo_dashboard.views import charts

    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({**r, "step": i + 1}) + "\n" for i, r in enumerate(LOGS)))
    store = Store()
    run = import_run(log, store)
    for axis, expected in (("num_tokens", [100.0 * s for s in range(1, 9)]), ("epoch", [s / 8 for s in range(1, 9)])):
        specs = charts.run_specs(store, run.id, charts.ChartOptions(smoothing=0.0, xaxis=axis), None, None, None, ())
        traces, layout = specs["reward"]
        main = next(t for t in traces if t["name"].startswith("reward"))
        assert np.allclose(np.asarray(main["x"], dtype=float), expected) and layout["xaxis"]["title"]["text"] == axis
    bad = tmp_path / "bad.jsonl"  # num_tokens that goes down is no axis
    bad.write_text(
        "".join(json.dumps({"reward": 0.1, "num_tokens": float(10 - s), "step": s}) + "\n" for s in range(1, 5))
    )
    other = import_run(bad, store)
    traces, layout = charts.run_specs(store, other.id, charts.ChartOptions(xaxis="num_tokens"), None, None, None, ())[
        "reward"
    ]
    assert not traces and "not logged as a growing metric" in layout["annotations"][0]["text"]


def test_a_verl_console_log_imports_with_its_keys_on_trl_panels_and_the_doctor(tmp_path: Path) -> None:
    """verl's step lines keep verl's names in the store; the panels and the doctor read them as the TRL metrics
    they are (score as reward, pg_clipfrac as the clip ratio)."""
    from grpo_dashboard.health import diagnose
    from grpo_dashboard.views import charts
    from grpo_dashboard.views.run_data import metric_frame

    log = tmp_path / "slurm-42.out"
    lines = [
        f"(TaskRunner pid=9) step:{s} - actor/pg_clipfrac:np.float64({0.02 if s <= 20 else 0.35}) - "
        f"actor/entropy:0.8 - critic/score/mean:{0.2 + s / 100} - timing_s/step:30.0"
        for s in range(1, 41)
    ]
    log.write_text("\n".join(lines) + "\n")
    store = Store()
    run = import_run(log, store)
    _assert_imported(store, run.id, "console")
    assert _steps(store, run.id, "critic/score/mean")[:2] == [(1, pytest.approx(0.21)), (2, pytest.approx(0.22))]
    panels = charts.group_metrics(store.metric_keys(run.id))
    assert panels["reward"] == ["critic/score/mean"] and panels["clip"] == ["actor/pg_clipfrac"]
    assert panels["entropy"] == ["actor/entropy"] and "timing_s/step" in panels["other"] and not panels["log_metric"]
    specs = charts.run_specs(store, run.id, charts.ChartOptions(smoothing=0), None, None, run.started_at, ())
    drawn = {t["meta"]["s"]: t for t in specs["reward"][0]}
    assert drawn["train|critic/score/mean"]["y"].tolist() == pytest.approx([0.2 + s / 100 for s in range(1, 41)])
    found = {f.rule: f for f in diagnose(metric_frame(store, run.id))}
    assert found["clip_high"].severity == "warning" and found["clip_high"].step == 21
