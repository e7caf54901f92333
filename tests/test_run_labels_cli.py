"""The CLI names and labels runs: `rename` (refused into a name another run has, so name lookups never move to
another run), `tag --add/--remove` and `runs --tag`, and `doctor RUN` on a run of the store by id or name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_dashboard.store.db import Run, RunStatus, Store
from grpo_dashboard.store.ingest import ingest_file

from .conftest import REPO


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _run(store: Store, tmp_path: Path, name: str, created: float, steps: int = 0) -> Run:
    """A run of the store (its metrics ingested from a log outside its run directory, as a remote run's are)."""
    run = Run(
        id=f"{name}-id",
        name=name,
        spec_yaml=f"name: {name}\n",
        backend="hf_jobs",
        status=RunStatus.COMPLETED.value,
        created_at=created,
        run_dir=str(tmp_path / name),
    )
    store.insert_run(run)
    if steps:
        log = tmp_path / f"{name}.log.jsonl"
        rows = [
            {
                "v": 1,
                "type": "log",
                "split": "train",
                "step": s,
                "time": 1.0 + s,
                "metrics": {"reward": 0.5, "reward_std": 0.0, "entropy": 0.01, "kl": 0.0, "loss": 0.0},
            }
            for s in range(1, steps + 1)
        ]
        log.write_text("".join(json.dumps(r) + "\n" for r in rows))
        ingest_file(store, run.id, log)
    return run


def test_rename_refuses_a_name_another_run_has_and_lookups_stay_put(tmp_path: Path) -> None:
    store = Store()
    _run(store, tmp_path, "alpha", time.time() - 10)
    _run(store, tmp_path, "beta", time.time())
    proc = _cli("rename", "beta", "alpha")
    assert proc.returncode == 1 and "already the name of run alpha-id" in proc.stderr
    assert store.find_run("alpha").id == "alpha-id" and store.get_run("beta-id").name == "beta"
    with pytest.raises(ValueError, match="already the name"):
        store.rename_run("beta-id", "alpha")
    proc = _cli("rename", "beta", "gamma")
    assert proc.returncode == 0 and "beta-id: beta -> gamma" in proc.stdout
    assert store.find_run("gamma").id == "beta-id"
    assert _cli("rename", "nope", "x").returncode == 3


def test_tags_are_added_removed_and_filter_the_runs_list(tmp_path: Path) -> None:
    store = Store()
    _run(store, tmp_path, "alpha", time.time() - 10)
    _run(store, tmp_path, "beta", time.time())
    proc = _cli("tag", "beta", "--add", "ablation", "--add", "lr-sweep")
    assert proc.returncode == 0 and proc.stdout.strip() == "beta-id: ablation, lr-sweep"
    listed = _cli("runs", "--tag", "ablation")
    assert listed.returncode == 0 and "beta-id" in listed.stdout and "alpha-id" not in listed.stdout
    assert _cli("tag", "beta", "--remove", "ablation").stdout.strip() == "beta-id: lr-sweep"
    assert "no runs" in _cli("runs", "--tag", "ablation").stdout
    assert _cli("tag", "beta", "--add", " ").returncode == 1


def test_doctor_takes_a_run_id_or_name(tmp_path: Path) -> None:
    store = Store()
    run = _run(store, tmp_path, "collapsed", time.time(), steps=30)
    by_file = _cli("doctor", str(tmp_path / "collapsed.log.jsonl"), "--json")
    by_id = _cli("doctor", run.id, "--json")
    by_name = _cli("doctor", "--json", "collapsed")
    assert by_id.returncode == by_name.returncode == by_file.returncode, by_id.stderr + by_file.stderr
    rules = [f["rule"] for f in json.loads(by_file.stdout)]
    assert rules and [f["rule"] for f in json.loads(by_id.stdout)] == rules == [
        f["rule"] for f in json.loads(by_name.stdout)
    ]
    missing = _cli("doctor", "no-such-run-or-file")
    assert missing.returncode == 2


def test_cancel_of_a_run_that_already_ended_says_so_and_fails(tmp_path: Path) -> None:
    store = Store()
    _run(store, tmp_path, "done", time.time())
    proc = _cli("cancel", "done")
    assert proc.returncode == 1 and "already ended (completed): nothing to cancel" in proc.stderr, proc
    assert store.get_run("done-id").status == "completed"
