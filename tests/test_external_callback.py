"""A user's own TRL script with `DashboardCallback` (directory transport), run from a shell, not launched by the
dashboard: a running dashboard's monitor picks the run up while it trains and follows it like a launched run, with
the job's own recording (TRL's metric names and values, the resolved config as spec, samples, system samples, the
health guard), and ends it by its own events, or as failed when the script dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.launch import runs
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.external import EXTERNAL
from grpo_dashboard.store.series import SYSTEM_SPLIT
from grpo_dashboard.views import completions, system_panel

from .conftest import REPO, WebhookReceiver, jsonl_records, same_values, store_records, wait_for

SCRIPT = REPO / "tests" / "plain_trl_script.py"


def start_script(
    model: Path, work: Path, data: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """The plain TRL script with the callback pointed at the dashboard's data directory, from a shell in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(model), str(work / "out"), "--dashboard", str(data), *args],
        cwd=work,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "PYTHONPATH": str(REPO),
            **(env or {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_callback_argument_errors_name_the_option() -> None:
    from grpo_dashboard.integrations import DashboardCallback

    with pytest.raises(ValueError, match=r"health=\{'gaurd': True\}.*the options are thresholds, guard"):
        DashboardCallback("/tmp/x", health={"gaurd": True})


@pytest.mark.training
def test_plain_script_with_the_callback_is_followed_live_like_a_launched_run(
    tiny_model: Path, tmp_path: Path, data_dir: Path
) -> None:
    store = Store()
    monitor = runs.Monitor(store, interval_s=0.2).start()
    try:
        history = tmp_path / "history.json"
        proc = start_script(
            tiny_model, tmp_path / "a", data_dir, "--steps", "4", "--step-sleep", "1.0", "--guard",
            "--log-history", str(history),
        )  # fmt: skip
        live = wait_for(lambda: [r for r in store.list_runs() if r.n_records >= 1], timeout=180)
        assert proc.poll() is None, "the run was seen only after the script ended"
        run = live[0]
        assert run.backend == EXTERNAL and run.status == "running"
        assert runs.job_summary(run) and "DashboardCallback" in runs.job_summary(run)
        assert not runs.can_cancel(run)  # no Cancel button: nothing in the dashboard can reach the script
        with pytest.raises(Exception, match="Stop the script where it runs"):
            runs.cancel(store, run)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
        run = wait_for(lambda: (r := store.get_run(run.id)).status == "completed" and r, timeout=60)
    finally:
        monitor.stop()
    run_dir = Path(run.run_dir)
    # What the store holds is what the callback wrote, which is what TRL itself logged, key for key.
    assert same_values(store_records(store, run.id), jsonl_records(run_dir / "metrics.jsonl"))
    trl_logs = [r for r in json.loads(history.read_text()) if "reward" in r]
    train = store_records(store, run.id)
    assert [s for (split, s) in train if split == "train"][:4] == [1, 2, 3, 4]
    for rec in trl_logs:
        stored = train[("train", rec["step"])]
        assert {k: stored[k] for k in rec if k != "step"} == {k: v for k, v in rec.items() if k != "step"}
    assert run.last_step == 4 and run.max_steps == 4
    spec = RunSpec.from_yaml(run.spec_yaml)
    assert spec.training["beta"] == 0.04 and spec.training["num_generations"] == 4 and spec.health.guard
    assert EXTERNAL in spec.tags
    events = {e["event"]: e for e in store.events(run.id)}
    assert events["started"]["config"]["beta"] == 0.04
    assert events["health_summary"]["evaluations"] >= 1  # the guard ran in the script
    assert completions.sample_steps(run.run_dir) == [1, 2, 3, 4]
    assert completions.read_step(run.run_dir, 1)[0]["rewards"].keys() == {"letter_reward"}
    system = [k for split, k in store.metric_keys(run.id) if split == SYSTEM_SPLIT]
    assert "system/process/rss_gb" in system_panel.panel_keys(store.metric_keys(run.id)) and system


@pytest.mark.training
def test_a_killed_script_fails_its_run_and_other_ranks_write_nothing(
    tiny_model: Path, tmp_path: Path, data_dir: Path
) -> None:
    store = Store()
    proc = start_script(tiny_model, tmp_path / "k", data_dir, "--steps", "50", "--step-sleep", "0.5")

    def seen() -> list[Run]:
        runs.refresh_active(store)
        return [r for r in store.list_runs() if r.n_records >= 1]

    (run,) = wait_for(seen, timeout=180)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_for(lambda: (runs.refresh_active(store), store.get_run(run.id))[1].status == "failed", timeout=30)
    run = store.get_run(run.id)
    assert f"pid {proc.pid}" in (run.error or "") and "ended without a finished event" in run.error
    before = {p.name for p in (data_dir / "runs").iterdir()}
    other = start_script(tiny_model, tmp_path / "r1", data_dir, "--steps", "1", env={"RANK": "1"})
    out, _ = other.communicate(timeout=300)
    assert other.returncode == 0, out[-3000:]
    assert {p.name for p in (data_dir / "runs").iterdir()} == before  # only the main process records


@pytest.mark.training
def test_a_plain_scripts_findings_reach_its_webhook(
    tiny_model: Path, tmp_path: Path, data_dir: Path, receiver: WebhookReceiver
) -> None:
    """Alerts are first-class for an external run: the callback's health options post each new finding to the
    webhook from the script itself, as a launched job does, and its summary counts them."""
    health = {
        "webhook_url": receiver.url,
        "thresholds": {"truncation.extreme": 0.2, "truncation.persist": 1},  # the tiny model's completions are cut
    }
    proc = start_script(tiny_model, tmp_path / "w", data_dir, "--steps", "2", "--health", json.dumps(health))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    findings = [p["json"] for p in receiver.posts if p["json"] and p["json"].get("event") == "finding"]
    assert findings, receiver.posts
    assert {f["finding"]["rule"] for f in findings} >= {"truncation"}
    assert all(
        f["run"] == "plain-script" and "truncation" in f["text"]
        for f in findings
        if f["finding"]["rule"] == "truncation"
    )
    (run_dir,) = (data_dir / "runs").iterdir()
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (summary,) = [e for e in events if e.get("event") == "health_summary"]
    assert summary["alerts"] == summary["webhook_posts"] == len(receiver.posts)
