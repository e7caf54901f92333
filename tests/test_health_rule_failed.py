"""A health rule that crashes: strict in tests, a "rule failed" finding for users, never a healthy badge or a stop."""

from __future__ import annotations

import io
from typing import Any

import pytest

from grpo_dashboard.health import RULES, HealthMonitor, RuleError, diagnose, finding_history, worst_severity
from grpo_dashboard.health.alerts import alert_text
from grpo_dashboard.health.doctor_cli import render_report
from grpo_dashboard.health.findings import Context, Finding, is_rule_failure, make_finding
from grpo_dashboard.health.rules import STRICT_ENV
from grpo_dashboard.health.series import MetricFrame
from grpo_dashboard.views.overview import badge_text

from .test_health_guard import collapse_records
from .test_health_rules import healthy


def broken(ctx: Context) -> list[Finding]:
    """A rule with an off-by-one bug that every log with an entropy column triggers."""
    series = ctx.frame.get("entropy")
    return [] if series is None else [series.values[len(series)]]


def with_broken(rule_id: str) -> dict[str, Any]:
    """The real rules table with one rule replaced by the broken one."""
    return {**RULES, rule_id: broken}


@pytest.fixture
def users_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user runs with: no strict switch in the environment (the suite sets it in conftest.py)."""
    monkeypatch.delenv(STRICT_ENV, raising=False)


def test_strict_diagnose_reraises_naming_the_rule() -> None:
    with pytest.raises(RuleError, match=r"health rule entropy_collapse failed: IndexError: index 100 is out of"):
        diagnose(healthy(), rules=with_broken("entropy_collapse"), strict=True)


def test_the_suite_runs_strict_by_default_and_users_do_not(
    users_default: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = diagnose(healthy(), rules=with_broken("entropy_collapse"))
    assert [f.rule for f in found if is_rule_failure(f)] == ["entropy_collapse"]
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(RuleError):
        diagnose(healthy(), rules=with_broken("entropy_collapse"))


def test_a_crashed_rule_is_a_warning_finding_and_never_a_healthy_badge() -> None:
    found = diagnose(healthy(), rules=with_broken("entropy_collapse"), strict=False)
    assert [f.rule for f in found] == ["entropy_collapse"]  # the healthy log's other rules find nothing
    failure = found[0]
    assert failure.severity == "warning" and failure.step == 100 and failure.metric is None
    assert failure.message == (
        "rule entropy_collapse failed: IndexError: index 100 is out of bounds for axis 0 with size 100 — the doctor "
        "could not check this; report it"
    )
    assert failure.to_dict()["evidence"] == {"rule_failed": "IndexError"}
    assert worst_severity(found) == "warning"
    assert badge_text(found) == "⚠ 1 rule failed"
    assert badge_text([]) == "● ok"


def test_the_other_rules_still_run_and_the_badge_shows_both() -> None:
    found = diagnose(collapse_records(40, collapse_at=21), {"beta": 0.0}, rules=with_broken("kl_high"), strict=False)
    assert "kl_high" in {f.rule for f in found if is_rule_failure(f)}
    errors = [f for f in found if f.severity == "error"]
    assert errors and not any(map(is_rule_failure, errors))
    assert badge_text(found) == f"✖ {len(errors)} error{'s' if len(errors) != 1 else ''} · ⚠ 1 rule failed"


def test_the_doctor_report_lists_the_failed_rule(users_default: None) -> None:
    records = healthy()
    found = finding_history(records, rules=with_broken("entropy_collapse"))
    assert [(f.rule, f.status) for f in found] == [("entropy_collapse", "active")]
    out = io.StringIO()
    render_report("metrics.jsonl", MetricFrame.from_records(records), {}, found, out)
    report = out.getvalue()
    assert "RULE FAILED entropy_collapse" in report
    assert "the doctor could not check this; report it" in report.replace("\n  ", " ")
    assert report.rstrip().endswith("1 finding: 1 rule failed.")


def test_the_guard_never_stops_on_a_crashed_rule_and_alerts_once(users_default: None) -> None:
    rules = with_broken("entropy_collapse")
    monitor = HealthMonitor(guard=True, guard_persist=1, alerts=True, budget=None, rules=rules)
    alerts = []
    for record in healthy(40):
        update = monitor.observe(record)
        assert update.stop is None
        alerts += update.alerts
    assert len(alerts) == 1 and is_rule_failure(alerts[0])
    assert "rule failed entropy_collapse (since step 1)" in alert_text(alerts[0], "r1")


def test_the_guard_still_stops_on_a_real_error_while_another_rule_is_broken(users_default: None) -> None:
    monitor = HealthMonitor({"beta": 0.0}, guard=True, guard_persist=3, budget=None, rules=with_broken("kl_high"))
    stop = next(u.stop for r in collapse_records(40, collapse_at=21) if (u := monitor.observe(r)).stop is not None)
    assert stop.severity == "error" and stop.rule in {"entropy_collapse", "zero_variance"}


def test_what_a_rule_found_before_it_crashed_stays_in_the_record_unresolved(users_default: None) -> None:
    def flaky(ctx: Context) -> list[Finding]:
        if ctx.frame.n_records < 15:
            return [make_finding("flaky", "error", 1, "bad from the start", "fix it", "entropy")]
        raise RuntimeError("broke on a longer log")

    found = finding_history(healthy(30), rules={"flaky": flaky})
    assert [(f.rule, f.severity, f.status, is_rule_failure(f)) for f in found] == [
        ("flaky", "error", "active", False),  # not checked since: not claimed resolved
        ("flaky", "warning", "active", True),
    ]
