"""Findings that hold still: a finding that fired stays with its first onset, a resolved one says when, causes come
before symptoms, and the live panel (from the store) and `doctor` (from metrics.jsonl) report the same history."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from grpo_dashboard.health import diagnose, doctor_main, finding_history, load_log_frame
from grpo_dashboard.health.history import cut_steps
from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import overview

from .store_helpers import append_log, new_run


def collapse_metrics(step: int) -> dict[str, float]:
    """What the learning_rate=5e-2 run logged: entropy 4.46 -> 0.44 by step 5, then every group identical."""
    broken = step >= 5
    return {
        "entropy": 0.44 * 0.9 ** (step - 5) if broken else 4.46 - 0.8 * (step - 1),
        "reward": 0.0 if broken else 0.2 + 0.02 * step,
        "reward_std": 0.0 if broken else 0.3,
        "frac_reward_zero_std": 1.0 if broken else 0.1,
        "grad_norm": 0.0 if step >= 10 else 0.5,
        "loss": 0.0,
        "completions/mean_length": 12.0,
        "completions/clipped_ratio": 0.0,
    }


def records(n: int) -> list[dict]:
    return [{"step": s, **collapse_metrics(s)} for s in range(1, n + 1)]


def by_rule(findings: list) -> dict[str, object]:
    return {f.rule: f for f in findings}


def test_a_collapse_stays_with_its_first_onset_while_the_log_grows() -> None:
    onsets = []
    for n in (25, 40, 60, 100):
        found = by_rule(finding_history(records(n)))
        collapse = found["entropy_collapse"]
        onsets.append((collapse.step, found["zero_gradient"].step))
        assert collapse.severity == "error"
    assert len(set(onsets)) == 1, onsets  # no drift as the window slides
    collapse_step, zero_grad_step = onsets[0]
    assert collapse_step <= 6 and zero_grad_step == 10


def test_zero_variance_after_a_collapse_says_so_and_comes_after_its_cause() -> None:
    found = finding_history(records(60))
    names = [f.rule for f in found]
    assert names.index("entropy_collapse") < names.index("zero_variance")
    zv = by_rule(found)["zero_variance"]
    assert "follows the entropy collapse" in zv.message and "too easy" not in zv.message
    assert "converged" not in zv.message


def test_a_finding_that_stops_firing_is_shown_resolved_with_when() -> None:
    rng = np.random.default_rng(0)
    recs = []
    for s in range(1, 121):
        clipped = 0.9 if 20 <= s <= 45 else 0.02
        recs.append(
            {
                "step": s,
                "reward": 0.2 + 0.004 * s + rng.normal(0, 0.02),
                "completions/clipped_ratio": clipped,
                "completions/mean_length": 100.0,
                "entropy": 2.0 - 0.005 * s,
                "grad_norm": 0.5,
            }
        )
    assert "truncation" not in {f.rule for f in diagnose(recs)}  # the snapshot of the whole log has forgotten it
    (trunc,) = [f for f in finding_history(recs) if f.rule == "truncation"]
    assert trunc.status == "resolved" and 45 < trunc.resolved_step <= 80 and 19 <= trunc.step <= 25
    assert trunc.message.startswith(f"Resolved at step {trunc.resolved_step}.")
    assert trunc.to_dict()["status"] == "resolved"


def _clipping(levels: list[tuple[int, float]]) -> list[dict]:
    out, step = [], 0
    rng = np.random.default_rng(2)
    for logs, level in levels:
        for _ in range(logs):
            step += 1
            clip = level + rng.normal(0, 0.005)
            out.append({"step": step, "reward": 0.3 + 0.001 * step, "clip_ratio/region_mean": clip})
    return out


def test_a_return_inside_the_margin_does_not_resolve_and_one_past_it_does() -> None:
    config = {"num_iterations": 4}
    # Clipping at 0.35 (warning above 0.25), then 0.235 for 40 logs: under the threshold, inside its 15 % margin (and
    # under 5x the working level of 0.06, so the rise alone does not hold it).
    hover = _clipping([(20, 0.06), (15, 0.35), (40, 0.235)])
    shown = by_rule(finding_history(hover, config))["clip_high"]
    assert shown.status == "active" and shown.evidence["held"] and "Still shown" in shown.message
    assert [e["event"] for e in shown.evidence["events"]] == ["raised"]
    # Without the margin the same numbers resolve it.
    bare = by_rule(finding_history(hover, config, thresholds={"hysteresis.margin": 0}))["clip_high"]
    assert bare.status == "resolved"
    # A return past the margin resolves it, after the resolve dwell.
    back = by_rule(finding_history(_clipping([(20, 0.06), (15, 0.35), (40, 0.15)]), config))["clip_high"]
    assert back.status == "resolved" and 35 < back.resolved_step <= 45


def test_a_demotion_needs_the_return_past_the_margin_too() -> None:
    config = {"num_iterations": 4}
    # Clipping at 0.45 (error above 0.4), then 0.37: under the error threshold, inside its margin (0.34).
    hover = _clipping([(20, 0.02), (15, 0.45), (40, 0.37)])
    shown = by_rule(finding_history(hover, config))["clip_high"]
    assert shown.severity == "error" and shown.status == "active" and "Still shown at error" in shown.message
    bare = by_rule(finding_history(hover, config, thresholds={"hysteresis.margin": 0}))["clip_high"]
    assert bare.severity == "warning" and bare.evidence["events"][-1]["event"] == "demoted"
    past = by_rule(finding_history(_clipping([(20, 0.02), (15, 0.45), (40, 0.3)]), config))["clip_high"]
    assert past.severity == "warning" and past.evidence["peak_severity"] == "error"


def test_a_finding_whose_rule_now_rates_it_lower_says_what_the_record_still_shows() -> None:
    config = {"num_iterations": 4}
    # Clipping at 0.45 (error), then 0.3 for a few logs: past the margin, so a demotion to warning is pending. The
    # message is the latest evaluation's, so it says the record still shows error, and why.
    pending = by_rule(finding_history(_clipping([(20, 0.02), (15, 0.45), (5, 0.3)]), config))["clip_high"]
    assert pending.severity == "error" and pending.evidence["events"][-1]["event"] == "escalated"
    assert "(Still shown at error: its rule rates this warning on the latest records" in pending.message
    # Once the demotion has happened the note is gone.
    done = by_rule(finding_history(_clipping([(20, 0.02), (15, 0.45), (40, 0.3)]), config))["clip_high"]
    assert done.severity == "warning" and "Still shown" not in done.message


def test_the_pending_note_on_real_logs_is_on_active_findings_only() -> None:
    corpus = Path(__file__).parent / "fixtures" / "real_logs"
    # qhy991: the length doubled after the reward stalled, a warning; on the last cut the reward's late rise rates it
    # info, pending the demotion's dwell, and the message says so.
    (qhy991,) = corpus.glob("qhy991__*-checkpoint-600-trainer_state.jsonl")
    frame, hints = load_log_frame(qhy991)
    drift = by_rule(finding_history(frame, hints))["length_drift"]
    assert drift.severity == "warning" and "(Still shown at warning: its rule rates this info" in drift.message
    # Pranavpro23: a plateau note whose escalation was pending when its rule stopped firing resolves without the note.
    frame, hints = load_log_frame(corpus / "Pranavpro23__levelforge_env__training_logs-first109.jsonl")
    plateau = by_rule(finding_history(frame, hints))["plateau"]
    assert plateau.status == "resolved" and "Still shown" not in plateau.message


def test_the_margin_is_validated() -> None:
    with pytest.raises(ValueError, match=r"hysteresis.margin must be below 1.*got 1.0"):
        finding_history(records(10), thresholds={"hysteresis.margin": 1})


def test_the_cut_points_depend_only_on_the_log() -> None:
    steps = np.arange(1, 1001)
    cuts = cut_steps(steps)
    # Every step of the first 64, then 32 cuts per doubling: about 3 % of the log at most between two cuts.
    assert cuts[:64] == list(range(1, 65)) and 150 < len(cuts) < 250
    assert max(np.diff(cuts)[63:] / np.array(cuts[64:])) <= 1 / 16
    assert cut_steps(steps[:500]) == [c for c in cuts if c <= 500]  # a longer log only adds cuts
    assert cut_steps(steps[:500], finished=True)[-1] == 500  # a run the log restarted after: its last step too
    # Past 2,048 logs one cut per 1.5x more logs keeps a 100,000-step log's replay near three evaluations' cost.
    long = cut_steps(np.arange(1, 100_001))
    assert len(long) < 250 and long[: len(cut_steps(np.arange(1, 3001)))] == cut_steps(np.arange(1, 3001))
    assert len(set(long)) == len(long)


def test_store_keeps_the_earliest_onset(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    new_run(store, tmp_path, "r1")
    row = {
        "rule": "truncation",
        "severity": "warning",
        "step": 20,
        "metric": "completions/clipped_ratio",
        "message": "m",
        "remedy": "r",
        "evidence": {},
        "status": "active",
        "resolved_step": None,
    }
    store.save_findings("r1", [row])
    store.save_findings("r1", [{**row, "step": 31, "status": "resolved", "resolved_step": 50}])
    (saved,) = store.findings("r1")
    assert saved["step"] == 20 and saved["status"] == "resolved" and saved["resolved_step"] == 50
    assert store.findings("other") == []


def test_live_panel_and_doctor_agree_on_the_same_metrics_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "db.sqlite")
    log = new_run(store, tmp_path, "r1")
    append_log(log, range(1, 61), **{k: (lambda s, k=k: collapse_metrics(s)[k]) for k in collapse_metrics(1)})
    ingest_file(store, "r1", log)
    run = store.get_run("r1")
    live = [(f.rule, f.metric, f.severity, f.step, f.status) for f in overview.findings(store, run)]
    assert doctor_main([str(log), "--json", "--no-samples"]) == 1
    printed = json.loads(capsys.readouterr().out)
    cli = [(f["rule"], f["metric"], f["severity"], f["step"], f["status"]) for f in printed]
    assert live == cli and any(r[0] == "entropy_collapse" for r in live)
    # The panel's record is in the store, and a later (longer) log keeps the onsets it recorded.
    assert {f["rule"] for f in store.findings("r1")} == {r[0] for r in live}
    panel = overview.findings_markdown(store, run)
    assert panel.index("entropy_collapse") < panel.index("zero_variance")
