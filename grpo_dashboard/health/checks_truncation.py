"""The truncation rule: completions that hit max_completion_length, read from completions/clipped_ratio or, on old
logs without it, from mean lengths at the cap."""

from __future__ import annotations

import numpy as np

from .checks_length import _mean_length, _reward_trend
from .findings import ERROR, INFO, WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .series import Series, aligned, corr, extend_onset, fmt, trailing_mean, trailing_streak


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
        return _pinned_batches(ctx, length)
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


def _pinned_lower_bound(ctx: Context, length: Series) -> tuple[np.ndarray, int, str] | None:
    """What an old log (no clipped_ratio) shows of the clipped ratio: a lower bound per log, 1.0 where the mean
    length is exactly the cap (no completion is longer than the cap, so a mean on it leaves none shorter) and 0 (at
    least none, really unknown) elsewhere; with the cap and how it was known. None when the cap is unknown.

    Without a config the cap is the log's largest mean length (or completions/max_length) when it is a whole number
    met exactly on truncation.pinned_logs logs or more: a mean of several lengths lands on the same maximum again and
    again only when a cap holds it there.
    """
    v = length.values
    cap = ctx.config.max_completion_length
    known = ""
    if not cap:
        max_len = ctx.frame.get("completions/max_length")
        top = float(max_len.finite().values.max()) if max_len is not None and max_len.finite().values.size else 0.0
        top = max(top, float(v.max()))
        at_top = int(np.count_nonzero(np.abs(v - top) <= 1e-9 * max(top, 1.0)))
        if top <= 0 or top != round(top) or at_top < int(ctx.t("truncation.pinned_logs")):
            return None
        cap, known = top, ", read from the log: its largest mean length, met exactly on several logs, never exceeded"
    bound = (np.abs(v - cap) <= 1e-9 * max(cap, 1.0)).astype(np.float64)
    return bound, int(cap), known


def _pinned_batches(ctx: Context, length: Series) -> list[Finding]:
    """Old logs: batches whose mean length sits exactly at the cap, isolated but recurring. Every completion of such a
    batch was cut, so their share of the trailing window is a lower bound of the clipped ratio there: a note, or a
    warning once that bound alone reaches truncation.warn (or a run of pinned logs warned), held until the note ends
    (the other logs' truncation is unknown, never judged as none)."""
    found = _pinned_lower_bound(ctx, length)
    if found is None:
        return []
    bound, cap, known = found
    window = int(ctx.t("truncation.note_window"))
    state = _pinned_states(ctx, bound, window)
    if state[-1] is None:
        return []
    severity = state[-1]
    steps, lb = length.steps[-window:], bound[-window:]
    pinned = int(np.count_nonzero(lb))
    mean = float(np.mean(lb))
    onset = int(steps[int(np.argmax(lb))])
    total = int(np.count_nonzero(bound))
    message = (
        f"{length.key} is exactly max_completion_length ({cap}{known}) on {pinned} of the last {lb.size} logs "
        f"({total} of {bound.size} in all): every completion of those batches was cut, so at least {mean:.0%} of "
        "the completions in that window stop at the cap without EOS (this log has no completions/clipped_ratio to "
        "show the share on the other logs)."
    )
    if severity == WARNING:
        message += (
            f" That bound reached the {ctx.t('truncation.warn'):g} warning level of the clipped ratio (or a run of "
            f"{int(ctx.t('truncation.persist'))} logs at the cap) in this episode."
        )
    evidence: dict[str, float | int | None] = {"pinned_logs": pinned, "pinned_total": total, "window": int(lb.size)}
    reward = ctx.frame.get("reward")
    if reward is not None:
        common, b, r = aligned(Series(length.key, steps, lb), reward.finite())
        if common.size and 0 < b.sum() < b.size:
            cut, rest = float(np.mean(r[b > 0])), float(np.mean(r[b == 0]))
            evidence["reward_cut"], evidence["reward_rest"] = cut, rest
            if cut < rest:
                message += f" Those batches score {fmt(cut)} on average against {fmt(rest)} on the others."
    return [
        make_finding(
            "truncation",
            severity,
            onset,
            message,
            _truncation_remedy(ctx),
            length.key,
            current=mean,
            cap=cap,
            kind="pinned_batches",
            lower_bound=True,
            **evidence,
        )
    ]


def _pinned_states(ctx: Context, bound: np.ndarray, window: int) -> list[str | None]:
    """Per log, the pinned-batches note's severity on the log up to there: the note where the trailing window holds
    truncation.pinned_logs pinned logs and at least truncation.note of them; a warning from where the window's share
    reaches truncation.warn or truncation.persist logs in a row are pinned, until the note ends. Judged from the
    start, so a share that hovers at the warning level does not flip the finding back and forth."""
    n = bound.size
    csum = np.concatenate(([0.0], np.cumsum(bound)))
    idx = np.arange(n)
    lo = np.maximum(0, idx + 1 - window)
    count, size = csum[idx + 1] - csum[lo], idx + 1 - lo
    share = count / size
    note = (size >= int(ctx.t("truncation.persist"))) & (count >= int(ctx.t("truncation.pinned_logs")))
    note &= share >= ctx.t("truncation.note")
    last_unpinned = np.maximum.accumulate(np.where(bound == 0, idx, -1))
    run = idx - last_unpinned
    enter = note & ((share >= ctx.t("truncation.warn")) | (run >= int(ctx.t("truncation.persist"))))
    states: list[str | None] = []
    warned = False
    for i in range(n):
        warned = bool(note[i] and (enter[i] or warned))
        states.append(WARNING if warned else INFO if note[i] else None)
    return states
