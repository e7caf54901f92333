"""The reward_drop rule: a reward that lost most of its gain, judged between levels and against its own noise, or
one that declined slowly and steadily over the whole log."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from .findings import WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .series import (
    Series,
    extend_onset,
    fmt,
    reward_range,
    short_required,
    trailing_mean,
    trailing_streak,
)


def _drop(ctx: Context, series: Series) -> Finding | None:
    v, n = series.values, series.values.size
    if n < 3:
        return None
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    peak = np.maximum.accumulate(sm)
    lo, hi = reward_range(v)
    gain = peak - lo
    lost = peak - sm
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(gain > 0, lost / np.where(gain > 0, gain, 1.0), 0.0)
    big = lost >= ctx.t("reward_drop.min_drop") * max(1.0, hi - lo)
    warn = (frac >= ctx.t("reward_drop.frac")) & big
    err = (frac >= ctx.t("reward_drop.error_frac")) & big
    persist = int(ctx.t("reward_drop.persist"))
    severity, run = judge_state(n - 1, persist, short_required(n - 1, persist), warn, err)
    if severity is None and n - 1 < 2 * persist:
        severity, run = judge_state(n - 1, persist, persist, extreme=warn, extreme_severity=WARNING)
    if severity is None:
        return None
    if float(v[-1]) >= float(peak[-1]):
        # The latest log is back at the peak: the fall was a dip that a smoothed window still averages in.
        return None
    falls = n - 1 < 2 * persist and _falls_clearly(ctx, series)
    if n - 1 < 2 * persist and not (falls or _pinned_at_floor(ctx, series, lo)):
        # A few noisy logs fall and rise by chance; on a short log only a reward pinned at its floor, or one that
        # falls on every log from the first by more than its completions' spread, is a drop.
        return None
    w = max(persist, int(n * ctx.t("reward_drop.long_window")))
    if n >= 4 * w:
        # Long logs: the peak of a short trailing mean is biased up by noise; re-measure on w-log means.
        wide = trailing_mean(v, w)
        before = float(np.max(wide[: n - w])) if n - w > 0 else float(wide[-1])
        lost_w = before - float(wide[-1])
        if lost_w < ctx.t("reward_drop.min_drop") * max(1.0, hi - lo) or lost_w < ctx.t("reward_drop.frac") * max(
            before - lo, 1e-12
        ):
            return None
    start = extend_onset(warn, n - run, s)
    if falls:
        # Falling on every log from the first: the fall itself is the evidence, there is no level to measure.
        peak_idx, peak_value, now, lost_frac, z = 0, float(v[0]), float(v[-1]), float(frac[-1]), float("nan")
    else:
        level = _level_drop(ctx, v, start, max(s, persist), lo, hi)
        if level is None:
            return None
        peak_idx, peak_value, now, lost_frac, z = level
    if lost_frac < ctx.t("reward_drop.error_frac"):
        severity = WARNING
    onset = int(series.steps[start])
    if np.isnan(z):
        message = (
            f"{series.key} fell on every log, from {fmt(peak_value)} (step {int(series.steps[0])}) to {fmt(now)}, "
            f"losing {lost_frac:.0%} of what it had gained above {fmt(lo)}."
        )
    else:
        scatter = "with no scatter since" if np.isinf(z) else f"{z:.1f} standard errors of its log-to-log scatter"
        message = (
            f"{series.key} fell from {fmt(peak_value)} (its best level, up to step {int(series.steps[peak_idx])}) "
            f"to {fmt(now)} (its mean since step {onset}), losing {lost_frac:.0%} of what it had gained above "
            f"{fmt(lo)}; the fall is {scatter}."
        )
    cfg = ctx.config
    fixes = [
        f"{cfg.resume_advice(onset)} with a lower learning_rate{cfg.now('learning_rate')}",
        "check whether another reward rose at the same time (a trade-off: adjust reward_weights)",
        "read completions from before and after the drop (log_completions=True)",
    ]
    if not cfg.beta and ctx.frame.get("kl") is None:  # a logged kl says beta > 0
        fixes.append("a small KL term (beta=0.001-0.04) keeps the policy near what already worked")
    return make_finding(
        "reward_drop",
        severity,
        onset,
        message,
        join_fixes(fixes),
        series.key,
        peak=peak_value,
        peak_step=int(series.steps[peak_idx]),
        current=now,
        lost_fraction=lost_frac,
        noise_z=float(z) if np.isfinite(z) else None,
        floor=lo,
        threshold=ctx.t("reward_drop.frac"),
    )


def _sustained(ctx: Context, series: Series) -> Finding | None:
    """A smaller fall that never came back: at least ``reward_drop.sustained_frac`` of the best level's height above
    the reward's floor lost, held over ``reward_drop.sustained_share`` of the log, and ``reward_drop.sustained_z``
    standard errors of its scatter (a resumed or fine-tuned policy that starts at its best and that training made
    worse: there is no gain to lose half of, only the level it started at)."""
    v, n = series.values, series.values.size
    if n < ctx.t("reward_drop.sustained_logs"):
        return None
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    peak = np.maximum.accumulate(sm)
    lo, hi = reward_range(v)
    lost = peak - sm
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(peak > lo, lost / np.where(peak > lo, peak - lo, 1.0), 0.0)
    frac_at = ctx.t("reward_drop.sustained_frac")
    down = (frac >= frac_at) & (lost >= ctx.t("reward_drop.min_drop") * max(1.0, hi - lo))
    run = trailing_streak(down)
    if run < max(int(ctx.t("reward_drop.persist")), ctx.t("reward_drop.sustained_share") * n):
        return None
    if float(v[-1]) >= float(peak[-1]):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        raw_down = np.where(peak > lo, (peak - v) / np.where(peak > lo, peak - lo, 1.0), 0.0) >= frac_at
    start = extend_onset(raw_down, n - run, s)  # where the raw values fell, not where the trailing mean followed
    level = _level_drop(ctx, v, start, max(s, int(ctx.t("reward_drop.persist"))), lo, hi, frac_at,
                        ctx.t("reward_drop.sustained_z"))  # fmt: skip
    if level is None:
        return None
    peak_idx, peak_value, now, lost_frac, z = level
    onset = int(series.steps[start])
    scatter = "with no scatter since" if np.isinf(z) else f"{z:.1f} standard errors of its log-to-log scatter"
    message = (
        f"{series.key} fell from {fmt(peak_value)} (its best level, up to step {int(series.steps[peak_idx])}) to "
        f"{fmt(now)} (its mean since step {onset}, {n - start} logs) and has not come back: {lost_frac:.0%} of its "
        f"level above {fmt(lo)} lost for {(n - start) / n:.0%} of the log; the fall is {scatter}."
    )
    cfg = ctx.config
    fixes = [
        f"{cfg.resume_advice(onset)} with a lower learning_rate{cfg.now('learning_rate')}",
        "read completions from before and after the fall (log_completions=True)",
    ]
    if not cfg.beta and ctx.frame.get("kl") is None:  # a logged kl says beta > 0
        fixes.append("a small KL term (beta=0.001-0.04) keeps the policy near what already worked")
    return make_finding(
        "reward_drop",
        WARNING,
        onset,
        message,
        join_fixes(fixes),
        series.key,
        peak=peak_value,
        peak_step=int(series.steps[peak_idx]),
        current=now,
        lost_fraction=lost_frac,
        noise_z=float(z) if np.isfinite(z) else None,
        floor=lo,
        threshold=frac_at,
        sustained=True,
    )


def _decline(ctx: Context, series: Series) -> Finding | None:
    """A slow decline that never lost half its gain at once: the thirds of the log (their medians) each lower than the
    one before, the last below the first by ``reward_drop.decline_frac`` of the reward's range (at least 1), the
    fitted slope ``reward_drop.decline_t`` standard errors below zero, and the latest logs still down."""
    v, n = series.values, series.values.size
    if n < ctx.t("reward_drop.decline_logs"):
        return None
    # Medians: a reward with rare large penalties (a quantised 0.05 with an occasional -0.5) must not decline by them.
    thirds = [float(np.median(part)) for part in np.array_split(v, 3)]
    first, middle, last = thirds
    lo, hi = reward_range(v)
    fall = first - last
    # No sudden change corroborates a slow decline, so it must span more of the reward's scale than a drop does.
    if not first > middle > last or fall < ctx.t("reward_drop.decline_frac") * max(1.0, hi - lo):
        return None
    x = np.arange(n, dtype=float) - (n - 1) / 2.0
    slope = float(np.dot(x, v - v.mean()) / np.dot(x, x))
    resid = v - v.mean() - slope * x
    se = float(np.sqrt(np.dot(resid, resid) / (n - 2) / np.dot(x, x)))
    t = slope / se if se > 0 else float("-inf")
    if t > -ctx.t("reward_drop.decline_t"):
        return None
    if float(trailing_mean(v, ctx.smooth_n(n))[-1]) > first - fall / 2.0:
        return None  # the latest logs are back up
    onset = int(series.steps[n // 3])
    lost_frac = fall / max(first - lo, 1e-12)
    message = (
        f"{series.key} declined slowly over the whole log, with no single fall: {fmt(first)} -> {fmt(middle)} -> "
        f"{fmt(last)} by thirds (medians; steps {int(series.steps[0])}-{int(series.steps[-1])}), a trend "
        f"{-t:.1f} standard errors below zero, {lost_frac:.0%} of its first third's level above {fmt(lo)} lost."
    )
    cfg = ctx.config
    fixes = [
        "check whether another reward rose at the same time (a trade-off: adjust reward_weights)",
        "read completions from early and late steps (log_completions=True)",
        f"{cfg.resume_advice(onset)} with a lower learning_rate{cfg.now('learning_rate')}",
    ]
    return make_finding(
        "reward_drop",
        WARNING,
        onset,
        message,
        join_fixes(fixes),
        series.key,
        peak=first,
        peak_step=int(series.steps[0]),
        current=last,
        lost_fraction=lost_frac,
        trend_t=t,
        floor=lo,
        threshold=ctx.t("reward_drop.decline_frac"),
    )


def _level_drop(
    ctx: Context,
    v: np.ndarray,
    start: int,
    window: int,
    lo: float,
    hi: float,
    frac_at: float | None = None,
    z_at: float | None = None,
) -> tuple[int, float, float, float, float] | None:
    """The fall from the best level before ``start`` to the mean since, if it is a drop and not noise.

    A level is the mean of up to ``window`` logs (as many as the episode since ``start`` holds, when more), so one
    lucky log is not a level. The best level before the onset is compared with the mean since it, and the fall must
    exceed ``reward_drop.noise_z`` standard errors of the reward's step-to-step scatter (measured outside the fall
    itself), the bar raised (Bonferroni) for the number of levels the best one was picked from. The share lost
    (``reward_drop.frac``, ``reward_drop.min_drop``, severity) is measured from the best level less the lift that
    picking the best of that many noisy levels gives by itself. Returns (peak index, peak level, level now, share
    lost, fall in standard errors), or None.
    """
    after = v[start:]
    if start < 1 or after.size < 1:
        return None
    width = max(1, min(max(window, after.size), start))
    levels = trailing_mean(v[:start], width)
    first = width - 1  # full windows only: a shorter one at the start is a noisier level, picked from more
    peak_idx = first + int(np.argmax(levels[first:]))
    peak_level, now = float(levels[peak_idx]), float(after.mean())
    used = min(width, peak_idx + 1)
    diffs = np.concatenate((np.diff(v[: peak_idx + 1]), np.diff(after)))
    sigma = float(np.sqrt(np.mean(diffs**2) / 2.0)) if diffs.size else 0.0
    candidates = max(1.0, start / width)
    level = peak_level - sigma / np.sqrt(used) * np.sqrt(2.0 * np.log(candidates))
    lost = level - now
    lost_frac = lost / max(level - lo, 1e-12)
    frac_at = ctx.t("reward_drop.frac") if frac_at is None else frac_at
    if lost < ctx.t("reward_drop.min_drop") * max(1.0, hi - lo) or lost_frac < frac_at:
        return None
    se = sigma * np.sqrt(1.0 / used + 1.0 / after.size)
    z = (peak_level - now) / se if se > 0 else float("inf")
    # Both ends are picked from the log: the best of the levels before the onset, and the episode since it (found
    # because it is low: one of about n / len(episode) windows of its length). The bar is raised for both choices.
    z_at = ctx.t("reward_drop.noise_z") if z_at is None else z_at
    tail = (1.0 - NormalDist().cdf(z_at)) / (candidates * max(1.0, v.size / after.size))
    if z < NormalDist().inv_cdf(1.0 - tail):
        return None
    few = min(used, after.size) < 25.0 * _skewness(v) ** 2
    if few and _SHORT_LOG < v.size <= _PERMUTE_MAX:
        # Too few logs per level for a mean of this skewed a reward to be near normal (Cochran's n > 25 g1^2): a
        # lucky stretch of a mostly-floor reward looks like a level. Ask the reward's own values instead: how often
        # does a shuffled log show as large a fall from its best level, with the same windows?
        if _shuffled_share(v, start, width, peak_level - now) > ctx.t("reward_drop.shuffle_alpha"):
            return None
    return peak_idx, peak_level, now, float(lost_frac), float(z)


_PERMUTE_MAX = 4000
_SHUFFLES = 999
_SHORT_LOG = 10  # fewer logs have too few distinct orders to shuffle; the short-log states decide there


def _skewness(v: np.ndarray) -> float:
    sd = float(np.std(v))
    return float(np.mean((v - v.mean()) ** 3)) / sd**3 if sd > 0 else 0.0


def _shuffled_share(v: np.ndarray, start: int, width: int, observed: float) -> float:
    """Share of shuffles of ``v`` (seeded: the answer depends only on the log) whose best full ``width``-log level
    before ``start`` exceeds their mean from ``start`` on by at least ``observed`` (a permutation p-value)."""
    rng = np.random.default_rng(0)
    shuffled = rng.permuted(np.broadcast_to(v, (_SHUFFLES, v.size)), axis=1)
    csum = np.concatenate((np.zeros((_SHUFFLES, 1)), np.cumsum(shuffled, axis=1)), axis=1)
    levels = (csum[:, width : start + 1] - csum[:, : start + 1 - width]) / width
    falls = levels.max(axis=1) - shuffled[:, start:].mean(axis=1)
    return float((1 + np.count_nonzero(falls >= observed - 1e-12)) / (_SHUFFLES + 1))


def _falls_from_start(v: np.ndarray) -> bool:
    """Every log is below the one before it, from the first on (at least three logs)."""
    return v.size >= 3 and bool(np.all(np.diff(v) < 0))


def _spread(ctx: Context, series: Series) -> Series | None:
    """The per-completion standard deviation logged with a reward mean (``rewards/<f>/std``, ``reward_std``)."""
    key = series.key
    std_key = key[: -len("/mean")] + "/std" if key.endswith("/mean") else "reward_std" if key == "reward" else None
    std = ctx.frame.get(std_key) if std_key else None
    return std.finite() if std is not None else None


def _falls_clearly(ctx: Context, series: Series) -> bool:
    """Falls on every log from the first, by more than the spread of the first log's completions when that is
    logged: a 0/1 reward's batch mean moves by a few tenths between small batches by chance alone. Without a logged
    spread (verl logs no per-batch std), the order is the evidence: at least four logs, each below the one before
    (a noisy reward's first three fall in order one time in six by chance, four one time in 24), or three while
    another reward function rose by more over the same logs (a trade-off, the classic cause of a drop)."""
    v = series.values
    if not _falls_from_start(v):
        return False
    std = _spread(ctx, series)
    if std is None or std.values.size == 0:
        return v.size >= 4 or _another_rose(ctx, series, float(v[0] - v[-1]))
    at = np.flatnonzero(std.steps == series.steps[0])
    return float(v[0] - v[-1]) >= float(std.values[at[0] if at.size else 0])


def _another_rose(ctx: Context, series: Series, fall: float) -> bool:
    """Another reward function rose by more than ``fall`` between ``series``' first and last steps."""
    first, last = int(series.steps[0]), int(series.steps[-1])
    for mean_key, _ in ctx.frame.reward_functions().values():
        if mean_key == series.key:
            continue
        other = ctx.frame.columns[mean_key].finite()
        at = other.values[(other.steps >= first) & (other.steps <= last)]
        if at.size >= 2 and float(at[-1] - at[0]) > fall:
            return True
    return False


def _pinned_at_floor(ctx: Context, series: Series, lo: float) -> bool:
    """The latest two values are the reward's floor with zero spread (its ``/std`` or ``reward_std`` logged, and 0):
    one log at the lowest value seen so far is where any noisy reward sits now and then."""
    atol = ctx.t("flat_reward.std_atol")
    k = min(2, series.values.size - 1)
    if k < 1 or bool(np.any(series.values[-k:] > lo + atol)):
        return False
    std = _spread(ctx, series)
    std_values = std.values if std is not None else np.empty(0)
    # Without a logged spread nothing says the reward is pinned there: two logs at the lowest value seen so far are
    # what a reward whose floor the log has not reached yet shows too.
    return std_values.size >= k and bool(np.all(std_values[-k:] <= atol))


def check_reward_drop(ctx: Context) -> list[Finding]:
    """A reward function (or the total) falls well below its earlier peak, e.g. the format is lost, or declines
    steadily over the log."""
    findings = []
    for mean_key, _ in ctx.frame.reward_functions().values():
        series = ctx.frame.columns[mean_key].finite()
        found = _drop(ctx, series) or _sustained(ctx, series) or _decline(ctx, series)
        if found:
            findings.append(found)
    if not findings:
        reward = ctx.frame.get("reward")
        total = reward.finite() if reward is not None else None
        found = (_drop(ctx, total) or _sustained(ctx, total) or _decline(ctx, total)) if total is not None else None
        if found:
            findings.append(found)
    return findings
