"""Live evaluation of the health rules inside a training job: the guard's stop decision and new-finding alerts.

``HealthMonitor`` is fed every log record as the trainer writes it and runs ``diagnose`` on the log so far, but only
as often as a time budget allows (by default 0.8% of the wall time since the first record), so a run never pays
more than about 1% of its training time for its health checks. It needs nothing beyond this package (numpy and the
standard library), so the job can import a shipped copy of it (see ``ship.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .findings import ERROR, SEVERITY_RANK, WARNING, Finding
from .rules import diagnose
from .thresholds import resolve_thresholds

# 0.8% for diagnose leaves room for the per-record bookkeeping and the final evaluation within 1% of training time.
DEFAULT_BUDGET = 0.008


@dataclass
class MonitorUpdate:
    """What one observed record changed: findings to alert on (new rule + severity pairs) and a stop decision."""

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
        alerts: when True, ``observe`` returns each warning/error finding whose (rule, severity) is new.
        budget: the most time spent in ``diagnose`` as a fraction of the wall time since the first record; None
            evaluates on every record.
        clock: the time source (``time.perf_counter``; tests pass a fake).
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
        self.findings: list[Finding] = []
        self.evaluations = 0
        self.spent_s = 0.0
        self._started: float | None = None
        self._alerted: set[tuple[str, str]] = set()
        self._error_since: dict[str, int] = {}  # rule -> number of records when it was first seen as an error
        self._last_cost = 0.0

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
        if not (self._affordable(now) or self._persistence_due()):
            return MonitorUpdate()
        return self.evaluate()

    def evaluate(self) -> MonitorUpdate:
        """Run the rules on every record so far, whatever the budget (also used once at the end of training)."""
        update = MonitorUpdate(evaluated=True)
        if not self.records:
            return update
        t0 = self.clock()
        self.findings = diagnose(self.records, self.config, self.thresholds)
        self._last_cost = self.clock() - t0
        self.spent_s += self._last_cost
        self.evaluations += 1
        n = len(self.records)
        errors = {f.rule: f for f in self.findings if f.severity == ERROR}
        self._error_since = {rule: self._error_since.get(rule, n) for rule in errors}
        if self.alerts:
            for f in sorted(self.findings, key=lambda f: (f.step, -SEVERITY_RANK[f.severity])):
                key = (f.rule, f.severity)
                if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[WARNING] and key not in self._alerted:
                    self._alerted.add(key)
                    update.alerts.append(f)
        if self.guard:
            due = [errors[r] for r, since in self._error_since.items() if n - since + 1 >= self.guard_persist]
            if due:
                update.stop = min(due, key=lambda f: f.step)
        return update

    def _affordable(self, now: float) -> bool:
        assert self._started is not None
        if self.budget is None:
            return True
        return self.spent_s + self._last_cost <= self.budget * (now - self._started)

    def _persistence_due(self) -> bool:
        """A pending error whose persistence window has just elapsed is checked at once, budget or not."""
        n = len(self.records)
        return self.guard and any(n - since + 1 == self.guard_persist for since in self._error_since.values())
