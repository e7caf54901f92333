"""Training-health doctor for TRL GRPO runs: rules over logged metrics, log loaders and the ``doctor`` CLI.

Public API: ``diagnose`` (records -> findings), ``Finding``, ``load_log_records`` (any supported log file ->
records), ``doctor_main`` (the CLI) and ``DEFAULT_THRESHOLDS`` (every tunable default; see ``docs/health.md``).
"""

from .doctor_cli import doctor_main
from .findings import Finding
from .loaders import load_completions, load_log_frame, load_log_records
from .rules import RULES, diagnose, worst_severity
from .series import MetricFrame
from .thresholds import DEFAULT_THRESHOLDS, RULE_IDS, THRESHOLDS, resolve_thresholds

__all__ = [
    "DEFAULT_THRESHOLDS",
    "Finding",
    "MetricFrame",
    "RULES",
    "RULE_IDS",
    "THRESHOLDS",
    "diagnose",
    "doctor_main",
    "load_completions",
    "load_log_frame",
    "load_log_records",
    "resolve_thresholds",
    "worst_severity",
]
