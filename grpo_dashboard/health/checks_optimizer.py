"""Rules about the optimizer step itself: non-finite values, gradient spikes, zero gradients, clipping."""

from __future__ import annotations

import math

import numpy as np

from .findings import ERROR, INFO, WARNING, Context, Finding, join_fixes, make_finding
from .series import Series, extend_onset, fmt, trailing_count_zero_share, trailing_mean, trailing_streak

NAN_KEYS = ("loss", "grad_norm", "entropy", "kl", "reward")
CLIP_REGION_KEYS = ("clip_ratio/region_mean", "clip_ratio", "cispo_clip_ratio")


def _update_finite_where(ctx: Context, hits: dict[str, dict]) -> bool:
    """Only logged statistics (not loss or grad_norm) went non-finite, and at every such log both loss and grad_norm
    were logged finite."""
    if {"loss", "grad_norm"} & set(hits):
        return False
    loss, grad = ctx.frame.get("loss"), ctx.frame.get("grad_norm")
    if loss is None or grad is None:
        return False
    for key in hits:
        series = ctx.frame.get(key)
        if series is None:
            return False
        for step in series.steps[~np.isfinite(series.values)]:
            for other in (loss, grad):
                at = np.flatnonzero(other.steps == step)
                if at.size == 0 or not np.isfinite(other.values[at[0]]):
                    return False
    return True


def check_nan(ctx: Context) -> list[Finding]:
    """Non-finite or None values of the core metrics: the run is numerically broken from that step."""
    hits: dict[str, dict] = {}
    for key in NAN_KEYS:
        if key == "kl" and ctx.config.beta == 0:
            continue
        series = ctx.frame.get(key)
        if series is None:
            continue
        bad = ~np.isfinite(series.values)
        count = int(bad.sum())
        if count < ctx.t("nan.min_count"):
            continue
        idx = np.flatnonzero(bad)
        hits[key] = {
            "first_step": int(series.steps[idx[0]]),
            "last_step": int(series.steps[idx[-1]]),
            "count": count,
            "of": len(series),
            "recovered": bool(np.isfinite(series.values[-1])),
        }
    if not hits:
        return []
    key = min(hits, key=lambda k: hits[k]["first_step"])
    onset = hits[key]["first_step"]
    parts = [f"{k} at {h['count']} of {h['of']} logs (first step {h['first_step']})" for k, h in hits.items()]
    recovered = all(h["recovered"] for h in hits.values())
    tail = (
        "Later values are finite again, but the updates made from the broken steps are in the weights."
        if recovered
        else "The latest values are still non-finite: the weights are likely corrupted."
    )
    cfg = ctx.config
    precision = ""
    if cfg.flag("fp16"):
        precision = "fp16 overflows easily: switch to bf16=True or fp32"
    elif cfg.flag("bf16"):
        precision = "if it persists, retry once in fp32 (bf16=False) to rule out precision"
    remedy = join_fixes(
        [
            f"{cfg.resume_advice(onset)} with a lower learning_rate{cfg.now('learning_rate')} and warmup "
            "(warmup_ratio=0.05)",
            precision,
            f"keep max_grad_norm{cfg.now('max_grad_norm')} at 1.0 or lower",
            "set logging_nan_inf_filter=False so transformers does not hide a NaN loss behind the running mean",
        ]
    )
    severity = ERROR
    isolated = set(hits) == {"grad_norm"} and hits["grad_norm"]["count"] <= 2 and recovered
    if isolated:
        # NaN gradients applied to the weights make every later loss NaN; finite logs after the bad step mean that
        # update was skipped or zeroed (an Inf norm clips the step to zero), so the run is not broken.
        severity = WARNING
        tail = (
            "Every later log is finite, with a finite loss: that update was skipped or zeroed, not written into the "
            "weights. Watch for recurrences; they point at overflowing activations or a learning rate at its edge."
        )
    elif recovered and _update_finite_where(ctx, hits):
        # A NaN in a logged statistic (kl, entropy) while the same logs' loss and gradient norm are finite: the loss
        # the optimizer stepped on was not NaN, so the weights did not take it; the statistic's own computation
        # failed (a 0/0 over an empty mask).
        severity = WARNING
        tail = (
            "At those logs loss and grad_norm are finite, so the update itself was not NaN and did not reach the "
            "weights: the metric's own computation failed there (a 0/0 over an empty mask), and it says nothing "
            "about those steps. Watch for recurrences."
        )
    message = f"Non-finite (NaN/Inf/None) values logged: {'; '.join(parts)}. {tail}"
    return [make_finding("nan", severity, onset, message, remedy, key, metrics=hits)]


def check_grad_spike(ctx: Context) -> list[Finding]:
    """grad_norm far above its trailing median; skipped where most steps have no gradient at all."""
    series = ctx.frame.get("grad_norm")
    if series is None:
        return []
    series = series.finite()
    v = series.values
    zero_frac = ctx.t("grad_spike.zero_frac")
    early = _early_explosion(ctx, series)
    if early is not None:
        return [early]
    if v.size < ctx.t("grad_spike.min_history") + 1 or np.mean(v == 0.0) >= zero_frac:
        return []
    history = int(ctx.t("grad_spike.history"))
    # Saturated stretches (every group at its maximum) leave gradients near zero; measured against that, an ordinary
    # step looks like a spike. The reference is therefore never below a fraction of the run's own typical level.
    floor = ctx.t("grad_spike.typical_floor") * _expanding_median(v)
    # The reference is at least the floor, so a log under `ratio` times the floor cannot be a spike: the windowed
    # reference is built only for the others (a log whose floor is not known yet is kept).
    with np.errstate(invalid="ignore"):
        rows = np.flatnonzero(~(v < ctx.t("grad_spike.ratio") * floor))
    if rows.size == 0:
        return []
    count, zero_share = trailing_count_zero_share(v, history)
    med, active = np.full(v.size, np.nan), np.zeros(v.size, dtype=np.int64)
    med[rows], active[rows] = _active_reference(ctx, series, history, rows)
    med = np.maximum(med, floor)
    valid = (count >= ctx.t("grad_spike.min_history")) & (zero_share < zero_frac) & (med > 0)
    valid &= active >= ctx.t("grad_spike.min_active")
    saturated = _saturated_reference(ctx, series.steps, int(ctx.t("grad_spike.history")))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(valid, v / np.where(med > 0, med, 1.0), 0.0)
        # Where most groups are saturated, a jump relative to the near-zero reference is the few groups that still
        # have spread; a norm that is large in absolute terms too, and far above the run's typical level, is not.
        huge = (v >= ctx.t("grad_spike.early_abs")) & (v >= ctx.t("grad_spike.ratio") * floor)
    ratio = np.where(saturated & ~huge, 0.0, ratio)
    spikes = np.flatnonzero(ratio >= ctx.t("grad_spike.ratio"))
    if spikes.size == 0:
        return []
    worst = spikes[np.argmax(ratio[spikes])]
    onset = int(series.steps[spikes[0]])
    max_ratio = float(ratio[worst])
    severity = WARNING if spikes.size >= 2 or max_ratio >= 3 * ctx.t("grad_spike.ratio") else INFO
    listed = ", ".join(str(int(s)) for s in series.steps[spikes[:8]]) + (" ..." if spikes.size > 8 else "")
    message = (
        f"grad_norm spiked to {fmt(v[worst])} at step {int(series.steps[worst])}, {max_ratio:.0f}x the median of "
        f"the preceding logs ({fmt(med[worst])}); {spikes.size} spike(s) in total at steps {listed}."
    )
    cfg = ctx.config
    remedy = (
        f"Lower learning_rate{cfg.now('learning_rate')} or add warmup (warmup_ratio=0.05); keep gradient clipping on "
        f"(max_grad_norm{cfg.now('max_grad_norm')}, clipping hides the spike from the update, not from the log); "
        "if spikes keep coming, inspect the completions at those steps (log_completions=True) for abnormal tokens "
        "and resume from the checkpoint before the first one."
    )
    return [
        make_finding(
            "grad_spike",
            severity,
            onset,
            message,
            remedy,
            series.key,
            count=int(spikes.size),
            max_ratio=max_ratio,
            max_value=float(v[worst]),
            max_step=int(series.steps[worst]),
            reference_median=float(med[worst]),
            threshold=ctx.t("grad_spike.ratio"),
            spike_steps=[int(s) for s in series.steps[spikes[:20]]],
        )
    ]


def _early_explosion(ctx: Context, series: Series) -> Finding | None:
    """Within the first logs, before any baseline: grad_norm orders of magnitude above the smallest earlier log
    (relative test) and large in absolute terms too, so a run that explodes at once is caught from its first records.
    """
    v, k = series.values, int(ctx.t("grad_spike.min_history"))
    ratio_t, abs_t = ctx.t("grad_spike.early_ratio"), ctx.t("grad_spike.early_abs")
    for i in range(1, min(k, v.size)):
        before = v[:i][v[:i] > 0]
        if before.size and v[i] >= abs_t and v[i] >= ratio_t * float(before.min()):
            ratio = float(v[i] / before.min())
            back = bool(v.size > i + 1 and v[-1] < abs_t and v[-1] < float(v[i]) / ratio_t**0.5)
            message = (
                f"grad_norm exploded to {fmt(float(v[i]))} at step {int(series.steps[i])}, {ratio:.0f}x its "
                f"smallest earlier log ({fmt(float(before.min()))}) within the first {i + 1} logs, before a baseline "
                f"exists (tests: >= {ratio_t:g}x and >= {abs_t:g})"
                + (
                    f"; it came back to {fmt(float(v[-1]))} by the latest log."
                    if back
                    else f"; latest {fmt(float(v[-1]))}."
                )
            )
            return make_finding(
                "grad_spike",
                WARNING if back else ERROR,
                int(series.steps[i]),
                message,
                f"Lower learning_rate{ctx.config.now('learning_rate')} and add warmup (warmup_ratio=0.05); keep "
                f"max_grad_norm{ctx.config.now('max_grad_norm')} on; check the model loads in the dtype it was "
                "trained in and that the first batches' completions are not garbage.",
                series.key,
                max_value=float(v[i]),
                max_step=int(series.steps[i]),
                max_ratio=ratio,
                early=True,
            )
    return None


def _quiet_logs(ctx: Context, steps: np.ndarray) -> np.ndarray:
    """Per grad_norm log: True where the batch had no reward spread in any group (reward_std 0, or
    frac_reward_zero_std 1), so no advantage and no policy gradient, only the KL term's or none."""
    quiet = np.zeros(steps.size, dtype=bool)
    for key, at_quiet in (("reward_std", lambda x: x <= 1e-12), ("frac_reward_zero_std", lambda x: x >= 1.0 - 1e-9)):
        series = ctx.frame.get(key)
        if series is None:
            continue
        series = series.finite()
        common, ig, _ = np.intersect1d(steps, series.steps, assume_unique=True, return_indices=True)
        quiet[ig] |= at_quiet(series.values[np.searchsorted(series.steps, common)])
    return quiet


def _active_reference(ctx: Context, series: Series, history: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the grad_norm logs at ``rows``: median and count of the preceding ``history`` logs that carried a gradient.

    A batch without advantage (every group's rewards equal, common with groups of 2, where a batch's advantages are
    +-1 or 0) has a gradient near zero; where such batches are half the window or more, a median over all of them is
    the near-zero level and every ordinary batch reads as a spike. Those logs are left out: the ones the reward
    spread shows (see _quiet_logs), and those below grad_spike.quiet_fraction of the window's level (when
    the spread is not logged). Leaving low values out only raises the reference, so no spike appears by it.
    """
    v, n = series.values, rows.size
    idx = rows[:, None] - history + np.arange(history)[None, :]
    inside = idx >= 0
    window = np.where(inside, v[np.maximum(idx, 0)], np.nan)
    quiet = np.where(inside, _quiet_logs(ctx, series.steps)[np.maximum(idx, 0)], False)
    # The level is the window's largest value but one, so that one earlier spike does not set it; a quantile would
    # be the quiet level itself where nine batches in ten had no advantage.
    held = np.count_nonzero(~np.isnan(window), axis=1)
    ordered = np.sort(window, axis=1)  # NaN sorts last
    level = ordered[np.arange(n), np.maximum(held - 2, 0)]
    with np.errstate(invalid="ignore"):
        quiet |= window < ctx.t("grad_spike.quiet_fraction") * level[:, None]
    kept = np.sort(np.where(quiet, np.nan, window), axis=1)  # np.nanmedian per row is slow on long logs
    count = np.count_nonzero(~np.isnan(kept), axis=1)
    at, mid = np.arange(n), np.maximum(count // 2, 0)
    upper = kept[at, np.minimum(mid, history - 1)]
    lower = kept[at, np.maximum(mid - 1, 0)]
    med = np.where(count % 2 == 1, upper, (lower + upper) / 2.0)
    return np.where(count > 0, med, np.nan), count


def _saturated_reference(ctx: Context, steps: np.ndarray, history: int) -> np.ndarray:
    """Per grad_norm log: True where most groups of the preceding logs had no reward spread.

    The gradient then scales with the few groups that still have spread, so a batch with more of them is a jump
    against a near-zero median, not a pathology.
    """
    frac = ctx.frame.get("frac_reward_zero_std")
    if frac is None:
        return np.zeros(steps.size, dtype=bool)
    frac = frac.finite()
    if frac.values.size == 0:
        return np.zeros(steps.size, dtype=bool)
    level = trailing_mean(frac.values, history)
    at = np.searchsorted(frac.steps, steps, side="left") - 1  # the frac logs strictly before each grad log
    return (at >= 0) & (level[np.maximum(at, 0)] >= ctx.t("zero_variance.warn"))


def _expanding_median(values: np.ndarray) -> np.ndarray:
    """For each index, the median of every earlier value (NaN for the first); never looks ahead."""
    n = values.size
    out = np.full(n, np.nan)
    if n < 2:
        return out
    # Exact running medians would be quadratic; medians of the prefixes ending at every stride-th index are enough
    # for a floor. Each is the middle of its prefix in a single sort of all values: ranks are bucketed, a table of
    # how many of each bucket every prefix holds finds the bucket of the middle rank, and a scan of that one bucket
    # the rank itself. The middle of the sorted prefix is np.median's own value (NaN sorts last, as it does).
    stride = max(1, n // 256)
    ends = np.arange(1, n, stride)
    order = np.argsort(values, kind="stable")
    ordered = values[order].astype(float)
    width = max(1, math.isqrt(n))
    buckets = -(-n // width)
    first = np.minimum((order - 1) // stride + 1, ends.size)  # per rank: the first prefix holding that value
    table = np.bincount(first * buckets + np.arange(n) // width, minlength=(ends.size + 1) * buckets)
    below = np.cumsum(np.cumsum(table.reshape(ends.size + 1, buckets)[: ends.size], axis=0), axis=1)
    rows = np.arange(ends.size)

    def select(k: np.ndarray) -> np.ndarray:
        """The k-th smallest value (0-based) of each prefix."""
        bucket = np.argmax(below > k[:, None], axis=1)
        before = np.where(bucket > 0, below[rows, bucket - 1], 0)
        ranks = np.minimum(bucket[:, None] * width + np.arange(width), n - 1)
        held = (order[ranks] < ends[:, None]) & (bucket[:, None] * width + np.arange(width) < n)
        return ordered[ranks[rows, np.argmax(np.cumsum(held, axis=1) > (k - before)[:, None], axis=1)]]

    mid = ends // 2
    upper = select(mid)
    median = np.where(ends % 2 == 1, upper, (select(np.maximum(mid - 1, 0)) + upper) / 2.0)
    median[np.cumsum(np.isnan(values))[ends - 1] > 0] = np.nan
    out[1:] = np.repeat(median, stride)[: n - 1]
    return out


def check_zero_gradient(ctx: Context) -> list[Finding]:
    """grad_norm exactly 0 on many recent logs: those optimizer steps did not move the policy."""
    series = ctx.frame.get("grad_norm")
    if series is None:
        return []
    series = series.finite()
    window = int(ctx.t("zero_gradient.window"))
    v, steps = series.values[-window:], series.steps[-window:]
    zero = v == 0.0
    n_zero = int(zero.sum())
    share = n_zero / max(v.size, 1)
    # On a log shorter than the window, exactly-zero gradients on a third of it is a state, not noise.
    # The latest log must be one of them: the first logs of many runs have no gradient yet (warmup, no spread).
    short = (
        3 <= series.values.size < window
        and bool(zero[-1])
        and n_zero >= 2
        and share >= ctx.t("zero_gradient.short_frac")
    )
    if not short and (n_zero < ctx.t("zero_gradient.min_zero") or share < ctx.t("zero_gradient.warn_frac")):
        return []
    severity = ERROR if share >= ctx.t("zero_gradient.error_frac") else WARNING
    onset = int(steps[np.argmax(zero)])
    message = (
        f"grad_norm is exactly 0 on {n_zero} of the last {v.size} logs ({share:.0%}, steps {int(steps[0])}-"
        f"{int(steps[-1])}): those steps do not update the policy."
    )
    cfg = ctx.config
    evidence: dict = {"zero_share": share, "zero_logs": n_zero, "window": int(v.size)}
    frac = ctx.frame.get("frac_reward_zero_std")
    in_window = None
    if frac is not None:
        sel = (frac.steps >= steps[0]) & np.isfinite(frac.values)
        if sel.any():
            in_window = float(frac.values[sel].mean())
            evidence["frac_reward_zero_std"] = in_window
    lr = ctx.frame.get("learning_rate")
    lr_zero = lr is not None and np.isfinite(lr.values[-1]) and lr.values[-1] == 0.0
    clipped = ctx.frame.get("completions/clipped_ratio")
    all_masked = False
    if cfg.flag("mask_truncated_completions") and clipped is not None:
        cut = clipped.finite()
        cut = cut.values[cut.steps >= steps[0]]
        all_masked = cut.size > 0 and float(cut.mean()) >= 0.95
    if all_masked:
        message += (
            " Practically every completion is truncated and mask_truncated_completions=True drops them from the loss:"
            " no token is trained on."
        )
        remedy = join_fixes(
            [
                f"raise max_completion_length{cfg.now('max_completion_length')}",
                "or set mask_truncated_completions=False while the policy cannot yet finish within the cap",
            ]
        )
    elif lr_zero:
        message += " learning_rate is 0 at the last log (the schedule has ended or warmup has not started)."
        remedy = "Check lr_scheduler_type, warmup_steps and max_steps: the learning rate schedule gives 0 here."
    elif in_window is not None and in_window >= 0.5:
        message += (
            f" frac_reward_zero_std averages {in_window:.2f} there: every completion in a group scored the same, "
            "so all advantages are 0 and so is the gradient."
        )
        remedy = (
            f"Give the groups reward spread: raise num_generations{cfg.now('num_generations')} and "
            f"temperature{cfg.now('temperature')}, mix in prompts the model sometimes (not always or never) solves, "
            "and check the reward functions on real completions (log_completions=True)."
        )
    else:
        remedy = (
            "Check that the policy's parameters are trainable (PEFT target_modules, frozen layers) and that the "
            f"learning_rate{cfg.now('learning_rate')} is non-zero; with exactly-zero advantages (identical rewards "
            f"in every group) raise num_generations{cfg.now('num_generations')} or temperature."
        )
    return [make_finding("zero_gradient", severity, onset, message, remedy, series.key, **evidence)]


def _on_policy_updates(ctx: Context, v: np.ndarray) -> np.ndarray:
    """Which logs are a generation's first, on-policy update, whose clip ratio is 0 by construction: exact zeros
    recurring every k-th log (k = num_iterations when the config gives it, else the zeros' own constant period,
    at least 2) with clipping between them. All False when the log shows no such pattern."""
    none = np.zeros(v.size, dtype=bool)
    zeros = np.flatnonzero(v == 0)
    if zeros.size < 2 or zeros.size == v.size:
        return none
    gaps = np.diff(zeros)
    k = ctx.config.number("num_iterations")
    period = int(k) if k is not None and k > 1 else int(gaps[0])
    if period < 2 or not np.all(gaps == period):
        return none
    if zeros.size < 3 and k is None:
        return none  # two zeros make no period
    mask = none.copy()
    mask[zeros] = True
    return mask


def check_clip_high(ctx: Context) -> list[Finding]:
    """A large share of tokens is clipped: steps are too large for the trust region (only when off-policy)."""
    region = ctx.frame.get(*CLIP_REGION_KEYS)
    if region is None:
        return []
    region = region.finite()
    if region.values.size == 0 or not np.any(region.values > 0):
        # Exactly 0 is what on-policy training (num_iterations=1, no vLLM) always logs; nothing to judge.
        return []
    on_policy = _on_policy_updates(ctx, region.values)
    if on_policy.any():
        # The first update of each generation is on-policy (its ratio is 1, TRL logs 0): it says nothing about the
        # updates that reuse the generation, and would break their streak and halve their mean.
        region = Series(region.key, region.steps[~on_policy], region.values[~on_policy])
    v = region.values
    s = ctx.smooth_n(v.size)
    sm = trailing_mean(v, s)
    persist = int(ctx.t("clip_high.persist"))
    warn_at, err_at = ctx.t("clip_high.warn"), ctx.t("clip_high.error")
    # A clip ratio that climbs far above its own warm-up level is the trust region starting to bind on every update,
    # well before the absolute levels (a run at 0.5 % that reaches 5-10 % is coming apart); a run that clips
    # the same share throughout (sequence-level ratios clip much more) is at its working point.
    nb = ctx.baseline_n(v.size)
    base = float(np.median(v[:nb]))
    rise_at = max(ctx.t("clip_high.rise_floor"), ctx.t("clip_high.rise_ratio") * base)
    post = np.arange(v.size) >= nb
    # Judged on each log as well as on the trailing mean: five logs in a row that each clip that much are already
    # sustained, and the mean would take as many logs again to catch up with them.
    w = max(trailing_streak((sm > warn_at) | (post & (sm > rise_at))), trailing_streak(post & (v > rise_at)))
    e = trailing_streak(sm > err_at)
    if e >= persist:
        severity = ERROR
    elif w >= persist:
        severity = WARNING
    else:
        return []
    start = extend_onset((v > warn_at) | (post & (v > rise_at)), v.size - max(w, e), s)
    cfg = ctx.config
    current = float(sm[-1])
    if current > warn_at:
        message = (
            f"{region.key} averages {current:.2f} over the last {s} logs (warning above {warn_at}, error above "
            f"{err_at}) since step {int(region.steps[start])}: that share of tokens falls outside the clip range, so "
            "the updates are larger than the trust region allows."
        )
    else:
        message = (
            f"{region.key} rose from {fmt(base)} (median of the first {nb} logs) to {fmt(current)} over the last {s} "
            f"logs ({f'{current / base:.0f}x' if base > 0 else 'from none'}; warning above "
            f"{ctx.t('clip_high.rise_ratio'):g}x and "
            f"{ctx.t('clip_high.rise_floor'):g}) since step {int(region.steps[start])}: the trust region binds on "
            "ever more tokens, so each update moves the policy further than the last (a clip ratio climbing from "
            "its working level often comes before a collapse)."
        )
    if cfg.off_policy is False:
        message += " (The config looks on-policy, so clipping comes from steps_per_generation or generation reuse.)"
    fixes = [f"lower learning_rate{cfg.now('learning_rate')}", f"use fewer num_iterations{cfg.now('num_iterations')}"]
    high, low = ctx.frame.get("clip_ratio/high_mean"), ctx.frame.get("clip_ratio/low_mean")
    evidence: dict = {"current": current, "window": s, "threshold": warn_at, "baseline": base, "rise_at": rise_at}
    if on_policy.any():
        message += (
            f" (Over the {v.size} updates that reuse a generation; the {int(on_policy.sum())} on-policy first "
            "updates log 0 and are left out.)"
        )
        evidence["on_policy_left_out"] = int(on_policy.sum())
    if high is not None and low is not None:
        h, lo = np.nanmean(high.values[-s:]), np.nanmean(low.values[-s:])
        evidence.update(high_mean=float(h), low_mean=float(lo))
        if h > 2 * lo:
            message += f" Mostly the upper clip (high_mean {h:.2f} vs low_mean {lo:.2f}): exploration is capped."
            fixes.insert(0, f"raise epsilon_high to 0.28{cfg.now('epsilon_high')} (DAPO clip-higher)")
        elif lo > 2 * h:
            message += f" Mostly the lower clip (low_mean {lo:.2f} vs high_mean {h:.2f}): probabilities drop fast."
    if cfg.flag("use_vllm"):
        fixes.append(
            "check the rollout/train mismatch (sampling/importance_sampling_ratio/*, "
            "vllm_importance_sampling_correction=True)"
        )
    fixes.append("or smaller steps_per_generation / generation_batch_size")
    remedy = join_fixes(fixes)
    return [make_finding("clip_high", severity, int(region.steps[start]), message, remedy, region.key, **evidence)]
