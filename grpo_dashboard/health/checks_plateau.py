"""The plateau rule: no learning, as a reward stuck on one value or a flat fitted trend (converged, at its ceiling,
or not learning)."""

from __future__ import annotations

import numpy as np

from .findings import INFO, WARNING, Context, Finding, join_fixes, make_finding
from .series import Series, fmt, linear_fit, mostly, reward_ceiling_position, reward_range


def check_plateau(ctx: Context) -> list[Finding]:
    """No learning: a reward with zero spread (e.g. exactly 0 on most logs), or a flat noisy trend."""
    reward = ctx.frame.get("reward")
    if reward is None:
        return []
    reward = reward.finite()
    constant = _constant_reward(ctx, reward)
    return [constant] if constant is not None else _flat_trend(ctx, reward)


def _constant_reward(ctx: Context, reward: Series) -> Finding | None:
    """The reward is one value on (nearly) every recent log: zero spread, saturated at the top or not learning."""
    v, n = reward.values, reward.values.size
    window = int(ctx.t("plateau.window"))
    lo, hi = reward_range(v)
    tail = v[-window:]
    long_log = n >= ctx.t("plateau.constant_min_points")
    if long_log or n >= ctx.t("flat_reward.min_points"):
        values, counts = np.unique(tail, return_counts=True)
        mode = float(values[np.argmax(counts)])
        share = float(counts.max()) / tail.size
        eq = v == mode
        if long_log:
            constant = share >= ctx.t("plateau.constant_frac")
        else:
            # A short log: one value on nearly every log, with every completion of those batches scoring the same,
            # is a state (no signal), not a trend that needs a window.
            constant = mostly(eq & _zero_spread(ctx, reward), ctx.t("plateau.short_share"))
        if constant:
            suffix = np.cumsum(eq[::-1])[::-1] / np.arange(n, 0, -1)
            frac = ctx.t("plateau.constant_frac") if long_log else ctx.t("plateau.short_share")
            start = int(np.argmax(eq & (suffix >= frac)))
            at_top = (mode - lo) / (hi - lo) >= ctx.t("plateau.ceiling")
            severity = INFO if at_top else WARNING
            message = (
                f"reward is exactly {fmt(mode)} on {share:.0%} of the last {tail.size} logs (since step "
                f"{int(reward.steps[start])}): zero spread, "
                + (
                    "the reward is saturated at its maximum; nothing is left to learn on these prompts."
                    if at_top
                    else "the policy is not learning."
                )
            )
            fixes = (
                ["stop the run or move to harder prompts"]
                if at_top
                else [
                    "check the reward functions on real completions (log_completions=True)",
                    "use easier prompts, a graded reward, or more num_generations so that some completions score",
                ]
            )
            return make_finding(
                "plateau",
                severity,
                int(reward.steps[start]),
                message,
                join_fixes(fixes),
                reward.key,
                value=mode,
                share=share,
                window=int(tail.size),
                kind="constant",
            )
    return None


def _flat_trend(ctx: Context, reward: Series) -> list[Finding]:
    """The reward's fitted trend over the last window is flat: converged, at its ceiling, or not learning."""
    v, n = reward.values, reward.values.size
    window = int(ctx.t("plateau.window"))
    lo, hi = reward_range(v)
    tail = v[-window:]
    cfg = ctx.config
    if n < ctx.t("plateau.min_points"):
        return []
    scale = max(hi - lo, 1e-9)
    slope, t = linear_fit(tail)
    gain = slope * (tail.size - 1)
    # The last window alone is short: a slow climb is not significant on it, and on a long flat log a noisy gain on
    # it is chance. A longer stretch (the last half of the log, and at least twice the window) decides where it
    # can: a significant rise on it is learning, no rise on it a plateau.
    long = v[-min(n, max(2 * tail.size, n // 2)) :]
    long_slope, long_t = linear_fit(long) if long.size > tail.size else (slope, t)
    long_gain = long_slope * (long.size - 1)
    rises_long = long_t >= ctx.t("plateau.t_stat") and _learning(ctx, long, lo, scale, long_gain)
    if t >= ctx.t("plateau.t_stat") or (rises_long and _learning(ctx, tail, lo, scale, gain)):
        return []
    if rises_long:
        return [_slow_rise(ctx, reward, long, long_gain, long_t, tail.size)]
    flat_long = long.size > tail.size and not _learning(ctx, long, lo, scale, long_gain)
    if _learning(ctx, tail, lo, scale, gain) and not flat_long:
        return []
    # A reward low in its range learns by rises that are small in absolute terms (see _needed_gain), often within
    # the batch noise on a young log: "no learning" there needs the fit to rule such a rise out, i.e. a rise of the
    # needed size would have shown (t_stat standard errors of the fitted gain). At an ordinary level the absolute
    # yardstick stands as it is.
    needed = _needed_gain(ctx, long, lo, scale)
    relative = needed < ctx.t("plateau.min_gain") * scale
    hidden = ctx.t("plateau.t_stat") * _gain_se(long) if relative else 0.0
    nb = ctx.baseline_n(n)
    # The whole window's mean, not its last few logs: on a flat noisy reward those rise above the start by chance.
    overall = float(np.mean(tail) - np.median(v[:nb]))
    converged = overall >= 2 * ctx.t("plateau.min_gain") * scale
    ceiling = None if converged else reward_ceiling_position(ctx.frame, tail.size)
    at_ceiling = ceiling is not None and ceiling >= ctx.t("plateau.ceiling")
    onset = int(reward.steps[-tail.size])
    message = (
        f"reward has not improved over the last {tail.size} logs (fitted change {gain:+.3g}, t={t:.1f}; level "
        f"{fmt(float(np.mean(tail)))})"
    )
    if converged:
        message += f" after rising {overall:+.3g} earlier: the run has converged."
    elif at_ceiling:
        message += (
            f", at {ceiling:.0%} of its range: the reward sits at its ceiling, so there is little left to learn on "
            "these prompts. The run has converged; a higher learning rate would not help."
        )
    else:
        message += ": no learning."
    if converged:
        severity, fixes = INFO, ["stop here or continue on harder prompts"]
    elif at_ceiling:
        severity = INFO
        fixes = [
            f"{ctx.config.stop_advice(int(reward.steps[-1]))} (it is as good as it gets on this data)",
            "or continue on harder prompts / a curriculum; drop prompts the model always solves (filter by pass rate)",
        ]
    elif hidden > needed:
        severity = INFO
        message = message[: -len(": no learning.")] + (
            f": no rise shows yet, but the reward is too noisy to tell: over the last {long.size} logs a rise of up "
            f"to {fmt(hidden)} would not show (learning counts from {fmt(needed)}). A warning once the log rules it "
            "out."
        )
        fixes = ["wait for more logs, or check the reward on real completions (log_completions=True)"]
    else:
        severity = WARNING
        fixes = [
            f"raise learning_rate{cfg.now('learning_rate')} (GRPO on LLMs: 1e-6 to 1e-5; tiny models more)",
            "check that the reward can be earned at all (log_completions=True)",
            f"raise num_generations{cfg.now('num_generations')} or temperature{cfg.now('temperature')}",
        ]
        frac = ctx.frame.get("frac_reward_zero_std")
        if frac is not None and frac.finite().values.size and float(frac.finite().values[-window:].mean()) > 0.5:
            fixes.insert(0, "most groups have zero reward spread (see zero_variance): change the prompt difficulty")
    return [
        make_finding(
            "plateau",
            severity,
            onset,
            message,
            join_fixes(fixes),
            reward.key,
            gain=gain,
            t_stat=t,
            window=int(tail.size),
            level=float(np.mean(tail)),
            kind="ceiling" if at_ceiling else "trend",
            ceiling_position=ceiling,
        )
    ]


def _slow_rise(ctx: Context, reward: Series, long: np.ndarray, gain: float, t: float, window: int) -> Finding:
    """The last window is flat but the longer stretch before it rises significantly: slow learning, a note."""
    onset = int(reward.steps[-window])
    message = (
        f"reward is flat over the last {window} logs but still rises over the last {long.size} (fitted change "
        f"{gain:+.3g}, t={t:.1f}; level {fmt(float(np.mean(long[-window:])))}): learning, slowly."
    )
    remedy = join_fixes(
        ["nothing needed yet; if the pace matters, try a higher learning_rate" + ctx.config.now("learning_rate")]
    )
    return make_finding(
        "plateau", INFO, onset, message, remedy, reward.key, gain=gain, t_stat=t, window=int(long.size), kind="slow"
    )


def _needed_gain(ctx: Context, values: np.ndarray, lo: float, scale: float) -> float:
    """The fitted gain over ``values`` that counts as learning: plateau.min_gain of the reward's range, or, for a
    reward still low in its range, plateau.min_rel_gain of its own level above the floor (a run that climbs several-
    fold starts with rises far smaller than a share of the range)."""
    level = max(float(np.mean(values)) - lo, 0.0)
    return min(ctx.t("plateau.min_gain") * scale, ctx.t("plateau.min_rel_gain") * level)


def _learning(ctx: Context, values: np.ndarray, lo: float, scale: float, gain: float) -> bool:
    """Whether a fitted ``gain`` over ``values`` counts as learning (see _needed_gain)."""
    return gain > 0 and gain >= _needed_gain(ctx, values, lo, scale)


def _gain_se(values: np.ndarray) -> float:
    """Standard error of the least-squares gain (slope times span) over ``values``."""
    slope, t = linear_fit(values)
    if not np.isfinite(t) or t == 0:
        return 0.0 if slope != 0 or values.size < 3 else float(np.std(values)) * np.sqrt(12.0 / values.size)
    return abs(slope / t) * (values.size - 1)


def _zero_spread(ctx: Context, reward: Series) -> np.ndarray:
    """Per reward log: every completion of the batch scored the same (reward_std 0, else frac_reward_zero_std 1);
    all True when neither is logged (identical means are then the only evidence)."""
    for key, test in (
        ("reward_std", lambda x: x <= ctx.t("flat_reward.std_atol")),
        ("frac_reward_zero_std", lambda x: x >= ctx.t("zero_variance.extreme")),
    ):
        series = ctx.frame.get(key)
        if series is None or series.finite().values.size == 0:
            continue
        series = series.finite()
        at = np.searchsorted(series.steps, reward.steps)
        at = np.minimum(at, series.steps.size - 1)
        return (series.steps[at] == reward.steps) & test(series.values[at])
    return np.ones(reward.values.size, dtype=bool)
