"""The training job's side of the health guard and alerts: one object the job's callback feeds its log records.

``JobHealth`` wraps ``HealthMonitor`` (budgeted evaluation, guard decision, alert dedupe) and ``AlertSender``
(webhook, trackio), reads the spec's ``health:`` settings, and keeps the figures of the job's ``health_summary``
event. Like the rest of this package it needs only numpy and the standard library, so the job (which imports nothing
from ``grpo_dashboard``) uses the shipped copy, ``grpo_health.JobHealth``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from .alerts import AlertSender
from .findings import Finding
from .monitor import DEFAULT_BUDGET, HealthMonitor


def resolve_webhook(url: str | None) -> str | None:
    """The webhook URL, reading ``$NAME`` / ``${NAME}`` from the environment; None when unset."""
    if not url or not url.startswith("$"):
        return url or None
    expanded = os.path.expandvars(url)
    if expanded.startswith("$"):
        sys.stderr.write(f"[grpo health] health.webhook_url {url} is not set in the job's environment: no webhook\n")
        return None
    return expanded


class JobHealth:
    """Feeds log records to the monitor, sends alerts for new warning/error findings, and says when to stop.

    Args:
        settings: the spec's ``health:`` mapping (``thresholds``, ``guard``, ``guard_persist``, ``webhook_url``,
            ``alerts``).
        run_name: shown in alerts.
        report_to: the run's ``report_to``; alerts are mirrored to trackio when it includes ``trackio`` (or ``all``).
        budget: the monitor's time budget (``HealthMonitor``; None evaluates every record).
    """

    def __init__(
        self,
        settings: Mapping[str, Any] | None,
        run_name: str | None = None,
        report_to: Any = None,
        budget: float | None = DEFAULT_BUDGET,
    ) -> None:
        self.settings = dict(settings or {})
        self.run_name = run_name
        self.guard = bool(self.settings.get("guard"))
        self.alerts = bool(self.settings.get("alerts") or self.settings.get("webhook_url"))
        reports = [report_to] if isinstance(report_to, str) else list(report_to or [])
        trackio = "trackio" in reports or "all" in reports
        url = resolve_webhook(self.settings.get("webhook_url"))
        self.sender = AlertSender(url, trackio=trackio, run_name=run_name) if self.alerts else None
        self.monitor: HealthMonitor | None = None
        self.stop: Finding | None = None
        self.alerts_raised = 0
        self.spent_s = 0.0
        self.budget = budget

    def begin(self, config: Mapping[str, Any]) -> None:
        """Start monitoring with the run's resolved GRPOConfig (plus ``reward_names``/``reward_weights``)."""
        self.monitor = HealthMonitor(
            config,
            self.settings.get("thresholds") or None,
            guard=self.guard,
            guard_persist=int(self.settings.get("guard_persist") or 3),
            alerts=self.alerts,
            budget=self.budget,
        )

    def observe(self, logs: Mapping[str, Any], step: int, last: bool = False) -> Finding | None:
        """Add one log record (evaluated at the latest on the ``last`` step); the finding to stop on, else None."""
        if self.monitor is None:
            return None
        t0 = time.perf_counter()
        update = self.monitor.observe(logs, step)
        if last and not update.evaluated:
            update = self.monitor.evaluate()
        for finding in update.alerts:
            self._send(finding)
        if update.stop is not None and self.stop is None and not last:  # nothing left to stop after the last step
            self.stop = update.stop
            self._send(update.stop, stopped=True)
        self.spent_s += time.perf_counter() - t0
        return self.stop

    def summary(self, train_s: float) -> dict[str, Any]:
        """The ``health_summary`` event's fields: evaluations, time spent and its share of training, alerts."""
        sender = self.sender
        return {
            "evaluations": self.monitor.evaluations if self.monitor else 0,
            "spent_s": round(self.spent_s, 4),
            "train_s": round(train_s, 3),
            "overhead": round(self.spent_s / train_s, 5) if train_s > 0 else None,
            "alerts": self.alerts_raised,
            "webhook_posts": len(sender.sent) if sender else 0,
            "alert_failures": sender.failures[-5:] if sender else [],
        }

    def close(self) -> None:
        """Deliver queued alerts (bounded wait) and stop the sender."""
        if self.sender is not None:
            self.sender.close()

    def _send(self, finding: Finding, stopped: bool = False) -> None:
        if self.sender is not None:
            self.sender.send(finding, stopped=stopped)
            self.alerts_raised += 1
