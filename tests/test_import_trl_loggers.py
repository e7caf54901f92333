"""TRL's own logs, imported: a real tiny GRPO run logging through transformers' trackio, W&B (offline) and
TensorBoard callbacks, run as a user's plain script. Every source lands on the trainer's steps with TRL's key
names, like a launched run: `train/global_step` is the axis (not trackio's or W&B's call counters), `train/` and
`eval/` prefixes map back to `reward` / `eval_reward`, the resolved config becomes the spec (beta is 0.04, not
"beta is 0"), and every trackio run of a project can be chosen, not only the latest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.export import metric_rows
from grpo_dashboard.store.importers import import_run, import_run_main, trackio_runs

from .conftest import REPO

pytestmark = pytest.mark.training
SCRIPT = REPO / "tests" / "plain_trl_script.py"


def run_script(model: Path, work: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """The user's plain TRL script, from a shell in `work` (not launched by the dashboard)."""
    work.mkdir(parents=True, exist_ok=True)
    full = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(work / "wb"),
        "TENSORBOARD_LOGGING_DIR": str(work / "tb"),
        "TRACKIO_DIR": str(work.parent / "trackio"),
        "PYTHONPATH": str(REPO),
        **(env or {}),
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(model), str(work / "out"), *args],
        cwd=work,
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def curve(store: Store, run_id: str, key: str, split: str = "train") -> list[tuple[int, float]]:
    return [(s, round(float(v), 6)) for s, v, _ in store.series(run_id, key, split=split)]


@pytest.fixture(scope="module")
def logged(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run (4 steps, eval every 2) through all three loggers, then a second, shorter run into the same trackio
    project (transformers resumes a trackio run of the same name: another name makes another run)."""
    root = tmp_path_factory.mktemp("trl-loggers")
    run_script(
        tiny_model, root / "first", "--steps", "4", "--eval-steps", "2", "--report-to", "trackio,wandb,tensorboard"
    )
    run_script(
        tiny_model, root / "second", "--steps", "2", "--report-to", "trackio", "--beta", "0.0", "--run-name", "again"
    )
    return root


def test_trackio_wandb_and_tensorboard_of_one_trl_run_import_alike(logged: Path) -> None:
    store = Store()
    db = logged / "trackio" / "trl-proj.db"
    runs = trackio_runs(db)
    assert [r.name for r in runs] == ["plain-script", "again"] and runs[0].run_id != runs[1].run_id
    tr = import_run(db, store, run_name=runs[0].run_id)  # the first run, by its trackio id
    (wb_run,) = (logged / "first" / "wb" / "wandb").glob("offline-run-*")
    wb = import_run(wb_run, store)
    wb_parent = import_run(logged / "first" / "wb" / "wandb", store)  # the `wandb/` folder: its latest run
    tb = import_run(logged / "first" / "tb", store)
    reward = curve(store, tb.id, "reward")
    assert [s for s, _ in reward] == [1, 2, 3, 4]  # the trainer's steps, as TensorBoard's event steps are
    for run in (tr, wb, wb_parent):
        assert curve(store, run.id, "reward") == reward
        assert curve(store, run.id, "kl") == curve(store, tb.id, "kl")
        assert [s for s, _ in curve(store, run.id, "eval_reward", "eval")] == [2, 4]
        assert curve(store, run.id, "eval_reward", "eval") == curve(store, tb.id, "eval_reward", "eval")
        keys = {k for split, k in store.metric_keys(run.id) if split == "train"}
        assert not any(k.startswith(("train/", "eval/", "profiling/", "_")) for k in keys), keys
        assert {"reward", "kl", "entropy", "completions/mean_length", "frac_reward_zero_std"} <= keys
        got = store.get_run(run.id)
        assert got.last_step == 4 and got.n_records == 6  # 4 train + 2 eval records, as the job records them
        spec = RunSpec.from_yaml(got.spec_yaml)
        assert spec.training["beta"] == 0.04 and spec.training["num_generations"] == 4
        assert max(r["step"] for r in metric_rows(store, run.id) if r["split"] != "system") == 4
    latest = import_run(db, store)  # default: the latest run of the project
    assert [s for s, _ in curve(store, latest.id, "reward")] == [1, 2]
    assert "beta" not in RunSpec.from_yaml(store.get_run(latest.id).spec_yaml).training  # beta 0 is TRL's default
    by_name = import_run(db, store, run_name="plain-script")  # an older run, by its name
    assert curve(store, by_name.id, "reward") == reward


def test_import_run_cli_lists_and_imports_every_trackio_run(logged: Path, capsys: Any) -> None:
    db = logged / "trackio" / "trl-proj.db"
    assert import_run_main([str(db), "--list-runs"]) == 0
    listed = capsys.readouterr().out.strip().splitlines()
    assert len(listed) == 2 and "plain-script" in listed[0] and "again" in listed[1]
    assert import_run_main([str(db), "--all-runs", "--tag", "batch"]) == 0
    store = Store()
    assert sorted(r.last_step for r in store.list_runs()) == [2, 4]
    assert import_run_main([str(db), "--run", "nope"]) == 1
    assert "--list-runs" in capsys.readouterr().err
