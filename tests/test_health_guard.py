"""The in-job side of the health doctor without training: budgeted monitor, guard decisions, alert dedupe, webhook
POSTs to a real local HTTP server, shipping the package to a job, and how the dashboard records a guard stop."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grpo_dashboard.health import AlertSender, Finding, HealthMonitor, JobHealth, finding_history
from grpo_dashboard.health.alerts import alert_payload, post_json, trackio_alert
from grpo_dashboard.health.history import DENSE_CUTS, cut_steps
from grpo_dashboard.health.ship import PACKAGE_DIR, package_files, ship
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, RunStatus, Store
from grpo_dashboard.store.ingest import ingest_file

from .conftest import SMOKE_SPEC, WebhookReceiver

# ---- a real webhook receiver --------------------------------------------------------------------------------------


# ---- monitor ------------------------------------------------------------------------------------------------------


class FakeClock:
    """A clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def collapse_records(n: int, collapse_at: int) -> list[dict[str, Any]]:
    """Entropy 4.3 then ~0 from ``collapse_at`` on, reward rising a little; every other metric plain."""
    out = []
    for s in range(1, n + 1):
        out.append(
            {
                "step": s,
                "entropy": 4.3 if s < collapse_at else 0.001,
                "reward": 0.1 + s / 1000,
                "frac_reward_zero_std": 0.0 if s < collapse_at else 1.0,
                "grad_norm": 0.5,
                "loss": 0.0,
            }
        )
    return out


def test_guard_stops_only_after_the_error_persists() -> None:
    records = collapse_records(40, collapse_at=21)
    monitor = HealthMonitor({"beta": 0.0}, guard=True, guard_persist=3, budget=None)
    stop_step, stop = next((r["step"], u.stop) for r in records if (u := monitor.observe(r)).stop is not None)
    assert stop.severity == "error" and stop.rule in {"entropy_collapse", "zero_variance"}
    assert stop_step == _first_error_log(records) + 2  # seen at log k, k+1, k+2: guard_persist=3 logs


def _first_error_log(records: list[dict[str, Any]]) -> int:
    from grpo_dashboard.health import diagnose

    return next(
        r["step"]
        for i, r in enumerate(records)
        if any(f.severity == "error" for f in diagnose(records[: i + 1], {"beta": 0.0}))
    )


def test_guard_acts_on_the_replayed_record_when_the_budget_allows_no_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run so fast that the budget never affords an evaluation after the first: the fixed-cut replays (their time
    already spent) still bring the record up to date, and the guard stops on it within the dense first cuts."""
    import grpo_dashboard.health.history as history_module

    clock = FakeClock()
    real_diagnose = history_module.diagnose

    def slow_diagnose(frame: Any, *args: Any, **kwargs: Any) -> list[Finding]:
        clock.now += 1.0  # every rule evaluation costs far more than the training between logs
        return real_diagnose(frame, *args, **kwargs)

    monkeypatch.setattr(history_module, "diagnose", slow_diagnose)
    monitor = HealthMonitor({"beta": 0.0}, guard=True, guard_persist=3, clock=clock)
    updates = []
    for rec in collapse_records(40, collapse_at=4):
        clock.now += 0.001
        updates.append((rec["step"], monitor.observe(rec)))
    evaluated = [step for step, u in updates if u.evaluated]
    stops = [(step, u.stop) for step, u in updates if u.stop is not None]
    # Full evaluations: the first record, then only the persistence checks the replayed record made due.
    assert evaluated[0] == 1 and len(evaluated) <= 3 and stops, (evaluated, stops)
    step, stop = stops[0]
    assert stop.severity == "error" and step <= 12 and stop.step <= 6


def test_guard_off_and_healthy_log_never_stop() -> None:
    off = HealthMonitor(guard=False, budget=None)
    assert all(off.observe(r).stop is None for r in collapse_records(40, 21))
    on = HealthMonitor(guard=True, guard_persist=1, budget=None)
    healthy = [
        {"step": s, "entropy": 4.3 - s / 50, "reward": 0.1 + s / 100, "frac_reward_zero_std": 0.05}
        for s in range(1, 60)
    ]
    assert all(on.observe(r).stop is None for r in healthy)


def test_an_error_that_clears_resets_the_persistence_count() -> None:
    monitor = HealthMonitor(guard=True, guard_persist=5, budget=None)
    records = collapse_records(25, collapse_at=21)  # error from ~step 21, but only 4-5 logs of it ...
    recovered = [dict(r, step=r["step"] + 25, entropy=4.0, frac_reward_zero_std=0.0) for r in collapse_records(20, 99)]
    stops = [monitor.observe(r).stop for r in records[:23] + recovered]  # ... cut off after 3 logs
    assert all(s is None for s in stops)


def test_alerts_are_sent_once_per_finding_and_again_only_when_it_gets_worse() -> None:
    monitor = HealthMonitor(alerts=True, budget=None)
    sent: list[tuple[str, str | None, str, str]] = []
    for rec in collapse_records(40, 21):
        sent += [(f.rule, f.metric, f.severity, f.status) for f in monitor.observe(rec).alerts]
    assert len(sent) == len(set(sent)) and ("entropy_collapse", "entropy", "error", "active") in sent
    assert all(sev in ("warning", "error") for _, _, sev, _ in sent)
    per_finding: dict[tuple[str, str | None], list[str]] = {}
    for rule, metric, sev, _ in sent:
        per_finding.setdefault((rule, metric), []).append(sev)
    assert all(sevs in (["warning"], ["error"], ["warning", "error"]) for sevs in per_finding.values()), per_finding
    assert HealthMonitor(alerts=False, budget=None).observe(collapse_records(3, 1)[0]).alerts == []


def test_monitor_keeps_within_its_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """With diagnose costing 0.5 ms per logged record (50 ms at 100) and a log every 0.5 s, a 0.8% budget allows
    about one evaluation every ~13 logs late in a 300-log run, the history's replays of its fixed cuts included."""
    import grpo_dashboard.health.history as history_module

    clock = FakeClock()
    real_diagnose = history_module.diagnose

    def slow_diagnose(frame: Any, *args: Any, **kwargs: Any) -> list[Finding]:
        clock.now += 0.0005 * frame.n_records
        return real_diagnose(frame, *args, **kwargs)

    monkeypatch.setattr(history_module, "diagnose", slow_diagnose)
    monitor = HealthMonitor(budget=0.008, clock=clock)
    evaluated_at = []
    for rec in collapse_records(300, 1000):
        clock.now += 0.5
        if monitor.observe(rec).evaluated:
            evaluated_at.append(rec["step"])
    assert evaluated_at[0] == 1 and 15 <= len(evaluated_at) <= 30
    assert monitor.spent_s <= 0.008 * (clock.now - 0.5) + 0.05 and monitor.overhead <= 0.0085
    # The first 32 cuts are owed; later ones only within the budget, so the record may lag the log, and the final
    # evaluation (whatever the budget) catches up to exactly what finding_history gives on the same log.
    assert 32 <= monitor.replays < len(cut_steps(np.arange(1, 301)))
    behind = monitor.findings
    monitor.evaluate()
    assert monitor.replays == len(cut_steps(np.arange(1, 301)))
    assert [(f.rule, f.severity, f.step, f.status) for f in monitor.findings] == [
        (f.rule, f.severity, f.step, f.status) for f in finding_history(monitor.records)
    ]
    assert {f.rule for f in behind if f.status == "active"} <= {f.rule for f in monitor.findings}
    real = HealthMonitor()  # back to back records: nearly all the wall time is diagnose, so it runs rarely
    for rec in collapse_records(200, 1000):
        real.observe(rec)
    evaluations_s = real.spent_s - real.replay_s
    assert real.evaluations < 200 and evaluations_s <= real.budget * (real.clock() - real._started) + real._last_cost
    assert DENSE_CUTS <= real.replays <= len(cut_steps(np.arange(1, 200)))  # each cut at most once


def test_monitor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="guard_persist"):
        HealthMonitor(guard_persist=0)
    with pytest.raises(ValueError, match="unknown health threshold"):
        HealthMonitor(thresholds={"entropy_colapse.warn_ratio": 0.2})


# ---- alerts -------------------------------------------------------------------------------------------------------


FINDING = Finding(
    "entropy_collapse",
    "error",
    12,
    "entropy fell 4.30 -> 0.01.",
    "Lower learning_rate.",
    "entropy",
    {"baseline": 4.3, "current": float("inf")},
)


def test_payload_works_for_slack_and_discord_and_carries_the_finding() -> None:
    payload = alert_payload(FINDING, run_name="smoke")
    assert payload["text"] == payload["content"] and "entropy_collapse" in payload["text"]
    assert "smoke" in payload["text"] and "Lower learning_rate." in payload["text"]
    assert payload["finding"]["rule"] == "entropy_collapse" and payload["finding"]["evidence"]["current"] == "inf"
    json.dumps(payload, allow_nan=False)
    long = Finding("plateau", "warning", 1, "x" * 5000, "y")
    assert len(alert_payload(long)["content"]) <= 2000 and len(alert_payload(long)["text"]) > 5000
    assert "stopped by the health guard" in alert_payload(FINDING, stopped=True)["text"]


def test_sender_posts_json_to_a_real_http_server(receiver: WebhookReceiver) -> None:
    sender = AlertSender(receiver.url, run_name="r1")
    sender.send(FINDING)
    sender.send(FINDING, stopped=True)
    sender.close()
    assert [p["json"]["event"] for p in receiver.posts] == ["finding", "guard_stop"]
    assert receiver.posts[0]["content_type"] == "application/json" and not sender.failures


def test_failing_or_unreachable_webhooks_never_raise(capsys: pytest.CaptureFixture[str]) -> None:
    bad = WebhookReceiver(status=500)
    try:
        assert post_json(bad.url, {"text": "x"}) == "HTTP 500 Internal Server Error"
    finally:
        bad.close()
    assert post_json("http://127.0.0.1:9/nothing", {"text": "x"}, timeout=1).startswith("URLError")
    assert post_json("not a url", {"text": "x"}).startswith("ValueError")
    sender = AlertSender("http://127.0.0.1:9/nothing", timeout=1)
    sender.send(FINDING)
    sender.close()
    assert len(sender.failures) == 1 and "webhook POST for entropy_collapse failed" in capsys.readouterr().err


def test_trackio_mirror_calls_alert_with_level(monkeypatch: pytest.MonkeyPatch) -> None:
    import trackio

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(trackio, "alert", lambda **kw: calls.append(kw))
    assert trackio_alert(FINDING, "r1") is None
    assert calls[0]["level"] == trackio.AlertLevel.ERROR and "entropy_collapse" in calls[0]["title"]
    monkeypatch.setattr(trackio, "alert", lambda **kw: (_ for _ in ()).throw(RuntimeError("no run")))
    assert trackio_alert(FINDING) == "RuntimeError: no run"
    monkeypatch.setitem(sys.modules, "trackio", None)
    assert trackio_alert(FINDING) == "trackio is not installed"


# ---- shipping the package to a job --------------------------------------------------------------------------------


def test_package_imports_nothing_outside_itself_but_numpy_and_the_stdlib() -> None:
    allowed = set(sys.stdlib_module_names) | {"numpy", "orjson", "pyarrow", "trackio"}  # the last 3 optional, lazy
    for path in PACKAGE_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_shipped_copy_runs_standalone(tmp_path: Path) -> None:
    target = ship(tmp_path)
    assert sorted(p.name for p in target.glob("*.py")) == sorted(n.split("/")[1] for n in package_files())
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import grpo_health as h; "
        "m = h.HealthMonitor(guard=True, guard_persist=1, budget=None); "
        "stops = [m.observe({'step': s, 'entropy': 4.0 if s < 5 else 0.0}).stop for s in range(1, 12)]; "
        "assert any(stops), stops; assert not any(k.startswith('grpo_dashboard') for k in sys.modules); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    ship(tmp_path)  # idempotent: replaces the earlier copy
    assert not list(tmp_path.glob(".grpo_health.tmp-*"))


# ---- spec, validation and the dashboard's record of a guard stop ------------------------------------------------


def test_health_spec_fields_round_trip_and_validate(tmp_path: Path) -> None:
    spec = RunSpec.from_file(SMOKE_SPEC)
    assert not spec.health.in_job
    spec.health.guard = True
    spec.health.webhook_url = "$SLACK_WEBHOOK"
    again = RunSpec.from_yaml(spec.to_yaml())
    assert again.health.guard and again.health.guard_persist == 3 and again.health.in_job
    report = validate(again, base_dir=SMOKE_SPEC.parent.parent)
    assert not [e for e in report.errors if e.field.startswith("health")]
    again.health.webhook_url = "ftp://nope"
    again.health.guard_persist = 0
    again.health.thresholds = {"truncation.wran": 0.4}
    paths = {e.field for e in validate(again, base_dir=SMOKE_SPEC.parent.parent).errors}
    assert {"health.webhook_url", "health.guard_persist", "health.thresholds"} <= paths


def test_guard_stop_event_becomes_the_run_error_and_the_run_completes(tmp_path: Path) -> None:
    store = Store()
    store.insert_run(
        Run(
            id="g1",
            name="g",
            spec_yaml="",
            backend="local",
            status=RunStatus.RUNNING.value,
            created_at=0.0,
            run_dir=str(tmp_path),
        )
    )
    lines = [
        {"v": 1, "type": "log", "split": "train", "step": 1, "time": 1.0, "metrics": {"entropy": 4.0}},
        {
            "v": 1,
            "type": "event",
            "event": "guard_stop",
            "time": 2.0,
            "step": 9,
            "rule": "entropy_collapse",
            "message": "entropy fell to 0.00.",
            "checkpoint": "/out/checkpoint-9",
        },
        {"v": 1, "type": "event", "event": "finished", "time": 3.0, "step": 9},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest_file(store, "g1", tmp_path / "metrics.jsonl")
    run = store.get_run("g1")
    assert run.status == RunStatus.COMPLETED.value
    assert run.error == (
        "stopped by the health guard at step 9: entropy_collapse: entropy fell to 0.00. Checkpoint: /out/checkpoint-9"
    )


def test_job_loads_the_shipped_rules_only_when_asked_and_says_when_they_are_missing(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
    import grpo_job

    assert grpo_job.load_health_package({"health": {"thresholds": {"x": 1}}}, tmp_path) is None
    with pytest.raises(FileNotFoundError, match="grpo_health is missing"):
        grpo_job.load_health_package({"health": {"guard": True}}, tmp_path)
    ship(tmp_path)
    module = grpo_job.load_health_package({"health": {"webhook_url": "$HOOK"}}, tmp_path)
    assert module.__name__ == "grpo_health" and Path(module.__file__).parent == tmp_path / "grpo_health"
    assert module.HealthMonitor(guard=True).guard


def _agree_worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
    import grpo_job

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        decisions = [grpo_job._rank0_decides(flag) for flag in ([True, False] if rank == 0 else [False, True])]
        (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(decisions))
    finally:
        dist.destroy_process_group()


def test_every_process_adopts_the_main_process_guard_decision(tmp_path: Path) -> None:
    """With several processes (gloo on CPU here) a guard stop must stop every rank at the same step."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_agree_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [[True, False], [True, False]]


def test_job_health_stops_alerts_a_webhook_from_the_environment_and_sums_up(
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRPO_TEST_HOOK", receiver.url)
    settings = {"guard": True, "guard_persist": 2, "webhook_url": "${GRPO_TEST_HOOK}"}
    wants = job_module().wants_job_health
    assert wants(settings) and not wants({"thresholds": {}}) and not wants(None)
    job = JobHealth(settings, run_name="r", report_to="none", budget=None)
    assert job.observe({"entropy": 4.0}, 1) is None  # before begin(): nothing is evaluated
    job.begin({"beta": 0.0})
    stop = None
    for rec in collapse_records(40, collapse_at=21):
        stop = job.observe(rec, rec["step"])
        if stop is not None:
            break
    job.close()
    assert stop is not None and stop.severity == "error"
    summary = job.summary(train_s=10.0)
    assert summary["alerts"] == summary["webhook_posts"] == len(receiver.posts) >= 2
    assert receiver.posts[-1]["json"]["event"] == "guard_stop" and summary["alert_failures"] == []


def test_job_health_without_the_webhook_variable_sends_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    job = JobHealth({"webhook_url": "$GRPO_UNSET_HOOK_VAR"}, budget=None)
    assert job.alerts and job.sender is not None and job.sender.webhook_url is None
    assert "GRPO_UNSET_HOOK_VAR is not set" in capsys.readouterr().err
    job.begin({})
    for rec in collapse_records(30, collapse_at=5):
        assert job.observe(rec, rec["step"]) is None  # alerts only: never a stop
    job.close()
    assert job.summary(1.0)["alerts"] >= 1 and job.summary(1.0)["webhook_posts"] == 0
