"""Rules about the policy distribution: entropy collapse and blow-up (KL to the reference: checks_kl)."""

from __future__ import annotations

import numpy as np

from .findings import ERROR, WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .series import (
    Series,
    extend_onset,
    fmt,
    linear_fit,
    trailing_mean,
    trailing_streak,
)


def entropy_series(ctx: Context) -> Series | None:
    """Finite entropy, without the placeholder zeros of steps where every token was masked out.

    With mask_truncated_completions=True and every completion truncated, TRL trains on no token at all: entropy,
    loss and grad_norm are logged as exactly 0, which says nothing about the policy.
    """
    series = ctx.frame.get("entropy")
    if series is None:
        return None
    series = series.finite()
    if series.values.size >= 2 and not series.values.any():
        # Exactly 0.0 on every log, from the first: a trainer that logs the key without computing it (a sampling
        # policy's entropy is never exactly 0 in floating point, and a collapse falls from somewhere).
        return None
    clipped = ctx.frame.get("completions/clipped_ratio")
    if not ctx.config.flag("mask_truncated_completions") or clipped is None:
        return series
    clipped = clipped.finite()
    at = np.searchsorted(clipped.steps, series.steps, side="right") - 1
    all_cut = (at >= 0) & (clipped.values[np.maximum(at, 0)] >= 0.999)
    masked = (series.values == 0.0) & all_cut
    grad = ctx.frame.get("grad_norm")
    if grad is not None:
        idx = np.searchsorted(grad.steps, series.steps)
        idx = np.minimum(idx, grad.steps.size - 1)
        same = grad.steps[idx] == series.steps
        masked &= ~same | (grad.values[idx] == 0.0)
    if not masked.any():
        return series
    return Series(series.key, series.steps[~masked], series.values[~masked])


def level_change(ctx: Context, key: str, since_step: int) -> str:
    """' (reward 0.12 -> 0.15 over the same logs)' for corroboration, or ''."""
    series = ctx.frame.get(key)
    if series is None:
        return ""
    series = series.finite()
    before, after = series.values[series.steps < since_step], series.values[series.steps >= since_step]
    if before.size == 0 or after.size == 0:
        return ""
    return f"{key} {fmt(float(np.mean(before[-5:])))} -> {fmt(float(np.mean(after[-5:])))}"


def _pct(x: float) -> str:
    return f"{x:.1%}" if abs(x) < 0.01 else f"{x:.0%}"


def check_entropy_collapse(ctx: Context) -> list[Finding]:
    """Entropy fell far below the run's own warm-up level, or sits near zero from the start."""
    series = entropy_series(ctx)
    if series is None or series.values.size < 2:
        return []
    base, nb = _entropy_baseline(ctx, series.values)
    fixes = _entropy_collapse_fixes(ctx, base)
    if base <= ctx.t("entropy_collapse.abs_floor"):
        return _entropy_low_from_start(ctx, series, base, nb, fixes)
    return _entropy_fell(ctx, series, base, nb, fixes)


def _entropy_baseline(ctx: Context, v: np.ndarray) -> tuple[float, int]:
    """The run's entropy level before any collapse (the warm-up median) and how many logs it is the median of."""
    nb = ctx.baseline_n(v.size)
    base = float(np.median(v[:nb]))
    floor = ctx.t("entropy_collapse.abs_floor")
    first = float(np.median(v[: min(3, nb)]))
    if base <= floor < first / 2:
        # The collapse happened inside the warm-up window (4.46 -> 0 by the fifth log of 60): the window's median is
        # the collapsed level, so the run's level before it is its first logs'.
        base, nb = first, min(3, nb)
    return base, nb


def _entropy_collapse_fixes(ctx: Context, base: float) -> list[str]:
    cfg = ctx.config
    fixes = [
        f"lower learning_rate{cfg.now('learning_rate')} (2-10x)",
        f"raise temperature{cfg.now('temperature')}",
        "add an entropy bonus: entropy_coef=0.001, or use_adaptive_entropy=True with entropy_target near "
        f"{fmt(0.5 * max(base, ctx.t('entropy_collapse.abs_floor')))} (TRL >= 1.8)",
    ]
    if cfg.off_policy:
        fixes.insert(1, f"set epsilon_high=0.28{cfg.now('epsilon_high')} (DAPO clip-higher)")
    else:
        fixes.append("with num_iterations > 1, epsilon_high=0.28 (clip-higher) also helps; on-policy it never binds")
    return fixes


def _entropy_low_from_start(ctx: Context, series: Series, base: float, nb: int, fixes: list[str]) -> list[Finding]:
    """Entropy at the floor on every log from the first: a nearly deterministic policy (a warning)."""
    v, n = series.values, series.values.size
    floor, persist = ctx.t("entropy_collapse.abs_floor"), int(ctx.t("entropy_collapse.persist"))
    sm = trailing_mean(v, ctx.smooth_n(n))
    low = sm <= floor
    if n < persist or trailing_streak(low) < n:
        return []
    slope, t = linear_fit(v)
    if slope > 0 and t >= ctx.t("entropy_collapse.rising_t"):
        # Low from the first log but climbing steadily: a policy becoming less deterministic, not one stuck.
        return []
    message = (
        f"entropy has been near zero since the first log (warm-up median {fmt(base)}, now {fmt(float(sm[-1]))} "
        f"nats, floor {fmt(floor)}): the policy is nearly deterministic, so the completions of a group are alike "
        "and GRPO has little to rank."
    )
    return [
        make_finding(
            "entropy_collapse",
            WARNING,
            int(series.steps[0]),
            message,
            join_fixes(fixes),
            series.key,
            baseline=base,
            current=float(sm[-1]),
            floor=floor,
            baseline_logs=nb,
        )
    ]


def _entropy_fell(ctx: Context, series: Series, base: float, nb: int, fixes: list[str]) -> list[Finding]:
    """Entropy fell to a fraction of its warm-up level ``base`` after the warm-up and stays there."""
    v, n = series.values, series.values.size
    floor, persist = ctx.t("entropy_collapse.abs_floor"), int(ctx.t("entropy_collapse.persist"))
    warn_ratio, err_ratio = ctx.t("entropy_collapse.warn_ratio"), ctx.t("entropy_collapse.error_ratio")
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    post = np.arange(n) >= nb
    ratio_s, ratio_r = sm / base, v / base
    warn = post & (ratio_s < warn_ratio)
    # Halving to under the floor means a policy turned deterministic only when it started clearly above the floor; a
    # model whose entropy was already near it (0.13 nats) drifting to 0.06 is judged on its ratio alone.
    err = post & ((ratio_s < err_ratio) | ((sm < floor) & (ratio_s < 0.5) & (base >= 2 * floor)))
    extreme = post & (ratio_r <= err_ratio) & (v < floor)
    severity, length = judge_state(n - nb, persist, persist, warn, err, extreme)
    if severity is None:
        return []
    start = extend_onset(post & (ratio_r < warn_ratio), n - length, s)
    onset = int(series.steps[start])
    current = float(v[-1]) if s == 1 else float(sm[-1])
    message = (
        f"entropy fell from {fmt(base)} (median of the first {nb} logs) to {fmt(current)} "
        f"({_pct(current / base)} of it; warning below {warn_ratio:.0%}, error below {err_ratio:.0%} or "
        f"{fmt(floor)} nats) and has stayed low since step {onset}."
    )
    context = [c for c in (level_change(ctx, "reward", onset), level_change(ctx, "frac_reward_zero_std", onset)) if c]
    if context:
        message += " Same period: " + ", ".join(context) + "."
    if severity == ERROR:
        fixes.insert(0, ctx.config.resume_advice(onset))
    return [
        make_finding(
            "entropy_collapse",
            severity,
            onset,
            message,
            join_fixes(fixes),
            series.key,
            baseline=base,
            current=current,
            ratio=current / base,
            baseline_logs=nb,
            window=s,
            warn_ratio=warn_ratio,
            error_ratio=err_ratio,
            floor=floor,
        )
    ]


def check_entropy_blowup(ctx: Context) -> list[Finding]:
    """Entropy rose to a multiple of its warm-up level: over-exploration, often gibberish."""
    series = entropy_series(ctx)
    if series is None:
        return []
    v, n = series.values, series.values.size
    if n < 2:
        return []
    nb = ctx.baseline_n(n)
    base = float(np.median(v[:nb]))
    if base <= 0:
        return []
    ratio, min_inc = ctx.t("entropy_blowup.ratio"), ctx.t("entropy_blowup.min_increase")
    persist = int(ctx.t("entropy_blowup.persist"))
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    post = np.arange(n) >= nb
    warn = post & (sm > ratio * base) & (sm - base >= min_inc)
    extreme = post & (v > 2 * ratio * base) & (v - base >= 2 * min_inc)
    severity, length = judge_state(n - nb, persist, persist, warn, None, extreme, extreme_severity=WARNING)
    if severity is None:
        return []
    start = extend_onset(post & (v > ratio * base), n - length, s)
    onset = int(series.steps[start])
    current = float(sm[-1])
    slope, _ = linear_fit(v[start:])
    message = (
        f"entropy rose from {fmt(base)} (median of the first {nb} logs) to {fmt(current)} "
        f"({current / base:.1f}x, threshold {ratio:g}x) since step {onset}"
        + (" and is still rising." if slope > 0 else ".")
    )
    clipped = ctx.frame.get("completions/clipped_ratio")
    evidence = {"baseline": base, "current": current, "ratio": current / base, "threshold": ratio}
    if clipped is not None:
        c = clipped.finite().values[-s:]
        if c.size and float(c.mean()) > ctx.t("entropy_blowup.error_clipped"):
            severity = ERROR
            evidence["clipped_ratio"] = float(c.mean())
            message += f" Completions also run to the length cap (clipped_ratio {c.mean():.2f}): likely gibberish."
    cfg = ctx.config
    fixes = [f"lower learning_rate{cfg.now('learning_rate')}", f"lower temperature{cfg.now('temperature')}"]
    if (cfg.number("entropy_coef") or 0) > 0 or cfg.flag("use_adaptive_entropy"):
        fixes.insert(0, f"lower or remove the entropy bonus (entropy_coef{cfg.now('entropy_coef')})")
    eps, eps_high = cfg.number("epsilon"), cfg.number("epsilon_high")
    if eps_high is not None and eps is not None and eps_high > eps:
        fixes.append(f"lower epsilon_high{cfg.now('epsilon_high')} toward epsilon{cfg.now('epsilon')}")
    if cfg.raw.get("loss_type") == "grpo":
        fixes.append('use loss_type="dapo" or "dr_grpo" (now "grpo", whose length normalisation favours this)')
    fixes.append("read a few completions (log_completions=True)")
    return [make_finding("entropy_blowup", severity, onset, message, join_fixes(fixes), series.key, **evidence)]
