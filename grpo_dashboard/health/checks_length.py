"""Rules about completion length: truncation at the cap, collapse to short answers, slow drift."""

from __future__ import annotations

import numpy as np

from .findings import ERROR, INFO, WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .series import Series, aligned, corr, extend_onset, fmt, linear_fit, reward_range, trailing_mean, trailing_streak

MEAN_LENGTH_KEYS = ("completions/mean_length", "completion_length", "completions/mean_length/mean")


def _mean_length(ctx: Context) -> Series | None:
    series = ctx.frame.get(*MEAN_LENGTH_KEYS)
    return None if series is None else series.finite()


def _reward_trend(ctx: Context, since_step: int, min_logs: int = 10) -> str | None:
    """``"improving"``, ``"stuck"`` (gain under plateau.min_gain of its range and no significant rise) or None (too
    little data, or slow learning) for reward from ``since_step`` on.

    Uses eval_reward when there are enough evaluations, else the train reward; the gain is measured against the
    logs before ``since_step`` when there are some, else within the episode itself. A rise whose fitted slope has a
    t-statistic of at least plateau.t_stat and a fitted gain of at least plateau.min_gain counts as improving.
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
            gain = float(np.mean(after[-10:]) - np.mean(before[:20]))
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


def _longest_streak(mask: np.ndarray) -> int:
    """Length of the longest run of True values in ``mask``."""
    if not mask.any():
        return 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return int((edges[1::2] - edges[::2]).max())


def _truncation_remedy(ctx: Context) -> str:
    cfg = ctx.config
    cap = cfg.max_completion_length
    fixes = [
        f"raise max_completion_length{cfg.now('max_completion_length')}"
        + (f", e.g. to {int(cap * 2)}" if cap else ""),
        "check that generations can end (the chat template and tokenizer emit the EOS token)",
    ]
    if not cfg.flag("mask_truncated_completions"):
        fixes.append("set mask_truncated_completions=True so truncated completions do not add reward noise")
    fixes.append("or add a soft overlong penalty (trl.rewards.get_soft_overlong_punishment)")
    return join_fixes(fixes)


def check_truncation(ctx: Context) -> list[Finding]:
    """Completions hit max_completion_length; in old logs without clipped_ratio, lengths pinned at the cap."""
    clipped = ctx.frame.get("completions/clipped_ratio")
    if clipped is None:
        return _pinned_length(ctx)
    clipped = clipped.finite()
    n = clipped.values.size
    if n == 0:
        return []
    s = ctx.smooth_n(n)
    sm = trailing_mean(clipped.values, s)
    severity, length = _truncation_state(ctx, clipped.values, sm)
    if severity is None:
        return _steady_truncation(ctx, clipped)
    return [_truncation_finding(ctx, clipped, sm, s, severity, length)]


def _truncation_state(ctx: Context, v: np.ndarray, sm: np.ndarray) -> tuple[str | None, int]:
    """Severity of the truncation on the latest logs (raw ``v``, smoothed ``sm``) and how many logs it spans."""
    n = v.size
    persist = int(ctx.t("truncation.persist"))
    severity, length = judge_state(
        n - 1,
        persist,
        persist,
        sm > ctx.t("truncation.warn"),
        sm > ctx.t("truncation.error"),
        v >= ctx.t("truncation.extreme"),
        # One batch of 16 can come out all truncated by chance; on a short log every record must be.
        extreme_required=min(persist, n),
    )
    nearly = trailing_streak(v >= ctx.t("truncation.nearly_all"))
    if severity is None and n < persist and nearly >= max(2, n // 2):
        # A short log whose latest logs (each a whole batch) are practically all cut: a state, no window needed.
        severity, length = ERROR, nearly
    if severity is None and n < persist and bool(np.all(v > ctx.t("truncation.warn"))):
        # Too few logs for the window, but every one cuts a large share: a note, since a short log may be all
        # the user has; the window decides whether it becomes a warning.
        severity, length = INFO, n
    return severity, length


def _truncation_finding(ctx: Context, clipped: Series, sm: np.ndarray, s: int, severity: str, length: int) -> Finding:
    """The truncation finding of an episode ``length`` logs long: onset, what it does, graded by the reward trend."""
    v, n = clipped.values, clipped.values.size
    start = extend_onset(v > ctx.t("truncation.warn"), n - length, s)
    onset = int(clipped.steps[start])
    current = float(sm[-1])
    cap = ctx.config.max_completion_length
    message = (
        f"completions/clipped_ratio is {current:.2f} (mean of the last {s} logs; warning above "
        f"{ctx.t('truncation.warn')}, error above {ctx.t('truncation.error')}) since step {onset}: "
        f"{current:.0%} of completions stop at max_completion_length{f' ({int(cap)})' if cap else ''} without EOS."
    )
    terminated = ctx.frame.get("completions/mean_terminated_length")
    recent = terminated.finite().values[-s:] if terminated is not None else np.empty(0)
    none_end = bool(recent.size) and not recent.any()
    if none_end:
        message += " No completion terminates at all (mean_terminated_length is 0), so rewards see cut-off text."
    if ctx.config.flag("mask_truncated_completions") and current >= 0.5:
        message += (
            " With mask_truncated_completions=True these completions are dropped from the loss, so most steps "
            "train on little or nothing."
        )
    improving = None
    if not (none_end or current >= ctx.t("truncation.extreme")):
        severity, improving, note = _grade_partial_truncation(ctx, v, start, onset, current, severity)
        message += note
    return make_finding(
        "truncation",
        severity,
        onset,
        message,
        _truncation_remedy(ctx),
        clipped.key,
        current=current,
        window=s,
        warn=ctx.t("truncation.warn"),
        error=ctx.t("truncation.error"),
        reward_improving=improving,
    )


def _grade_partial_truncation(
    ctx: Context, v: np.ndarray, start: int, onset: int, current: float, severity: str
) -> tuple[str, str | None, str]:
    """(severity, reward trend, note for the message) of partial truncation, judged by what the reward does.

    Partial truncation pages only once learning is shown to be stuck; a task whose answers need no end (or a cap set
    on purpose) keeps learning, which makes it a note. Truncation present from the first logs is how the task and cap
    were set up, not a change in the policy: a note while the log is too young for a reward trend. Truncation that
    grew mid-run (lengths reaching the cap) warns at once; an episode that already had `persist` logs in a row with
    every completion cut is never demoted.
    """
    n = v.size
    min_logs = int(ctx.t("plateau.min_points"))
    improving = _reward_trend(ctx, onset, min_logs=min_logs)
    from_start = float(np.median(v[: ctx.baseline_n(n)])) > ctx.t("truncation.warn")
    was_total = _longest_streak(v[start:] >= ctx.t("truncation.extreme")) >= int(ctx.t("truncation.persist"))
    starved = bool(ctx.config.flag("mask_truncated_completions")) and current >= 0.5
    if starved or was_total:
        return severity, improving, ""  # training on (almost) nothing, or on cut text only: whatever the reward does
    if improving == "improving":
        return INFO, improving, " Reward still improves, so the cap may be intended."
    if improving is None and from_start and n < min_logs:
        return (
            INFO,
            improving,
            (
                f" It has been so since the first logs; whether it holds learning back shows once the reward "
                f"trend is known ({min_logs} logs): a warning then unless the reward improves."
            ),
        )
    if improving is None and severity == ERROR:
        return WARNING, improving, ""
    if improving == "stuck":
        return severity, improving, " Reward is not improving."
    return severity, improving, ""


def _pinned_length(ctx: Context) -> list[Finding]:
    """Old logs without clipped_ratio: the mean completion length pinned at the cap (known or inferred)."""
    length = _mean_length(ctx)
    if length is None or length.values.size < 2:
        return []
    v, n = length.values, length.values.size
    cap = ctx.config.max_completion_length
    max_len = ctx.frame.get("completions/max_length")
    persist = int(ctx.t("truncation.persist"))
    if cap:
        pinned = v >= ctx.t("truncation.cap_fraction") * cap
        severity, run = judge_state(n - 1, persist, persist, extreme=pinned)
        how = f"max_completion_length ({int(cap)})"
    else:
        # No cap in the config: a mean that sits exactly on the run's largest (whole-number) length is the cap.
        top = float(max_len.finite().values.max()) if max_len is not None else float(v.max())
        pinned = (np.abs(v - top) <= 1e-9 * max(top, 1.0)) & (top == np.round(top)) & (top > 0)
        severity, run = judge_state(n - 1, persist, persist, extreme=pinned, extreme_severity=WARNING)
        if severity is not None and run < min(3, n):
            severity = None
        how = f"{int(top)} tokens, which looks like max_completion_length"
    if severity is None:
        return []
    start = n - run
    message = (
        f"{length.key} is pinned at {fmt(float(v[-1]))} since step {int(length.steps[start])} ({run} logs), the cap "
        f"of {how}: practically every completion is truncated (this log has no completions/clipped_ratio)."
    )
    return [
        make_finding(
            "truncation",
            severity,
            int(length.steps[start]),
            message,
            _truncation_remedy(ctx),
            length.key,
            mean_length=float(v[-1]),
            cap=cap,
            pinned_logs=run,
        )
    ]


def _inferred_cap(ctx: Context, clipped: Series) -> tuple[int | None, str]:
    """max_completion_length from the config, else from completions/max_length (a batch that cuts a completion logs
    the cap as its longest, so nearly every cut batch shows the same whole number), with how it was known."""
    cap = ctx.config.max_completion_length
    if cap:
        return int(cap), ""
    longest = ctx.frame.get("completions/max_length")
    if longest is None:
        return None, ""
    longest = longest.finite()
    at_cut = longest.values[np.isin(longest.steps, clipped.steps[clipped.values > 0])]
    if at_cut.size < 2:
        return None, ""
    top = float(at_cut.max())
    if top != round(top) or np.mean(at_cut == top) < 0.9:
        return None, ""
    return int(top), ", read from completions/max_length on the cut batches"


def _steady_truncation(ctx: Context, clipped: Series) -> list[Finding]:
    """Partial truncation under the warning level that holds log after log: an info with the cap and the share."""
    window = int(ctx.t("truncation.note_window"))
    steps, v = clipped.steps[-window:], clipped.values[-window:]
    if v.size < int(ctx.t("truncation.persist")):
        return []
    # Steady: the window's mean and most of its logs (not one bad batch) cut a noticeable share.
    mean, cut = float(np.mean(v)), v >= ctx.t("truncation.note")
    if mean < ctx.t("truncation.note") or float(np.mean(cut)) < ctx.t("truncation.note_logs"):
        return []
    cap, known = _inferred_cap(ctx, clipped)
    worst = int(np.argmax(v))
    onset = int(steps[int(np.argmax(cut))])
    at = f"max_completion_length ({cap}{known})" if cap else "max_completion_length"
    message = (
        f"completions are cut at {at}: {mean:.0%} of them on average over the last {v.size} logs, at least "
        f"{ctx.t('truncation.note'):.0%} on {int(cut.sum())} of those logs, up to {float(v[worst]):.0%} (step "
        f"{int(steps[worst])}). Under the {ctx.t('truncation.warn'):g} warning level, but steady: those completions "
        "get no EOS and are scored on cut-off text."
    )
    evidence: dict[str, float | int | None] = {"mean": mean, "cut_logs": int(cut.sum()), "window": int(v.size)}
    reward = ctx.frame.get("reward")
    if reward is not None:
        common, c, r = aligned(Series(clipped.key, steps, v), reward.finite())
        if common.size >= 5:
            rho = corr(c, r)
            evidence["reward_corr"] = rho
            if rho <= -0.3:
                message += f" The most-cut batches score lowest (corr {rho:+.2f} with reward): the cap costs reward."
    return [
        make_finding(
            "truncation",
            INFO,
            onset,
            message,
            _truncation_remedy(ctx),
            clipped.key,
            current=mean,
            max_value=float(v[worst]),
            cap=cap,
            kind="steady",
            **evidence,
        )
    ]


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
    if nb < 3:
        # A baseline of one or two logs is itself noise: only an unmistakable state counts (a few tokens, or a
        # tenth of what the first logs wrote).
        few = ctx.t("length_collapse.few_tokens")
        if not (v[-1] <= few or v[-1] <= ctx.t("length_collapse.thin_baseline_ratio") * base):
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
