"""Rules about completion length (truncation is checks_truncation): collapse to short answers, slow drift."""

from __future__ import annotations

import numpy as np

from .findings import ERROR, INFO, WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .series import Series, extend_onset, fmt, linear_fit, reward_range, trailing_mean, trailing_streak

MEAN_LENGTH_KEYS = ("completions/mean_length", "completion_length", "completions/mean_length/mean")


def _mean_length(ctx: Context) -> Series | None:
    series = ctx.frame.get(*MEAN_LENGTH_KEYS)
    return None if series is None else series.finite()


def _reward_trend(ctx: Context, since_step: int, min_logs: int = 10) -> str | None:
    """``"improving"``, ``"stuck"`` (gain under plateau.min_gain of its range and no significant rise) or None (too
    little data, or slow learning) for reward from ``since_step`` on.

    Uses eval_reward when there are enough evaluations, else the train reward; the gain is measured against the
    (up to 20) logs just before ``since_step`` when there are some, else within the episode itself. A rise whose
    fitted slope has a t-statistic of at least plateau.t_stat and a fitted gain of at least plateau.min_gain counts
    as improving.
    """
    for key in ("eval_reward", "reward"):
        series = ctx.frame.get(key)
        if series is None:
            continue
        series = series.finite()
        before = series.values[series.steps < since_step]
        after = series.values[series.steps >= since_step]
        if after.size < min_logs:
            continue
        lo, hi = reward_range(series.values)
        if before.size >= 3:
            # The level the episode started from, not the run's first logs: a reward that rose early and then
            # stalled did not improve with a change that began after it stalled.
            gain = float(np.mean(after[-10:]) - np.mean(before[-20:]))
        else:
            k = max(3, after.size // 5)
            gain = float(np.mean(after[-k:]) - np.mean(after[:k]))
        window = after[-int(ctx.t("plateau.window")) :]
        slope, t = linear_fit(window)
        fitted_gain = slope * (window.size - 1)
        significant = fitted_gain >= ctx.t("plateau.min_gain") * (hi - lo) and t >= ctx.t("plateau.t_stat")
        if gain > 0.1 * (hi - lo) or significant:
            return "improving"
        if gain < ctx.t("plateau.min_gain") * (hi - lo):
            return "stuck"
        return None
    return None


def check_length_collapse(ctx: Context) -> list[Finding]:
    """Mean completion length fell to a fraction of its warm-up level: short-answer hacks, empty outputs."""
    length = _mean_length(ctx)
    if length is None or length.values.size < 2:
        return []
    v, n = length.values, length.values.size
    nb = ctx.baseline_n(n)
    base = float(np.median(v[:nb]))
    if base <= 0:
        return []
    ratio, persist = ctx.t("length_collapse.ratio"), int(ctx.t("length_collapse.persist"))
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    post = np.arange(n) >= nb
    warn = post & (sm < ratio * base)
    extreme = post & (v < ctx.t("length_collapse.extreme_ratio") * base)
    severity, run = judge_state(n - nb, persist, persist, warn, None, extreme, extreme_severity=WARNING)
    if severity is None:
        return []
    groups = ctx.groups_per_log()
    if nb < 3 or (groups is not None and nb * groups < ctx.t("length_collapse.baseline_groups")):
        # A baseline of one or two logs, or of a few prompts (a record of one prompt's group measures the prompt as
        # much as the policy), is itself noise: only an unmistakable state counts, a few tokens or a tenth of what
        # the first logs wrote, on every log since the baseline up to the persistence window (one short prompt's
        # group is not a state).
        few = ctx.t("length_collapse.few_tokens")
        recent = v[max(nb, n - persist) :]
        if not np.all((recent <= few) | (recent <= ctx.t("length_collapse.thin_baseline_ratio") * base)):
            return []
    start = extend_onset(post & (v < ratio * base), n - run, s)
    onset = int(length.steps[start])
    current = float(v[-1]) if s == 1 else float(sm[-1])
    # Judged against the metric's own noise: a length that keeps coming back above the threshold within the episode
    # (a quarter of its logs or more) swings, it has not collapsed. A note, not a warning.
    episode = v[start:]
    back = int(np.sum(episode >= ratio * base))
    swings = episode.size >= 4 and back >= 0.25 * episode.size
    if current <= ctx.t("length_collapse.empty_tokens"):
        severity = ERROR
    elif swings:
        severity = INFO
    message = (
        f"{length.key} fell from {fmt(base)} (median of the first {nb} logs) to {fmt(current)} tokens "
        f"({current / base:.0%}; threshold {ratio:.0%}) since step {onset}."
    )
    if swings:
        message += (
            f" It swings: {back} of the {episode.size} logs since then are back above {ratio:.0%} of that level, so "
            "this is the length's noise more than a collapse."
        )
    rising = []
    for name, (mean_key, _) in ctx.frame.reward_functions().items():
        series = ctx.frame.columns[mean_key].finite()
        before, after = series.values[series.steps < onset], series.values[series.steps >= onset]
        if before.size and after.size and np.mean(after[-5:]) - np.mean(before[:5]) >= 0.2:
            rising.append(f"{name} {fmt(float(np.mean(before[:5])))} -> {fmt(float(np.mean(after[-5:])))}")
    if rising:
        message += f" Meanwhile {', '.join(rising)}: a reward may be paying for short output."
    cfg = ctx.config
    fixes = [
        "read the short completions (log_completions=True)",
        "if a format or length reward pays for brevity, lower its weight (reward_weights) or gate it on correctness",
    ]
    if cfg.raw.get("loss_type") == "grpo":
        fixes.append('use loss_type="dr_grpo" or "dapo" (loss_type="grpo" normalises per sequence, a length bias)')
    fixes.append(f"lower learning_rate{cfg.now('learning_rate')}")
    return [
        make_finding(
            "length_collapse",
            severity,
            onset,
            message,
            join_fixes(fixes),
            length.key,
            baseline=base,
            current=current,
            ratio=current / base,
            threshold=ratio,
        )
    ]


def check_length_drift(ctx: Context) -> list[Finding]:
    """Mean length drifts far from its warm-up level for a long time (info while reward improves with it)."""
    length = _mean_length(ctx)
    if length is None or length.values.size < ctx.t("length_drift.min_points"):
        return []
    v, n = length.values, length.values.size
    nb = ctx.baseline_n(n)
    base = float(np.median(v[:nb]))
    if base <= 0:
        return []
    ratio = ctx.t("length_drift.ratio")
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    rel = sm / base
    post = np.arange(n) >= nb
    up = post & (rel > 1 + ratio)
    # Falls past length_collapse.ratio are that rule's job.
    down = post & (rel < 1 - ratio) & (rel >= ctx.t("length_collapse.ratio"))
    mask = up if up[-1] else down
    run = trailing_streak(mask)
    if run < ctx.t("length_drift.persist"):
        return []
    start = extend_onset(mask, n - run, s)
    # Judged against the length's own noise: the shift from the first logs' level to the episode's must stand out
    # from the log-to-log scatter. A baseline of a few records, each of a few prompts, is itself noise, and a length
    # that swings between short and long answers moves its trailing mean by chance alone.
    after = v[start:]
    scatter = float(np.sqrt(np.mean(np.diff(v) ** 2) / 2.0))
    shift = abs(float(after.mean()) - float(v[:nb].mean()))
    if scatter > 0 and shift < ctx.t("length_drift.noise_z") * scatter * np.sqrt(1.0 / nb + 1.0 / after.size):
        return []
    onset = int(length.steps[start])
    current = float(sm[-1])
    direction = "grew" if up[-1] else "shrank"
    improving = _reward_trend(ctx, onset) == "improving"
    severity = INFO if improving else WARNING
    message = (
        f"{length.key} {direction} from {fmt(base)} (median of the first {nb} logs) to {fmt(current)} tokens "
        f"({current / base - 1:+.0%}; threshold +-{ratio:.0%}) since step {onset}, "
        + (
            "while reward improves: fine if the extra tokens are useful reasoning."
            if improving
            else "without a matching reward improvement."
        )
    )
    cfg = ctx.config
    if up[-1]:
        fixes = [
            "read long completions for repetition or padding (log_completions=True)",
            'prefer loss_type="dapo" or "dr_grpo"' + (' (now "grpo")' if cfg.raw.get("loss_type") == "grpo" else ""),
            "add get_repetition_penalty_reward or a length-aware reward (get_cosine_scaled_reward)",
            "set mask_truncated_completions=True if completions start hitting the cap",
        ]
    else:
        fixes = [
            "read short completions (log_completions=True)",
            "check whether a reward function pays for brevity; adjust reward_weights",
        ]
    return [
        make_finding(
            "length_drift",
            severity,
            onset,
            message,
            join_fixes(fixes),
            length.key,
            baseline=base,
            current=current,
            change=current / base - 1,
            threshold=ratio,
            reward_improving=improving,
        )
    ]
