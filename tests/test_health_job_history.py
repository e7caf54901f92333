"""The job's guard and alerts use the findings history, the same record the live panel and `doctor` show: an alert is
sent once per finding with its first onset, again only when it gets worse, once more when it resolves, and what the
job alerted on is what the dashboard's panel holds for the same log (real Emitter -> metrics.jsonl -> ingestion ->
SQLite store -> panel; real webhook POSTs to a local HTTP server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from grpo_dashboard.health import HealthMonitor, JobHealth, MetricFrame, finding_history
from grpo_dashboard.health.history import HistoryReplay, cut_steps
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import overview

from .conftest import WebhookReceiver
from .store_helpers import new_run


def truncation_episode(n: int = 120) -> list[dict[str, Any]]:
    """A healthy log except that 90% of completions are cut at steps 20-45: truncation fires, then resolves."""
    rng = np.random.default_rng(0)
    out = []
    for s in range(1, n + 1):
        out.append(
            {
                "step": s,
                "reward": 0.2 + 0.004 * s + float(rng.normal(0, 0.02)),
                "completions/clipped_ratio": 0.9 if 20 <= s <= 45 else 0.02,
                "completions/mean_length": 100.0,
                "entropy": 2.0 - 0.005 * s,
                "grad_norm": 0.5,
            }
        )
    return out


def collapse(n: int = 40) -> list[dict[str, Any]]:
    """Entropy collapses at step 21 and every group scores the same from then on."""
    return [
        {
            "step": s,
            "entropy": 4.3 if s < 21 else 0.001,
            "reward": 0.1 + s / 1000,
            "frac_reward_zero_std": 0.0 if s < 21 else 1.0,
            "grad_norm": 0.5,
            "loss": 0.0,
        }
        for s in range(1, n + 1)
    ]


def rows(findings: list[Any]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in findings]


def test_the_replay_fed_record_by_record_is_finding_history_at_every_length() -> None:
    for records in (truncation_episode(), collapse()):
        replay = HistoryReplay()
        for n in range(1, len(records) + 1):
            live = replay.update(MetricFrame.from_records(records[:n]))
            if n <= 15 or n % 9 == 0 or n == len(records):
                assert rows(live) == rows(finding_history(records[:n])), n


def test_monitor_alerts_a_finding_once_with_its_first_onset_and_once_when_it_resolves() -> None:
    records = truncation_episode()
    monitor = HealthMonitor(alerts=True, budget=None)
    alerts = []
    for i, rec in enumerate(records):
        for f in monitor.observe(rec).alerts:
            alerts.append((i + 1, f))
    truncation = [(n, f) for n, f in alerts if f.rule == "truncation"]
    active = [(n, f) for n, f in truncation if f.status == "active"]
    resolved = [(n, f) for n, f in truncation if f.status == "resolved"]
    assert active and len(resolved) == 1, [(n, f.severity, f.status) for n, f in truncation]
    # Sent when first seen, again only on escalation; every one with the same first onset; never re-sent each tick.
    assert [f.severity for _, f in active] in (["warning"], ["error"], ["warning", "error"])
    assert len({f.step for _, f in truncation}) == 1 and 19 <= active[0][1].step <= 25
    # What each alert says is what the history said at that moment, and the resolution comes after the episode.
    for n, f in truncation:
        (then,) = [g for g in finding_history(records[:n]) if g.rule == "truncation"]
        assert (then.step, then.status, then.resolved_step) == (f.step, f.status, f.resolved_step)
    n_resolved, done = resolved[0]
    assert 45 < done.resolved_step == n_resolved <= 80 and done.message.startswith("Resolved at step")
    (final,) = [g for g in finding_history(records) if g.rule == "truncation"]
    later = [c for c in cut_steps(np.arange(1, len(records) + 1)) if c >= done.resolved_step]
    assert final.status == "resolved" and done.resolved_step <= final.resolved_step <= later[0]


def test_job_alerts_and_guard_match_the_live_panel_through_the_store(
    tmp_path: Path, receiver: WebhookReceiver
) -> None:
    """The job's two calls per log record (emit it to metrics.jsonl, feed it to JobHealth), then the dashboard's
    ingestion and panel on the same file: the job alerted on exactly the warnings and errors the panel records, with
    the same first onsets, and the guard stopped on one of them with its first onset."""
    emitter_cls = job_module().Emitter
    store = Store(tmp_path / "db.sqlite")
    for run_id, records, settings in (
        ("alerts", truncation_episode(), {"webhook_url": receiver.url}),
        ("guard", collapse(), {"webhook_url": receiver.url, "guard": True, "guard_persist": 3}),
    ):
        receiver.posts.clear()
        log = new_run(store, tmp_path, run_id)
        emitter = emitter_cls(log)
        job = JobHealth(settings, run_name=run_id, budget=None)
        job.begin({"beta": 0.0})
        stop = None
        for rec in records:
            step = rec["step"]
            metrics = {k: v for k, v in rec.items() if k != "step"}
            emitter.emit({"type": "log", "split": "train", "step": step, "time": 1000.0 + step, "metrics": metrics})
            stop = job.observe(metrics, step)
            if stop is not None:
                break
        job.close()
        emitter.close()
        ingest_file(store, run_id, log)
        panel = overview.findings(store, store.get_run(run_id))
        posted = [p["json"] for p in receiver.posts]
        assert posted and all(p["run"] == run_id for p in posted)
        alerted = {(p["finding"]["rule"], p["finding"]["metric"], p["finding"]["step"]) for p in posted}
        recorded = {
            (f.rule, f.metric, f.step)
            for f in panel
            if "warning" in (f.severity, f.evidence.get("peak_severity")) or f.severity == "error"
        }
        assert alerted == recorded, (alerted, recorded)
        resolved_posts = {p["finding"]["rule"] for p in posted if p["event"] == "resolved"}
        assert resolved_posts == {
            f.rule for f in panel if f.status == "resolved" and (f.rule, f.metric, f.step) in recorded
        }
        if run_id == "alerts":
            assert stop is None and "truncation" in resolved_posts
            (text,) = [p["text"] for p in posted if p["event"] == "resolved" and p["finding"]["rule"] == "truncation"]
            assert text.startswith("✅ GRPO run 'alerts': resolved ") and "truncation (from step " in text
        else:
            assert stop is not None and posted[-1]["event"] == "guard_stop"
            (same,) = [f for f in panel if f.rule == stop.rule and f.metric == stop.metric]
            assert stop.step == same.step and same.severity == "error"
