"""Every default threshold of the health rules, in one place, with its meaning and provenance.

Keys are ``"<rule>.<parameter>"`` (plus a few shared ``baseline.*`` / ``smooth.*`` keys). A run spec may override any
of them (``health: {thresholds: {...}}``), and so may ``doctor --threshold KEY=VALUE``. Every rule also has a
``"<rule>.enabled"`` switch. Windows and persistence counts are in *logged records* of the metric, not optimizer steps.

Provenance tags: [PTT] microsoft/post-training-toolkit defaults, [DAPO] / [Cui] / [Gao] the papers cited in
``docs/health.md``, [TRL] maintainer statements in TRL issues, [derived] our own choice, calibrated on synthetic
and real tiny-model runs (see ``tests/test_health_rules.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

RULE_IDS: tuple[str, ...] = (
    "nan",
    "zero_variance",
    "flat_reward",
    "entropy_collapse",
    "entropy_blowup",
    "truncation",
    "length_collapse",
    "length_drift",
    "format_hacking",
    "reward_drop",
    "reward_length_corr",
    "kl_spike",
    "kl_high",
    "kl_outpaces_reward",
    "clip_high",
    "grad_spike",
    "zero_gradient",
    "overfitting",
    "plateau",
    "forecast_stop",
    "duplicate_completions",
    "tool_failures",
    "tool_use_collapse",
    "turn_limit",
    "malformed_tool_calls",
    "task_regression",
    "async_staleness",
)


class ThresholdError(ValueError):
    """A health threshold override the doctor cannot use (unknown name, wrong type or range)."""


@dataclass(frozen=True)
class Threshold:
    """One tunable number: its key, default, meaning and where the default comes from."""

    key: str
    default: float | int | bool
    help: str
    source: str = "derived"


THRESHOLDS: tuple[Threshold, ...] = (
    # Shared
    Threshold("baseline.window", 20, "max number of first logged points that form a metric's warm-up baseline", "PTT"),
    Threshold(
        "baseline.fraction", 0.25, "the baseline never uses more than this fraction of the points logged so far"
    ),
    Threshold("smooth.window", 5, "trailing-mean window used by the noisy state rules (never centred)"),
    Threshold(
        "hysteresis.margin",
        0.15,
        "a shown finding is not resolved while its rule still fires with its HELD thresholds moved this share toward "
        "healthy (0 = no margin)",
    ),
    # nan
    Threshold(
        "nan.min_count", 1, "non-finite/None values of loss, grad_norm, entropy, kl, reward before firing", "W&B"
    ),
    # zero_variance
    Threshold("zero_variance.warn", 0.5, "frac_reward_zero_std above this (smoothed) is a warning", "DAPO"),
    Threshold("zero_variance.warn_persist", 10, "logs the warning condition must hold", "PTT"),
    Threshold("zero_variance.error", 0.9, "frac_reward_zero_std above this (smoothed) is an error", "TRL"),
    Threshold("zero_variance.error_persist", 5, "logs the error condition must hold"),
    Threshold("zero_variance.extreme", 0.99, "raw value treated as unmistakable (fires on short logs)"),
    Threshold("zero_variance.saturated", 0.8, "reward above this fraction of its range: groups saturated"),
    Threshold("zero_variance.starved", 0.2, "reward below this fraction of its range: groups starved"),
    Threshold(
        "zero_variance.short_share",
        0.75,
        "log shorter than warn_persist: share of logs with most groups spread-less (one of the latest two) that fires",
    ),
    # flat_reward
    Threshold(
        "flat_reward.std_atol", 1e-8, "rewards/<f>/std at or below this counts as constant (TRL's isclose)", "TRL"
    ),
    Threshold("flat_reward.persist", 10, "logs a reward function must stay constant", "PTT"),
    Threshold("flat_reward.min_points", 3, "fewest logs that may show a reward as constant (short-log path)"),
    # entropy_collapse
    Threshold("entropy_collapse.warn_ratio", 0.3, "smoothed entropy below this fraction of its baseline: warning"),
    Threshold("entropy_collapse.error_ratio", 0.1, "entropy below this fraction of its baseline: error", "Cui"),
    Threshold(
        "entropy_collapse.abs_floor", 0.1, "nats; below this (after a halving) the policy is deterministic", "PTT"
    ),
    Threshold("entropy_collapse.rising_t", 3.0, "low from the first log: no warning while its fitted rise has this t"),
    Threshold("entropy_collapse.persist", 3, "logs the condition must hold (fewer on very short logs when extreme)"),
    # entropy_blowup
    Threshold("entropy_blowup.ratio", 2.0, "smoothed entropy above this multiple of its baseline", "DAPO"),
    Threshold("entropy_blowup.min_increase", 0.5, "nats; the rise must also be at least this large"),
    Threshold("entropy_blowup.persist", 5, "logs the condition must hold"),
    Threshold("entropy_blowup.error_clipped", 0.3, "escalate to error when clipped_ratio is also above this", "PTT"),
    # truncation
    Threshold("truncation.warn", 0.3, "smoothed completions/clipped_ratio above this: warning", "PTT"),
    Threshold("truncation.error", 0.5, "smoothed completions/clipped_ratio above this: error", "TRL"),
    Threshold("truncation.extreme", 0.99, "clipped_ratio of every completion: an error at once, even on short logs"),
    Threshold("truncation.persist", 5, "logs the condition must hold"),
    Threshold("truncation.nearly_all", 0.95, "short log: the latest 2+ logs at or above this clipped_ratio: error"),
    Threshold("truncation.cap_fraction", 0.98, "old logs: mean length at or above this fraction of the cap = pinned"),
    Threshold(
        "truncation.note", 0.1, "mean clipped_ratio over the note window at or above this: steady truncation info"
    ),
    Threshold("truncation.note_logs", 0.5, "... and at least this share of those logs cut that share or more"),
    Threshold("truncation.note_window", 20, "trailing logs over which steady partial truncation is measured"),
    Threshold(
        "truncation.pinned_logs",
        3,
        "old logs: fewest batches with the mean length exactly at the cap (all cut) in the note window for a note",
    ),
    # length_collapse
    Threshold("length_collapse.ratio", 0.5, "smoothed mean length below this fraction of its baseline", "PTT"),
    Threshold("length_collapse.extreme_ratio", 0.2, "raw mean length below this fraction: unmistakable"),
    Threshold("length_collapse.persist", 3, "logs the condition must hold"),
    Threshold("length_collapse.empty_tokens", 2.0, "mean length at or below this many tokens is an error"),
    Threshold("length_collapse.few_tokens", 5.0, "thin baseline: fires only at or below this many tokens"),
    Threshold("length_collapse.thin_baseline_ratio", 0.1, "... or below this fraction of the baseline"),
    Threshold(
        "length_collapse.baseline_groups",
        8,
        "fewest prompt groups (logs x groups per log) a baseline needs before a fall that is not unmistakable counts",
    ),
    # length_drift
    Threshold("length_drift.ratio", 0.3, "|smoothed mean length / baseline - 1| above this", "PTT"),
    Threshold("length_drift.persist", 10, "logs the drift must hold"),
    Threshold("length_drift.min_points", 20, "fewest length logs before the trend is judged"),
    Threshold(
        "length_drift.noise_z", 3.0, "the shift must exceed this many standard errors of the log-to-log scatter"
    ),
    # format_hacking
    Threshold("format_hacking.saturation", 0.95, "format reward at or above this fraction of its max = saturated"),
    Threshold("format_hacking.min_gain", 0.1, "the format reward must have gained this much (x its scale)"),
    Threshold("format_hacking.acc_flat", 0.02, "accuracy gain at or below this (x its scale) counts as flat"),
    Threshold("format_hacking.acc_drop", 0.3, "relative accuracy fall that, with a rising format reward, fires"),
    Threshold("format_hacking.persist", 3, "logs the condition must hold (fewer on very short logs)"),
    Threshold("format_hacking.stall_logs", 20, "logs since the format saturated before a stalled task reward fires"),
    # reward_drop
    Threshold("reward_drop.frac", 0.5, "fraction of the earlier gain (peak above floor) that must be lost"),
    Threshold("reward_drop.error_frac", 0.8, "fraction lost that makes it an error"),
    Threshold("reward_drop.min_drop", 0.1, "absolute fall, times max(1, the reward's range), below which it is noise"),
    Threshold("reward_drop.persist", 3, "logs the drop must hold"),
    Threshold(
        "reward_drop.noise_z",
        3.0,
        "the fall must exceed this many standard errors of the reward's step-to-step scatter (one level compared)",
    ),
    Threshold(
        "reward_drop.shuffle_alpha",
        0.002,
        "skewed reward, few logs per level: share of shuffled logs allowed to fall as far (permutation p-value)",
    ),
    Threshold("reward_drop.long_window", 0.1, "long logs: the drop is re-measured on means over this share of logs"),
    Threshold(
        "reward_drop.sustained_frac", 0.25, "a fall that never came back: share of the level above the floor lost"
    ),
    Threshold("reward_drop.sustained_share", 0.33, "... held over at least this share of the log"),
    Threshold("reward_drop.sustained_z", 6.0, "... and this many standard errors of its scatter (picks corrected)"),
    Threshold("reward_drop.sustained_logs", 12, "fewest logs before such a fall is judged"),
    Threshold("reward_drop.decline_logs", 12, "fewest logs before a slow decline (no single fall) is judged"),
    Threshold("reward_drop.decline_t", 2.5, "a slow decline: its fitted slope this many standard errors below zero"),
    Threshold(
        "reward_drop.decline_frac",
        0.15,
        "a slow decline: fall from the first third to the last, times max(1, the reward's range)",
    ),
    # reward_length_corr
    Threshold("reward_length_corr.window", 50, "trailing logs over which correlation is measured", "PTT"),
    Threshold("reward_length_corr.min_points", 20, "fewest joint logs before judging"),
    Threshold("reward_length_corr.info_corr", 0.6, "|corr(reward, length)| above this: info", "PTT"),
    Threshold("reward_length_corr.warn_corr", 0.8, "|corr| above this (and length drifted): warning", "PTT"),
    Threshold("reward_length_corr.diff_corr", 0.3, "|corr| of step-to-step changes required (not a shared trend)"),
    Threshold("reward_length_corr.warn_diff_corr", 0.5, "|corr| of changes required for a warning"),
    # kl_spike
    Threshold("kl_spike.ratio", 5.0, "kl above this multiple of its reference median", "derived (anchors B6)"),
    Threshold("kl_spike.abs_floor", 0.2, "nats; the spike must also exceed the median by this much", "PTT"),
    Threshold("kl_spike.history", 10, "trailing logs forming the reference median"),
    Threshold("kl_spike.start_window", 3, "first logs compared with the median of the rest (start explosions)"),
    Threshold("kl_spike.error_ratio", 20.0, "spike multiple that is an error while kl has not come back down"),
    Threshold("kl_spike.blip_beta", 0.1, "beta up to this (or unknown): isolated blips while reward rises are info"),
    Threshold("kl_spike.zero_frac", 0.5, "skip when this fraction of the reference window is exactly 0"),
    # kl_high
    Threshold("kl_high.value", 0.5, "warm-up median kl at or above this, and flat: info"),
    Threshold("kl_high.warn_value", 5.0, "... at or above this: warning (never an error)"),
    Threshold("kl_high.flat_ratio", 2.0, "kl stays below this multiple of its warm-up level = flat"),
    Threshold("kl_high.drift_value", 1.0, "kl that grew to at least this (smoothed) ..."),
    Threshold("kl_high.drift_ratio", 10.0, "... and to this multiple of its warm-up level: drift warning"),
    Threshold("kl_high.persist", 10, "logs a drift must hold"),
    Threshold("kl_high.min_points", 3, "fewest kl logs"),
    # kl_outpaces_reward
    Threshold("kl_outpaces_reward.window", 50, "trailing logs over which slopes are fitted", "PTT"),
    Threshold("kl_outpaces_reward.min_points", 20, "fewest joint logs before judging"),
    Threshold("kl_outpaces_reward.ratio", 3.0, "kl rise / reward rise over the window above this", "Gao"),
    Threshold("kl_outpaces_reward.min_kl_rise", 0.1, "nats; kl must have risen at least this much over the window"),
    Threshold(
        "kl_outpaces_reward.drift_ratio",
        10.0,
        "relative drift: trailing median kl at this multiple of its warm-up level",
    ),
    Threshold("kl_outpaces_reward.drift_floor", 0.05, "nats; ... and at least this (smaller drifts are noise)"),
    Threshold("kl_outpaces_reward.persist", 10, "logs the relative drift must hold"),
    # clip_high
    Threshold("clip_high.warn", 0.25, "smoothed clip_ratio/region_mean above this (off-policy only)", "PTT"),
    Threshold("clip_high.error", 0.4, "... above this: error", "PTT"),
    Threshold("clip_high.persist", 5, "logs the condition must hold"),
    Threshold("clip_high.rise_ratio", 5.0, "smoothed clip ratio this many times its warm-up median: warning"),
    Threshold("clip_high.rise_floor", 0.05, "... and above this share of tokens (a rise from ~0 is not one)"),
    # grad_spike
    Threshold("grad_spike.ratio", 10.0, "grad_norm above this multiple of the trailing median", "PTT"),
    Threshold("grad_spike.history", 20, "trailing logs forming the reference median"),
    Threshold("grad_spike.min_history", 5, "fewest earlier logs before a spike can be judged"),
    Threshold("grad_spike.typical_floor", 1.0, "the reference is at least this multiple of the run's median so far"),
    Threshold(
        "grad_spike.quiet_fraction",
        0.1,
        "reference leaves out logs under this fraction of the window's largest value but one (no-advantage batches)",
    ),
    Threshold("grad_spike.min_active", 3, "fewest logs with a gradient in the window before a spike is judged"),
    Threshold("grad_spike.zero_frac", 0.5, "skip when this fraction of the window is exactly 0 (see zero_gradient)"),
    Threshold(
        "grad_spike.early_ratio", 100.0, "before a baseline: grad_norm this multiple of the smallest earlier log"
    ),
    Threshold(
        "grad_spike.early_abs",
        100.0,
        "before a baseline, or where groups are saturated: and at least this large (absolute test)",
    ),
    # zero_gradient
    Threshold("zero_gradient.warn_frac", 0.5, "fraction of trailing logs with grad_norm exactly 0: warning", "TRL"),
    Threshold("zero_gradient.error_frac", 0.9, "... error"),
    Threshold("zero_gradient.window", 20, "trailing logs examined"),
    Threshold("zero_gradient.min_zero", 3, "fewest zero-gradient logs before firing"),
    Threshold("zero_gradient.short_frac", 0.33, "log shorter than the window: share of exactly-0 logs that fires"),
    # overfitting
    Threshold("overfitting.min_evals", 3, "eval points needed (the last ones must fall)", "anchors B9"),
    Threshold("overfitting.min_drop", 0.02, "eval fall from its peak, times max(1, eval range), below which: noise"),
    # plateau
    Threshold("plateau.window", 50, "trailing logs judged", "PTT"),
    Threshold("plateau.min_points", 30, "fewest reward logs before a noisy plateau is judged"),
    Threshold(
        "plateau.min_gain", 0.05, "fitted gain over the window, times the reward's scale, that counts as learning"
    ),
    Threshold(
        "plateau.min_rel_gain", 0.25, "... or, for a reward low in its range, this share of its level above the floor"
    ),
    Threshold("plateau.t_stat", 2.0, "a rising slope with this t-statistic counts as learning"),
    Threshold("plateau.constant_frac", 0.6, "share of recent logs at exactly one value (zero spread) = plateau"),
    Threshold("plateau.constant_min_points", 10, "fewest logs for the zero-spread plateau"),
    Threshold("plateau.short_share", 0.75, "shorter log: share of logs at one value with zero spread = plateau"),
    Threshold("plateau.ceiling", 0.9, "reward level at or above this fraction of its range = at its ceiling"),
    # forecast_stop
    Threshold("forecast_stop.min_gain", 0.02, "forecast gain to max_steps below this share of the reward's range"),
    Threshold("forecast_stop.min_points", 30, "fewest reward logs before the forecast is trusted for this"),
    # duplicate_completions
    Threshold("duplicate_completions.warn", 0.5, "duplicate share within prompt groups (or across prompts): warning"),
    Threshold("duplicate_completions.error", 0.9, "... error"),
    # agents (checks_agents.py)
    Threshold("tool_failures.warn", 0.3, "smoothed tools/failure_frequency at or above this: warning", "derived"),
    Threshold("tool_failures.error", 0.7, "... error", "derived"),
    Threshold("tool_failures.persist", 3, "logs the level must hold"),
    Threshold("tool_failures.rise", 0.15, "rise of the failure share from the first to the last third: warning"),
    Threshold(
        "tool_failures.dropped",
        0.1,
        "share of calls whose results TRL dropped (length) that the finding names",
        "derived",
    ),
    Threshold("tool_use_collapse.min_peak", 0.2, "calls per episode the agent must have reached", "derived"),
    Threshold(
        "tool_use_collapse.ratio", 0.25, "smoothed calls per episode at or below this share of the peak = stopped"
    ),
    Threshold("tool_use_collapse.persist", 3, "logs the agent must have stopped for"),
    Threshold("turn_limit.warn", 0.5, "share of episodes cut off at max_tool_calling_iterations", "derived"),
    Threshold("turn_limit.persist", 3, "logs the share must hold"),
    Threshold("malformed_tool_calls.warn", 0.2, "share of episodes with an unparsed tool call", "derived"),
    Threshold("malformed_tool_calls.persist", 3, "logs the share must hold"),
    Threshold("task_regression.min_drop", 0.1, "a task's reward fall, times the largest task reward range"),
    Threshold("task_regression.persist", 3, "logs a task's reward_std must stay 0"),
    Threshold("async_staleness.persist", 3, "logs the rollout queue must stay empty (or staleness stay high)"),
    Threshold("async_staleness.near", 0.75, "sample/staleness_mean at or above this share of max_staleness"),
)

# The thresholds at which a rule's warning or error starts, by the side it fires on: +1 above, -1 below. While a
# finding is shown, the live record judges its return against these moved ``hysteresis.margin`` toward healthy
# (``held_thresholds``): a statistic that hovers at a threshold neither resolves nor is demoted at each crossing.
HELD: dict[str, int] = {
    "zero_variance.warn": 1,
    "zero_variance.error": 1,
    "entropy_collapse.warn_ratio": -1,
    "entropy_collapse.error_ratio": -1,
    "entropy_blowup.ratio": 1,
    "truncation.warn": 1,
    "truncation.error": 1,
    "length_collapse.ratio": -1,
    "length_drift.ratio": 1,
    "reward_drop.frac": 1,
    "reward_drop.error_frac": 1,
    "reward_drop.sustained_frac": 1,
    "reward_length_corr.info_corr": 1,
    "kl_spike.ratio": 1,
    "kl_spike.error_ratio": 1,
    "kl_high.drift_ratio": 1,
    "kl_outpaces_reward.ratio": 1,
    "clip_high.warn": 1,
    "clip_high.error": 1,
    "clip_high.rise_ratio": 1,
    "clip_high.rise_floor": 1,
    "zero_gradient.warn_frac": 1,
    "zero_gradient.error_frac": 1,
    "plateau.min_gain": -1,
    "plateau.t_stat": -1,
    "tool_failures.warn": 1,
    "tool_failures.error": 1,
    "tool_use_collapse.ratio": -1,
    "turn_limit.warn": 1,
    "malformed_tool_calls.warn": 1,
}
HELD_RULES: frozenset[str] = frozenset(key.split(".", 1)[0] for key in HELD)

DEFAULT_THRESHOLDS: dict[str, float | int | bool] = {t.key: t.default for t in THRESHOLDS}
DEFAULT_THRESHOLDS.update({f"{rule}.enabled": True for rule in RULE_IDS})


def resolve_thresholds(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge user overrides into the defaults, validating every key and value.

    Args:
        overrides: flat ``{"entropy_collapse.warn_ratio": 0.2}`` or nested
            ``{"entropy_collapse": {"warn_ratio": 0.2}}``; values may be strings ("0.2", "false").

    Raises:
        ValueError: unknown key (with the closest valid ones) or a value of the wrong type.
    """
    merged = dict(DEFAULT_THRESHOLDS)
    for key, value in _flatten(overrides or {}).items():
        if key not in DEFAULT_THRESHOLDS:
            near = get_close_matches(key, DEFAULT_THRESHOLDS, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(near)}?" if near else "; see docs/health.md for the list"
            raise ThresholdError(f"unknown health threshold {key!r}{hint}")
        merged[key] = _coerce(key, value, DEFAULT_THRESHOLDS[key])
    if not merged["hysteresis.margin"] < 1:
        raise ThresholdError(
            f"health threshold hysteresis.margin must be below 1 (a share of each held threshold; 0 turns the margin "
            f"off), got {merged['hysteresis.margin']!r}"
        )
    return merged


def held_thresholds(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """``resolved`` thresholds with each ``HELD`` one moved ``hysteresis.margin`` of its value toward healthy: what a
    shown finding's rule is judged by before the finding may resolve."""
    margin = float(resolved["hysteresis.margin"])
    out = dict(resolved)
    for key, side in HELD.items():
        out[key] = float(resolved[key]) * (1.0 - side * margin)
    return out


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, prefix=f"{full}."))
        else:
            flat[full] = value
    return flat


def _coerce(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ThresholdError(f"health threshold {key} must be true or false, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ThresholdError(f"health threshold {key} must be a number, got {value!r}") from None
    if number != number or number < 0:
        raise ThresholdError(f"health threshold {key} must be a non-negative number, got {value!r}")
    if isinstance(default, int):
        if number != int(number) or number < 1:
            raise ThresholdError(f"health threshold {key} counts logs and must be a whole number >= 1, got {value!r}")
        return int(number)
    return number
