"""The rule registry and ``diagnose``: run every enabled rule over a run's metrics and order the findings."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from . import (
    checks_agents,
    checks_drop,
    checks_kl,
    checks_length,
    checks_optimizer,
    checks_plateau,
    checks_policy,
    checks_reward,
    checks_signal,
    checks_truncation,
)
from .findings import SEVERITY_RANK, Context, Finding, RunConfig, order_key, rule_failure
from .series import MetricFrame
from .thresholds import RULE_IDS, resolve_thresholds

log = logging.getLogger(__name__)

Rule = Callable[[Context], list[Finding]]

RULES: dict[str, Rule] = {
    "nan": checks_optimizer.check_nan,
    "zero_variance": checks_signal.check_zero_variance,
    "flat_reward": checks_signal.check_flat_reward,
    "entropy_collapse": checks_policy.check_entropy_collapse,
    "entropy_blowup": checks_policy.check_entropy_blowup,
    "truncation": checks_truncation.check_truncation,
    "length_collapse": checks_length.check_length_collapse,
    "length_drift": checks_length.check_length_drift,
    "format_hacking": checks_reward.check_format_hacking,
    "reward_drop": checks_drop.check_reward_drop,
    "reward_length_corr": checks_reward.check_reward_length_corr,
    "kl_spike": checks_kl.check_kl_spike,
    "kl_high": checks_kl.check_kl_high,
    "kl_outpaces_reward": checks_kl.check_kl_outpaces_reward,
    "clip_high": checks_optimizer.check_clip_high,
    "grad_spike": checks_optimizer.check_grad_spike,
    "zero_gradient": checks_optimizer.check_zero_gradient,
    "overfitting": checks_reward.check_overfitting,
    "plateau": checks_plateau.check_plateau,
    "forecast_stop": checks_reward.check_forecast_stop,
    "duplicate_completions": checks_signal.check_duplicate_completions,
    "tool_failures": checks_agents.check_tool_failures,
    "tool_use_collapse": checks_agents.check_tool_use_collapse,
    "turn_limit": checks_agents.check_turn_limit,
    "malformed_tool_calls": checks_agents.check_malformed_tool_calls,
    "task_regression": checks_agents.check_task_regression,
    "async_staleness": checks_agents.check_async_staleness,
}
assert tuple(RULES) == RULE_IDS

# Set (to anything but "" or "0") by the test suite, and inherited by the apps and jobs it starts: a rule that
# raises fails the caller instead of becoming a "rule failed" finding.
STRICT_ENV = "GRPO_DASHBOARD_STRICT_HEALTH"


class RuleError(RuntimeError):
    """A health rule raised while ``diagnose`` ran strict; the rule's own exception is the ``__cause__``."""

    def __init__(self, rule_id: str, exc: BaseException) -> None:
        super().__init__(f"health rule {rule_id} failed: {type(exc).__name__}: {exc}")
        self.rule = rule_id


def strict_default() -> bool:
    """Whether ``diagnose`` re-raises a rule's exception when its caller does not say (``$STRICT_ENV``)."""
    return os.environ.get(STRICT_ENV, "").strip() not in ("", "0")


def diagnose(
    records: Sequence[Mapping[str, Any]] | MetricFrame,
    config: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, Any] | None = None,
    completions: list[dict[str, Any]] | None = None,
    rules: Mapping[str, Rule] | None = None,
    strict: bool | None = None,
) -> list[Finding]:
    """Run every enabled health rule over a run's log and return the findings, worst first, then by onset.

    Args:
        records: flat TRL log dicts in log order (each with a ``step``; keys as TRL logged them, eval ones with the
            ``eval_`` prefix; values may be None/NaN/Inf and keys sparse), or an already built ``MetricFrame``.
        config: GRPOConfig fields known for the run (``beta``, ``num_iterations``, ``use_vllm``,
            ``max_completion_length``, ``learning_rate``, ``reward_names``...); missing ones are inferred from the log.
        thresholds: overrides of ``DEFAULT_THRESHOLDS`` (flat ``"rule.param"`` keys or nested per rule).
        completions: optional sample rows ``{"step", "prompt", "completion", ...}`` for ``duplicate_completions``.
        rules: the rules to run by id (default ``RULES``); an id without an ``enabled`` threshold always runs.
        strict: re-raise a rule's exception (as ``RuleError``) instead of reporting it as a "rule failed" finding
            (``rule_failure``: a warning with the rule's id); None reads ``$GRPO_DASHBOARD_STRICT_HEALTH``.

    Raises:
        ValueError: an unknown threshold key or a malformed threshold value.
        RuleError: a rule raised and ``strict`` is on.
    """
    frame = records if isinstance(records, MetricFrame) else MetricFrame.from_records(records)
    ctx = Context(frame, RunConfig(config), resolve_thresholds(thresholds), completions)
    strict = strict_default() if strict is None else strict
    findings: list[Finding] = []
    # Logged values may be huge or infinite; the rules handle them, numpy need not warn about them.
    with np.errstate(all="ignore"):
        for rule_id, rule in (RULES if rules is None else rules).items():
            if not ctx.thresholds.get(f"{rule_id}.enabled", True):
                continue
            try:
                findings.extend(rule(ctx))
            except Exception as exc:  # one broken rule must not take the dashboard or a training job down with it
                if strict:
                    raise RuleError(rule_id, exc) from exc
                log.exception("health rule %s failed", rule_id)
                findings.append(rule_failure(rule_id, exc, frame.last_step() or 0))
    if frame.earlier:
        findings = segment_findings(frame, findings, config, thresholds, rules, strict)
    order = {rule_id: i for i, rule_id in enumerate(RULE_IDS)}
    # Causes before symptoms: the worst first, then the earliest onset (a collapse before the zero spread it causes).
    findings.sort(key=lambda f: order_key(f, order))
    return findings


def segment_label(frame: MetricFrame, index: int) -> str:
    """How a report names run ``index`` (0-based) of a log that holds several (the steps restart after each)."""
    seg = frame.segments[index]
    first, last = seg.first_step(), seg.last_step()
    return f"run {index + 1} of {len(frame.segments)} in this log (steps {first}-{last})"


def segment_findings(
    frame: MetricFrame,
    current: list[Finding],
    config: Mapping[str, Any] | None,
    thresholds: Mapping[str, Any] | None,
    rules: Mapping[str, Rule] | None,
    strict: bool | None,
) -> list[Finding]:
    """The findings of every run of a log whose steps restart (runs appended to one file), each run diagnosed on its
    own and its findings marked with its ``segment`` (1-based) and named in the message; ``current`` are the last
    run's."""
    out: list[Finding] = []
    for i, seg in enumerate(frame.earlier):
        for f in diagnose(seg, config, thresholds, rules=rules, strict=strict):
            out.append(in_segment(f, frame, i, EARLIER_RUN))
    for f in current:
        out.append(in_segment(f, frame, len(frame.earlier), LATEST_RUN))
    return out


EARLIER_RUN, LATEST_RUN = "an earlier run: the steps restart after it", "the latest run"
_SEGMENT_PREFIX = re.compile(
    rf"^In run \d+ of \d+ in this log \(steps [^)]*\), (?:{re.escape(LATEST_RUN)}|{re.escape(EARLIER_RUN)}): "
)


def in_segment(f: Finding, frame: MetricFrame, index: int, what: str) -> Finding:
    """``f`` (of run ``index``, 0-based) marked with its segment and named in its message (a name given while the
    log held fewer runs is replaced)."""
    f.evidence = {**f.evidence, "segment": index + 1}
    f.message = f"In {segment_label(frame, index)}, {what}: {_SEGMENT_PREFIX.sub('', f.message, count=1)}"
    return f


def worst_severity(findings: Sequence[Finding]) -> str | None:
    """The highest severity among ``findings`` (``"error"`` > ``"warning"`` > ``"info"``), or None."""
    if not findings:
        return None
    return max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__)
