"""Real pathological GRPO runs (TRL's trainer, tiny CPU model) flagged by the intended rule within a bounded number of
steps of onset; the healthy smoke run raises nothing, live; the in-job guard stops a collapsing run with a
checkpoint, and alerts reach a real local webhook from a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.health import load_log_records

from .conftest import WebhookReceiver, reward_quarters, smoke_dict
from .health_scenarios import SCENARIOS, alarms, analyse, live_timeline, run_spec, train_records

pytestmark = pytest.mark.training

# Bounds (logged steps after the onset) within which the intended rule must fire. Observed on the tiny model with
# seed 0: collapse +3, constant reward +2 (warning) / +9 (error: 10 constant logs), truncation +4, format +5 to +8
# (its rule smooths over 5 logs and wants 3 of them, and CPU runs differ slightly from one machine state to another).
BOUNDS = {
    "entropy collapse": ("error", 4),
    "constant reward": ("warning", 3),
    "every completion truncated": ("error", 5),
    "off-policy clipping": ("warning", 5),
    "overfitting": ("warning", 8),
    "format hacking": ("warning", 10),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_pathological_run_is_flagged_by_the_intended_rule_within_bound(
    name: str, tiny_model: Path, tmp_path: Path
) -> None:
    scenario = SCENARIOS[name]
    store, run = run_spec(scenario.spec(tiny_model, tmp_path))
    assert run.status == "completed", run.error
    result = analyse(scenario, store, run)
    severity, bound = BOUNDS[name]
    flagged = result["error_at"] if severity == "error" else result["warning_at"]
    assert flagged is not None, result["timeline"]
    assert flagged - result["onset"] <= bound, (result["onset"], flagged, result["timeline"])
    records = train_records(store, run)
    if name == "constant reward":
        assert result["error_at"] is not None and result["error_at"] - result["onset"] <= 10
    if name == "every completion truncated":
        assert all(r["completions/mean_length"] <= 2 for r in records)
    if name == "off-policy clipping":  # TRL's own clip metric: 0 on each generation's first (on-policy) update
        clipped = [r["clip_ratio/region_mean"] for r in records]
        reused = [c for i, c in enumerate(clipped) if i % 4]
        assert clipped[::4] == [0.0] * 4 and min(reused) > 0 and sum(reused) / len(reused) > 0.25, clipped
    if name == "overfitting":  # TRL's own eval keys; the train reward rose while the eval reward fell
        evals = [r["eval_rewards/target_letter/mean"] for r in records if "eval_reward" in r]
        trains = [r["reward"] for r in records if "reward" in r]
        assert len(evals) == 6 and evals[-1] < evals[0] - 0.05 and sum(trains[-4:]) > sum(trains[:4]) + 0.2
    if name == "format hacking":  # the scenario is what it claims: the accuracy reward never moves
        assert {r["rewards/exact_answer/mean"] for r in records} == {0.0}
        assert sum(r["rewards/format/mean"] for r in records[-5:]) / 5 >= 0.95


def test_healthy_smoke_run_raises_no_warning_or_error_live_and_sends_no_alert(tiny_model: Path) -> None:
    """examples/smoke.yaml as shipped, with alerts on: the doctor replayed after every record finds nothing above
    info, no alert is POSTed, and the run learns. (The in-job checks' cost is a figure, printed by
    `python -m tests.health_scenarios`, not asserted here.)"""
    receiver = WebhookReceiver()
    try:
        spec = smoke_dict(tiny_model)
        spec["health"] = {"webhook_url": receiver.url}
        store, run = run_spec(spec)
    finally:
        receiver.close()
    assert run.status == "completed" and run.error is None
    records = train_records(store, run)
    assert len(records) == 100
    timeline = live_timeline(records, *_config(run))
    assert alarms(timeline) == {}, timeline
    assert receiver.posts == []
    first, last = reward_quarters(store, run.id)
    assert last > first + 0.15
    (summary,) = [e for e in store.events(run.id) if e["event"] == "health_summary"]
    assert summary["evaluations"] >= 2 and summary["alerts"] == 0 and summary["alert_failures"] == []


def test_guard_stops_a_collapsing_run_with_a_checkpoint_and_alerts_a_real_webhook(tiny_model: Path) -> None:
    receiver = WebhookReceiver()
    try:
        spec = smoke_dict(tiny_model, learning_rate=5e-2, max_steps=60)
        spec["health"] = {"guard": True, "guard_persist": 3, "webhook_url": receiver.url}
        store, run = run_spec(spec)
    finally:
        receiver.close()
    assert run.status == "completed" and run.exit_code in (None, 0)
    assert run.error and run.error.startswith("stopped by the health guard at step")
    # Everything is broken from step ~5; when the guard reacts depends on its time budget (evaluations are spaced
    # ~125x their cost apart), so only "well before max_steps" is asserted.
    assert run.last_step < 60, "the guard stopped the run before max_steps"
    events = {e["event"]: e for e in store.events(run.id)}
    stop = events["guard_stop"]
    assert stop["severity"] == "error" and stop["rule"] in run.error and stop["step"] == run.last_step
    assert Path(stop["checkpoint"]).is_dir() and (Path(stop["checkpoint"]) / "model.safetensors").is_file()
    assert (Path(run.run_dir) / "grpo_health" / "__init__.py").is_file()
    assert list(events) == ["starting", "started", "checkpoint", "guard_stop", "health_summary", "finished"]
    assert events["checkpoint"]["step"] == stop["step"]  # the guard's checkpoint is one `resume` offers
    posts = [p["json"] for p in receiver.posts]
    assert posts and posts[-1]["event"] == "guard_stop" and posts[-1]["finding"]["rule"] == stop["rule"]
    assert all(p["text"] and p["content"] and p["finding"]["severity"] in ("warning", "error") for p in posts)
    keys = [
        (p["finding"]["rule"], p["finding"]["metric"], p["finding"]["severity"])
        for p in posts
        if p["event"] == "finding"
    ]
    assert len(keys) == len(set(keys)) and (stop["rule"], "error") in {(r, s) for r, _, s in keys}
    # The guard's stop names the finding's first onset: never later than what an earlier alert on it said (a later
    # evaluation may only find the episode began earlier).
    assert stop["onset"] <= min(p["finding"]["step"] for p in posts if p["finding"]["rule"] == stop["rule"])
    assert events["health_summary"]["alerts"] == events["health_summary"]["webhook_posts"] == len(posts)
    records, _ = load_log_records(Path(run.run_dir) / "metrics.jsonl")
    assert max(r["step"] for r in records) == stop["step"]


def test_alerts_are_mirrored_to_trackio_in_a_real_run(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report_to trackio + alerts: each new warning/error is a trackio alert on the run TRL's callback opened."""
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    spec = smoke_dict(tiny_model, max_steps=6, report_to=["trackio"], project="grpo-health-test")
    spec["rewards"] = [{"name": "constant_reward", "builtin": "constant", "params": {"value": 0.5}}]
    spec["health"] = {"alerts": True}
    store, run = run_spec(spec)
    assert run.status == "completed", run.error
    summary = next(e for e in store.events(run.id) if e["event"] == "health_summary")
    assert summary["alerts"] >= 1 and summary["alert_failures"] == [] and summary["webhook_posts"] == 0
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
        "print(json.dumps(S.get_alerts(project='grpo-health-test')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    alerts = json.loads(out.stdout)  # read in a fresh process: trackio resolves TRACKIO_DIR at import
    assert len(alerts) == summary["alerts"]
    assert {a["level"] for a in alerts} <= {"warn", "error"} and any("flat_reward" in a["title"] for a in alerts)


def _config(run) -> tuple[dict, dict | None]:
    from grpo_dashboard.views.overview import run_config

    config, thresholds = run_config(run)
    return config, thresholds or None
