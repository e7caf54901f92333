"""Rules about KL to the reference: spikes, a high level, and KL that grows faster than the reward."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks_policy import level_change
from .findings import ERROR, INFO, WARNING, Context, Finding, join_fixes, make_finding
from .series import (
    Series,
    aligned,
    extend_onset,
    fmt,
    linear_fit,
    reward_ceiling_position,
    reward_range,
    trailing_mean,
    trailing_median,
    trailing_median_ref,
    trailing_streak,
)


def _kl_series(ctx: Context):
    """The finite kl series, or None when KL is not part of this run (beta=0, not logged, or all exactly 0)."""
    if ctx.config.beta == 0:
        return None
    series = ctx.frame.get("kl")
    if series is None:
        return None
    series = series.finite()
    if series.values.size == 0 or not np.any(series.values != 0):
        return None
    return series


def check_kl_spike(ctx: Context) -> list[Finding]:
    """kl jumps far above its reference level, including an explosion in the very first logs that later decays."""
    series = _kl_series(ctx)
    if series is None or series.values.size < 2:
        return []
    v = series.values
    spike, ref, early = _kl_spike_mask(ctx, v)
    idx = np.flatnonzero(spike)
    if idx.size == 0:
        return []
    grade = _grade_kl_spike(ctx, v, spike, ref)
    onset = int(series.steps[idx[0]])
    message = _kl_spike_message(ctx, series, grade, early)
    return [
        make_finding(
            "kl_spike",
            grade.severity,
            onset,
            message,
            join_fixes(_kl_spike_fixes(ctx, grade, onset)),
            series.key,
            max_value=float(v[grade.worst]),
            max_step=int(series.steps[grade.worst]),
            reference=grade.reference,
            max_ratio=grade.max_ratio,
            current=grade.now,
            recovered=grade.recovered,
            pending=grade.latest,
            count=int(idx.size),
            threshold=ctx.t("kl_spike.ratio"),
        )
    ]


def _kl_spike_mask(ctx: Context, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(which logs spike, each log's reference level, whether the first spike is an explosion of the very first logs
    measured against the level the run settles at)."""
    n = v.size
    ratio, floor = ctx.t("kl_spike.ratio"), ctx.t("kl_spike.abs_floor")
    zero_frac = ctx.t("kl_spike.zero_frac")
    med, count, zero_share = trailing_median_ref(v, int(ctx.t("kl_spike.history")))
    ref = med.copy()
    valid = (count >= 1) & (zero_share < zero_frac) & (med > 0)
    prev = np.concatenate(([np.nan], v[:-1]))
    # A spike is a jump: smooth exponential-looking growth from 0 is drift (kl_high), not a spike.
    with np.errstate(invalid="ignore"):
        jump = ~(prev > 0) | (v >= 2 * prev)
        spike = valid & (v > ratio * med) & (v - med >= floor) & jump
    k0 = min(int(ctx.t("kl_spike.start_window")), n)
    rest = v[k0:]
    if rest.size >= max(3, k0) and np.mean(rest == 0.0) < zero_frac:
        # Nothing precedes the first logs, so compare them with the level the run settles at afterwards.
        later = float(np.median(rest))
        start = (v[:k0] > ratio * later) & (v[:k0] - later >= floor)
        spike[:k0] |= start
        ref[:k0] = np.where(start, later, ref[:k0])
    idx = np.flatnonzero(spike)
    early = bool(idx.size) and idx[0] < k0 and ref[idx[0]] != med[idx[0]]
    return spike, ref, bool(early)


@dataclass
class _SpikeGrade:
    """How bad the spikes are now: the worst one, the level now, whether kl fell back, and the severity."""

    idx: np.ndarray  # the spiking logs
    worst: int
    max_ratio: float
    reference: float
    now: float
    latest: bool  # the latest log spikes or is above the spike limit: whether it falls back is not known yet
    recovered: bool
    pending: bool  # a high latest log after spikes that were all blips
    severity: str


def _grade_kl_spike(ctx: Context, v: np.ndarray, spike: np.ndarray, ref: np.ndarray) -> _SpikeGrade:
    """Severity of the spikes: an error while kl stays far above its reference, a note for blips while the reward
    rises (with a small beta), else a warning."""
    ratio = ctx.t("kl_spike.ratio")
    idx = np.flatnonzero(spike)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = v[idx] / np.maximum(ref[idx], 1e-12)
    worst = idx[np.argmax(ratios)]
    max_ratio = float(np.max(ratios))
    reference = float(ref[worst])
    s = ctx.smooth_n(v.size)
    # The median of the last logs and the latest one: a one-log spike inside that window must not read as the level.
    now = float(np.median(v[-s:]))
    # The latest log spiking, or above the spike limit: whether it falls back is not known yet.
    floor = ctx.t("kl_spike.abs_floor")
    # Above the spike limit means both the multiple and the absolute margin: 1e-5 over a 1e-7 median is no spike.
    high = (v > ratio * reference) & (v - reference >= floor)
    latest = bool(spike[-1]) or bool(high[-1])
    recovered = now <= ratio * reference and not latest
    if spike[-1]:
        high_ratio = float(ratios[-1])
    else:
        high_ratio = float(v[-1]) / max(reference, 1e-12) if latest else max_ratio
    # An error needs kl to stay up: the level now above the limit, or the last two logs both high. A single high
    # latest log is not known to stay (a warning until the next log says).
    sustained = (now > ratio * reference and now - reference >= floor) or (v.size >= 2 and bool(high[-2:].all()))
    severity = ERROR if high_ratio >= ctx.t("kl_spike.error_ratio") and not recovered and sustained else WARNING
    rising = _reward_rising(ctx)
    blips = recovered and _isolated_blips(v, idx, ratio * ref) and rising
    # A high latest log after spikes that were all blips: under the error multiple it is a note until the next log
    # shows whether it falls back (a warning then if it does not).
    earlier = idx[:-1] if spike[-1] else idx
    huge = high_ratio >= ctx.t("kl_spike.error_ratio")
    pending = latest and not huge and _isolated_blips(v, earlier, ratio * ref) and rising
    beta = ctx.config.beta
    if (blips or pending) and (beta is None or beta <= ctx.t("kl_spike.blip_beta")):
        severity = INFO
    return _SpikeGrade(idx, int(worst), max_ratio, reference, now, latest, recovered, pending, severity)


def _kl_spike_message(ctx: Context, series: Series, grade: _SpikeGrade, early: bool) -> str:
    """The spike, where kl is now, and for a note why it is one."""
    v, worst, now = series.values, grade.worst, grade.now
    ratio, floor = ctx.t("kl_spike.ratio"), ctx.t("kl_spike.abs_floor")
    message = (
        f"kl jumped to {fmt(float(v[worst]))} at step {int(series.steps[worst])}, {grade.max_ratio:.0f}x its "
        f"reference level {fmt(grade.reference)} (threshold {ratio:g}x and +{fmt(floor)})"
    )
    if early:
        message += "; the explosion is in the very first logs, before the run settled"
    if grade.latest:
        message += (
            "; that is the latest log, so whether it falls back is not known yet."
            if grade.idx[-1] == v.size - 1
            else f"; the latest log (step {int(series.steps[-1])}) is {fmt(float(v[-1]))}, above the spike limit, so "
            "whether it falls back is not known yet."
        )
    elif grade.recovered:
        message += f"; it came back down to {fmt(now)} by step {int(series.steps[-1])}."
    else:
        message += f"; it is still {fmt(now)} at step {int(series.steps[-1])}."
    if grade.idx.size > 1:
        message += f" {grade.idx.size} spiking logs in total."
    if grade.severity == INFO and grade.pending:
        message += (
            " A single log while the reward rises (any earlier spike fell back at once): a note for now, a warning "
            "if kl stays up at the next log."
        )
    elif grade.severity == INFO:
        message += (
            " Each spike lasts one or two logs and falls back on the next one while the reward rises: blips, not "
            "drift. Worth a look at those steps' completions, nothing to change unless they recur more often."
        )
    return message


def _kl_spike_fixes(ctx: Context, grade: _SpikeGrade, onset: int) -> list[str]:
    cfg = ctx.config
    fixes = [
        f"lower learning_rate{cfg.now('learning_rate')} and add warmup (warmup_ratio=0.05)",
        f"raise beta{cfg.now('beta')} to hold the policy near its reference",
        f"inspect the completions around step {onset} (log_completions=True) for abnormal tokens",
    ]
    if (cfg.number("num_iterations") or 1) > 1:
        fixes.append(f"use fewer num_iterations{cfg.now('num_iterations')}")
    if cfg.flag("use_vllm"):
        fixes.append("check the vLLM/trainer mismatch (sampling/sampling_logp_difference/max)")
    if not grade.recovered and grade.severity != INFO:
        fixes.insert(0, cfg.resume_advice(onset))
    return fixes


def _isolated_blips(v: np.ndarray, idx: np.ndarray, limit: np.ndarray) -> bool:
    """Every spike is a blip: within two logs of it kl falls back below its spike limit or to at most half the peak."""
    for i in idx:
        back = False
        for j in (i + 1, i + 2):
            if j < v.size and v[j] <= max(float(limit[i]), 0.5 * float(v[i:j].max())):
                back = True
                break
        if not back:
            return False
    return True


def _reward_rising(ctx: Context) -> bool:
    """The reward's fitted trend over the whole log rises significantly (t >= plateau.t_stat)."""
    reward = ctx.frame.get("reward")
    if reward is None:
        return False
    values = reward.finite().values
    slope, t = linear_fit(values)
    return slope > 0 and t >= ctx.t("plateau.t_stat")


def check_kl_high(ctx: Context) -> list[Finding]:
    """kl high from the first logs and flat (policy/reference mismatch), or grown far above its warm-up level."""
    series = _kl_series(ctx)
    if series is None or series.values.size < ctx.t("kl_high.min_points"):
        return []
    v, n = series.values, series.values.size
    nb = ctx.baseline_n(n)
    base = float(np.median(v[:nb]))
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    current = float(sm[-1])
    cfg = ctx.config
    if base >= ctx.t("kl_high.value"):
        flat = current <= ctx.t("kl_high.flat_ratio") * base
        severity = WARNING if base >= ctx.t("kl_high.warn_value") or not flat else INFO
        shape = "and is not growing" if flat else f"and has grown to {fmt(current)}"
        message = (
            f"kl has been high from the first logs (median of the first {nb}: {fmt(base)}, now {fmt(current)}) "
            f"{shape}: the policy does not match its reference model from the start. "
            + ("This is an offset, not a blow-up." if flat else "")
        ).strip()
        remedy = join_fixes(
            [
                "check that the reference is the same checkpoint, revision and dtype as the policy (a resumed policy "
                "with a fresh reference, a chat-template or tokenizer change, or PEFT adapters all show this)",
                "if the offset is intended, the KL term keeps pulling toward that reference: set "
                f"beta=0{cfg.now('beta')} or sync_ref_model=True",
            ]
        )
        return [
            make_finding(
                "kl_high",
                severity,
                int(series.steps[0]),
                message,
                remedy,
                series.key,
                baseline=base,
                current=current,
                flat=flat,
                threshold=ctx.t("kl_high.value"),
            )
        ]
    drift_value, drift_ratio = ctx.t("kl_high.drift_value"), ctx.t("kl_high.drift_ratio")
    post = np.arange(n) >= nb
    drift = post & (sm >= drift_value) & (sm >= drift_ratio * max(base, 1e-12))
    length = trailing_streak(drift)
    if length < min(int(ctx.t("kl_high.persist")), max(1, (n - nb) // 2)) or length == 0:
        return []
    start = extend_onset(post & (v >= drift_value), n - length, s)
    onset = int(series.steps[start])
    message = (
        f"kl drifted from {fmt(base)} (median of the first {nb} logs) to {fmt(current)} and has stayed above "
        f"{fmt(drift_value)} since step {onset}: the policy is far from its reference."
    )
    context = level_change(ctx, "reward", onset)
    if context:
        message += f" Same period: {context}."
    remedy = join_fixes(
        [
            f"raise beta{cfg.now('beta')} or lower learning_rate{cfg.now('learning_rate')}",
            "check completions for reward hacking (log_completions=True) and pick checkpoints on an eval metric",
        ]
    )
    return [
        make_finding(
            "kl_high",
            WARNING,
            onset,
            message,
            remedy,
            series.key,
            baseline=base,
            current=current,
            threshold=drift_value,
            ratio_threshold=drift_ratio,
        )
    ]


def check_kl_outpaces_reward(ctx: Context) -> list[Finding]:
    """Over the recent window kl rises much faster than reward: drift that buys nothing (over-optimisation)."""
    kl = _kl_series(ctx)
    reward = ctx.frame.get("reward")
    if kl is None or reward is None:
        return []
    steps, k, r = aligned(kl, reward.finite())
    window = int(ctx.t("kl_outpaces_reward.window"))
    # Never the warm-up: kl starts at 0 (the policy is its reference until the first update) and must rise while
    # the reward is still noise; over-optimisation is a rise that goes on after it.
    start = max(steps.size - window, ctx.baseline_n(steps.size))
    steps, k, r = steps[start:], k[start:], r[start:]
    if steps.size < ctx.t("kl_outpaces_reward.min_points"):
        return _relative_drift(ctx, kl, reward.finite())
    k_slope, k_t = linear_fit(k)
    r_slope, _ = linear_fit(r)
    span = steps.size - 1
    dk, dr = k_slope * span, r_slope * span
    ratio = dk / dr if dr > 0 else float("inf")
    if dk < ctx.t("kl_outpaces_reward.min_kl_rise") or k_t < 2.0 or ratio <= ctx.t("kl_outpaces_reward.ratio"):
        return _relative_drift(ctx, kl, reward.finite())
    onset = int(steps[0])
    rel = "while reward did not improve" if dr <= 0 else f"while reward rose only {fmt(dr)} ({ratio:.1f}x slower)"
    message = (
        f"Over the last {steps.size} logs (steps {onset}-{int(steps[-1])}) kl rose by {fmt(dk)} "
        f"({fmt(float(k[:5].mean()))} -> {fmt(float(k[-5:].mean()))}) {rel}: the policy moves away from its "
        "reference faster than it improves, the signature of reward over-optimisation (Gao et al. 2022)."
    )
    cfg = ctx.config
    remedy = join_fixes(
        [
            f"raise beta{cfg.now('beta')} or lower learning_rate{cfg.now('learning_rate')}",
            "read the highest-reward completions (log_completions=True) for exploits of the reward functions",
            "select checkpoints on an independent eval metric (metric_for_best_model)",
        ]
    )
    return [
        make_finding(
            "kl_outpaces_reward",
            WARNING,
            onset,
            message,
            remedy,
            kl.key,
            kl_rise=dk,
            reward_rise=dr,
            ratio=ratio,
            window=int(steps.size),
            threshold=ctx.t("kl_outpaces_reward.ratio"),
        )
    ]


def _relative_drift(ctx: Context, kl: Series, reward: Series) -> list[Finding]:
    """kl grew to many times its warm-up level and stayed there while the reward did not improve: small in absolute
    terms (kl_high's drift needs ~1 nat), but the policy keeps moving away from its reference without buying reward.

    An info: the reward holds, so nothing is being damaged now; it says the run has stopped paying for its updates
    (stop, or hold the policy with a larger beta) before the drift grows into kl_high or over-optimisation.
    """
    v, n = kl.values, kl.values.size
    if n < ctx.t("kl_outpaces_reward.min_points") or reward.values.size < ctx.t("kl_outpaces_reward.min_points"):
        return []
    nb = ctx.baseline_n(n)
    # kl logged before the first update is exactly 0 by construction (policy = reference): not a warm-up level
    lead = int(np.argmax(v != 0)) if np.any(v != 0) else n
    if lead >= n - nb:
        return []
    base = float(np.median(v[lead : lead + nb]))
    if base >= ctx.t("kl_high.value"):
        return []  # an offset from the first logs: kl_high's case
    w = max(ctx.smooth_n(n), 1)
    med = trailing_median(v, w)
    ratio_t, floor = ctx.t("kl_outpaces_reward.drift_ratio"), ctx.t("kl_outpaces_reward.drift_floor")
    grown = (np.arange(n) >= lead + nb) & (med >= ratio_t * max(base, 1e-12))
    run = trailing_streak(grown)
    if run < int(ctx.t("kl_outpaces_reward.persist")):
        return []
    recent = float(np.median(v[-max(int(ctx.t("kl_outpaces_reward.persist")), n // 5) :]))
    if recent < floor or recent >= ctx.t("kl_high.drift_value"):
        return []  # noise-level kl, or a drift large enough for kl_high to report
    onset_idx = n - run
    onset = int(kl.steps[onset_idx])
    before = reward.values[reward.steps < onset]
    after = reward.values[reward.steps >= onset]
    if before.size < 3 or after.size < 3:
        return []
    lo, hi = reward_range(reward.values)
    gain = float(np.mean(after) - np.median(before))
    if gain >= ctx.t("plateau.min_gain") * (hi - lo):
        return []  # the reward still improves: moving away from the reference is what buys it
    growth = recent / max(base, 1e-12)
    message = (
        f"kl grew {growth:.0f}x, from {fmt(base)} (median of the first {nb} logs"
        + (f", after {lead} log{'s' * (lead > 1)} of kl 0 before the first update" if lead else "")
        + f") to {fmt(recent)} (median of the "
        f"latest logs), and has stayed above {ratio_t:g}x its warm-up level since step {onset}, while the reward did "
        f"not improve ({fmt(float(np.median(before)))} before, {fmt(float(np.mean(after)))} since): the policy keeps "
        "moving away from its reference without buying reward."
    )
    position = reward_ceiling_position(ctx.frame, max(w, after.size))
    if position is not None and position >= ctx.t("plateau.ceiling"):
        message += f" The reward is at its ceiling ({position:.0%} of its range): the run has converged."
    message += (
        f" Still small in absolute terms (under {fmt(ctx.t('kl_high.drift_value'))} nats, not a blow-up): worth "
        "knowing before it grows."
    )
    cfg = ctx.config
    remedy = join_fixes(
        [
            f"stop here, or keep a checkpoint from before step {onset} if its reward is as good",
            f"raise beta{cfg.now('beta')} to hold the policy near its reference if training continues",
            "read recent completions (log_completions=True) for changes the reward does not see",
            "select checkpoints on an independent eval metric (metric_for_best_model)",
        ]
    )
    return [
        make_finding(
            "kl_outpaces_reward",
            INFO,
            onset,
            message,
            remedy,
            kl.key,
            kind="relative_drift",
            baseline=base,
            current=recent,
            growth=growth,
            reward_gain=gain,
            reward_ceiling_position=position,
            threshold=ratio_t,
        )
    ]
