"""Training-health doctor for TRL GRPO runs: rules over logged metrics, log loaders and the ``doctor`` CLI.

Public API: ``diagnose`` (records -> findings now), ``finding_history`` (findings that hold still: first onset,
resolved-at), ``forecast_frame`` (reward ceiling, plateau, stop step, cost; module ``forecast``), ``Finding``,
``load_log_records`` (any supported log file -> records), ``doctor_main`` (the CLI), ``DEFAULT_THRESHOLDS`` (every
tunable default; see ``docs/health.md``), and for training jobs ``JobHealth`` over ``HealthMonitor`` (budgeted live
evaluation, guard decisions, alert dedupe) and ``AlertSender`` (webhook, trackio).
The package needs only numpy and the standard library: jobs import a shipped copy as ``grpo_health`` (``ship.py``).
"""

from .alerts import AlertSender
from .doctor_cli import doctor_main
from .findings import Finding
from .forecast import Forecast
from .forecast import forecast as forecast_frame
from .history import finding_history
from .job import JobHealth
from .loaders import load_completions, load_log_frame, load_log_records
from .monitor import HealthMonitor, MonitorUpdate
from .rules import RULES, RuleError, diagnose, worst_severity
from .series import MetricFrame
from .thresholds import DEFAULT_THRESHOLDS, RULE_IDS, THRESHOLDS, ThresholdError, resolve_thresholds

__all__ = [
    "ThresholdError",
    "AlertSender",
    "DEFAULT_THRESHOLDS",
    "Finding",
    "Forecast",
    "HealthMonitor",
    "JobHealth",
    "MetricFrame",
    "MonitorUpdate",
    "RULES",
    "RULE_IDS",
    "RuleError",
    "THRESHOLDS",
    "diagnose",
    "finding_history",
    "forecast_frame",
    "doctor_main",
    "load_completions",
    "load_log_frame",
    "load_log_records",
    "resolve_thresholds",
    "worst_severity",
]
