"""Live evaluation of the health rules inside a training job: the guard's stop decision and alerts.

``HealthMonitor`` is fed every log record as the trainer writes it and keeps the run's findings history on the log so
far (``history.HistoryReplay``: the same record, first onsets and resolutions that the dashboard's live panel and
``doctor`` show for that log), but only as often as a time budget allows (by default 0.8% of the wall time since the
first record), so a run never pays more than about 1% of its training time for its health checks. It needs nothing
beyond this package (numpy and the standard library), so the job can import a shipped copy of it (see ``ship.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .findings import ERROR, SEVERITY_RANK, WARNING, Finding, is_rule_failure
from .history import DENSE_CUTS, HistoryReplay, Key, finding_key
from .rules import Rule
from .series import MetricFrame
from .thresholds import resolve_thresholds

# 0.8% for diagnose leaves room for the per-record bookkeeping and the final evaluation within 1% of training time.
DEFAULT_BUDGET = 0.008


@dataclass
class MonitorUpdate:
    """What one observed record changed: findings to alert on and a stop decision.

    ``alerts`` holds each warning/error finding that is new in the run's record or worse than when it was last
    alerted on (``status == "active"``), and each alerted one that has since resolved (``status == "resolved"``,
    with ``resolved_step``); ``step`` is always the finding's first onset.
    """

    evaluated: bool = False
    alerts: list[Finding] = field(default_factory=list)
    stop: Finding | None = None


class HealthMonitor:
    """Evaluates the rules on a growing log under a time budget; decides guard stops and deduplicates alerts.

    Args:
        config: GRPOConfig fields of the run (plus ``reward_names``), as for ``diagnose``.
        thresholds: per-run threshold overrides (validated here, so a bad key fails before training starts).
        guard: when True, ``observe`` returns a stop decision once an error-level finding has been seen on
            ``guard_persist`` consecutive logged records (every evaluation in between showing it as an error).
        guard_persist: logged records an error must persist before the guard stops the run (>= 1).
        alerts: when True, ``observe`` returns the alerts of ``MonitorUpdate``: a (rule, metric) once when it enters
            the record at warning or error, again only if it gets worse (warning -> error) or fires again after it
            resolved, and once when it resolves.
        budget: the most time spent evaluating the rules as a fraction of the wall time since the first record; None
            evaluates on every record.
        clock: the time source (``time.perf_counter``; tests pass a fake).
        rules: the rules to run by id, as for ``diagnose`` (default: all of them).

    A rule that crashes is a "rule failed" warning (``findings.rule_failure``): alerted on like any warning, never a
    reason for the guard to stop the run.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        thresholds: Mapping[str, Any] | None = None,
        guard: bool = False,
        guard_persist: int = 3,
        alerts: bool = False,
        budget: float | None = DEFAULT_BUDGET,
        clock: Callable[[], float] = time.perf_counter,
        rules: Mapping[str, Rule] | None = None,
    ) -> None:
        if int(guard_persist) < 1:
            raise ValueError(f"guard_persist must be a whole number >= 1, got {guard_persist!r}")
        if budget is not None and not 0 < budget <= 1:
            raise ValueError(f"budget must be a fraction of the wall time in (0, 1], got {budget!r}")
        self.config = dict(config or {})
        self.thresholds = resolve_thresholds(thresholds)
        self.guard, self.guard_persist, self.alerts = guard, int(guard_persist), alerts
        self.budget, self.clock = budget, clock
        self.records: list[dict[str, Any]] = []
        self.findings: list[Finding] = []  # the run's findings history: active and resolved
        self.history = HistoryReplay(self.config, self.thresholds, rules=rules)
        self._steps: list[int] = []  # distinct steps in the order they were first logged
        self.evaluations = 0
        self.spent_s = 0.0  # all of it: evaluations and the replays of fixed cut points
        self.replay_s = 0.0
        self._started: float | None = None
        self._alerted: dict[Key, Finding] = {}  # (rule, metric, rule failed) -> what was last alerted
        self._error_since: dict[str, int] = {}  # rule -> number of records when it was first seen as an error
        self._last_cost = 0.0
        self._t_eval = 0.0

    @property
    def overhead(self) -> float:
        """Time spent evaluating as a fraction of the wall time since the first record (0 before any)."""
        if self._started is None:
            return 0.0
        return self.spent_s / max(self.clock() - self._started, 1e-9)

    def observe(self, record: Mapping[str, Any], step: int | None = None) -> MonitorUpdate:
        """Add one log record (TRL's dict, eval keys with ``eval_``) and evaluate if the budget allows it."""
        now = self.clock()
        if self._started is None:
            self._started = now
        rec = dict(record)
        if step is not None:
            rec["step"] = int(step)
        self.records.append(rec)
        owed = self._passed_dense_cut(rec)
        if self._affordable(now) or self._persistence_due():
            return self.evaluate(budgeted=True)
        if owed:
            # A run's first cuts are owed whatever the budget (short prefixes, cheap): the record, and so alerts and
            # the guard, keep up with the first records of a fast run whose budget affords no evaluation for long.
            t0 = self.clock()
            self.history.advance(MetricFrame.from_records(self.records), budget_ok=lambda: False)
            cost = self.clock() - t0
            self.spent_s += cost
            self.replay_s += cost
            return self._decide(self.history.findings(), MonitorUpdate())
        return MonitorUpdate()

    def evaluate(self, budgeted: bool = False) -> MonitorUpdate:
        """Bring the findings history up to every record so far, whatever the budget (also used once at the end of
        training); ``budgeted``: the cuts past a run's first ones only while the budget allows (the rest later)."""
        update = MonitorUpdate(evaluated=True)
        if not self.records:
            return update
        t0 = self._t_eval = self.clock()
        frame = MetricFrame.from_records(self.records)
        findings = self.history.update(frame, budget_ok=self._within_budget if budgeted else None)
        self._last_cost = self.clock() - t0
        self.spent_s += self._last_cost
        self.evaluations += 1
        return self._decide(findings, update)

    @property
    def replays(self) -> int:
        """Cut points replayed so far (see ``history.cut_points``)."""
        return self.history.cuts

    def _within_budget(self) -> bool:
        assert self._started is not None
        return self.budget is None or self.spent_s + (self.clock() - self._t_eval) <= self.budget * (
            self.clock() - self._started
        )

    def _decide(self, findings: list[Finding], update: MonitorUpdate) -> MonitorUpdate:
        """Alerts and the guard's decision on the run's record ``findings`` (the record as of the last evaluation or
        the last replayed cut)."""
        self.findings = findings
        n = len(self.records)
        active = [f for f in self.findings if f.status == "active"]
        errors = {f.rule: f for f in active if f.severity == ERROR and not is_rule_failure(f)}
        self._error_since = {rule: self._error_since.get(rule, n) for rule in errors}
        if self.alerts:
            update.alerts = self._alerts()
        if self.guard:
            due = [errors[r] for r, since in self._error_since.items() if n - since + 1 >= self.guard_persist]
            if due:
                update.stop = min(due, key=lambda f: f.step)
        return update

    def _alerts(self) -> list[Finding]:
        """Transitions of the record since the last evaluation that are worth a message (see ``MonitorUpdate``)."""
        out = []
        now = {finding_key(f): f for f in self.findings}
        last_step = max((int(r["step"]) for r in self.records if "step" in r), default=len(self.records))
        for key, f in now.items():
            before = self._alerted.get(key)
            if f.status == "active" and SEVERITY_RANK[f.severity] >= SEVERITY_RANK[WARNING]:
                worse = before is not None and SEVERITY_RANK[f.severity] > SEVERITY_RANK[before.severity]
                if before is None or before.status == "resolved" or worse:
                    self._alerted[key] = f
                    out.append(f)
            elif f.status == "resolved" and before is not None and before.status == "active":
                self._alerted[key] = f
                out.append(f)
        for key, before in list(self._alerted.items()):
            if key not in now and before.status == "active":
                # Dropped from the record (it fired at one evaluation only): tell the receiver it no longer holds.
                gone = replace(
                    before,
                    status="resolved",
                    resolved_step=last_step,
                    message=f"Resolved at step {last_step}. " + before.message,
                )
                self._alerted[key] = gone
                out.append(gone)
        return sorted(out, key=lambda f: (f.status != "active", f.step, -SEVERITY_RANK[f.severity]))

    def _passed_dense_cut(self, rec: Mapping[str, Any]) -> bool:
        """Whether this record starts a new step just after one of a run's first ``DENSE_CUTS`` logged steps (or
        restarts the steps: a new run appended, the finished one gets its last cut), i.e. a cut owed now."""
        if rec.get("step") is None:
            return False
        step = int(rec["step"])
        restart = bool(self._steps) and step <= self._steps[0] < self._steps[-1]
        if restart:
            self._steps = []
        elif self._steps and step <= self._steps[-1]:
            return False
        self._steps.append(step)
        return restart or 2 <= len(self._steps) <= DENSE_CUTS + 1

    def _affordable(self, now: float) -> bool:
        assert self._started is not None
        if self.budget is None:
            return True
        # The replays are owed whatever the budget (they make the record), but count against it: evaluations wait.
        return self.spent_s + self._last_cost <= self.budget * (now - self._started)

    def _persistence_due(self) -> bool:
        """A pending error whose persistence window has just elapsed is checked at once, budget or not."""
        n = len(self.records)
        return self.guard and any(n - since + 1 == self.guard_persist for since in self._error_since.values())
