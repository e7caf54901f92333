"""Rules about reward progress: gaming, length correlation, overfitting, forecast stop (drops: checks_drop;
plateaus: checks_plateau)."""

from __future__ import annotations

import re

import numpy as np

from .checks_length import MEAN_LENGTH_KEYS
from .findings import INFO, WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .forecast import fit_reward_curve, reward_series
from .series import (
    Series,
    aligned,
    corr,
    fmt,
    linear_fit,
    reward_range,
    trailing_mean,
    unit_position,
)

FORMAT_NAME = re.compile(r"format|tag|xml|think|style|struct|syntax|template|markdown|json|box", re.I)
# Shaping terms (length, repetition, KL-like penalties) are not the task's reward, whatever else is logged.
PENALTY_NAME = re.compile(r"penal|length|len_|overlong|repet|cosine|kl|entropy|cost", re.I)
ACCURACY_NAME = re.compile(r"acc|correct|answer|math|verif|exact|match|solution|pass|test|equal|gold|judge|code", re.I)


def _classify(ctx: Context, names: list[str]) -> tuple[list[str], list[str]]:
    """Split reward functions into format-like and accuracy-like, by config tags first, then by name. When a format
    reward is there but no function is named or tagged as the task's, the one other function (not a penalty) is the
    task's: a JSON reward next to a `gameplay_scores` is the same pair as format next to accuracy."""
    fmt_tagged, acc_tagged = ctx.config.names_in("format_rewards"), ctx.config.names_in("accuracy_rewards")
    formats = [n for n in names if n in fmt_tagged or (n not in acc_tagged and FORMAT_NAME.search(n))]
    accuracy = [n for n in names if n not in formats and (n in acc_tagged or ACCURACY_NAME.search(n))]
    if formats and not accuracy:
        rest = [n for n in names if n not in formats and not PENALTY_NAME.search(n)]
        accuracy = rest if len(rest) == 1 else []  # among several unnamed functions, which one is the task is a guess
    return formats, accuracy


def check_format_hacking(ctx: Context) -> list[Finding]:
    """A format-type reward saturates (or climbs) while the accuracy-type reward stays flat or falls."""
    functions = ctx.frame.reward_functions()
    formats, accuracy = _classify(ctx, list(functions))
    for f_name in formats:
        for a_name in accuracy:
            found = _format_hacking_pair(ctx, functions, f_name, a_name)
            if found is not None:
                return [found]
    return []


def _format_hacking_pair(
    ctx: Context, functions: dict[str, tuple[str, str | None]], f_name: str, a_name: str
) -> Finding | None:
    """The format reward ``f_name`` gains (or has held saturated) while the task reward ``a_name`` does not."""
    sat, min_gain = ctx.t("format_hacking.saturation"), ctx.t("format_hacking.min_gain")
    acc_flat, acc_drop = ctx.t("format_hacking.acc_flat"), ctx.t("format_hacking.acc_drop")
    f_series = ctx.frame.columns[functions[f_name][0]].finite()
    a_series = ctx.frame.columns[functions[a_name][0]].finite()
    steps, f, a = aligned(f_series, a_series)
    n = steps.size
    if n < 3:
        return None
    nb = ctx.baseline_n(n)
    s = ctx.smooth_n(n)
    f_sm, a_sm = trailing_mean(f, s), trailing_mean(a, s)
    f_base, a_base = float(np.median(f[:nb])), float(np.median(a[:nb]))
    f_lo, f_hi = reward_range(f)
    a_lo, a_hi = reward_range(a)
    f_gain, a_gain = f_sm - f_base, a_sm - a_base
    post = np.arange(n) >= nb
    saturating = (
        (f_sm >= f_lo + sat * (f_hi - f_lo))
        & (f_gain >= min_gain * (f_hi - f_lo))
        & (a_gain <= acc_flat * (a_hi - a_lo))
    )
    diverging = (
        (f_gain >= 2 * min_gain * (f_hi - f_lo))
        & (a_gain <= -acc_drop * max(a_base, 1e-9))
        & (-a_gain >= acc_flat * (a_hi - a_lo))
    )
    mask = post & (saturating | diverging)
    severity, run = judge_state(
        n - nb, 1, int(ctx.t("format_hacking.persist")), extreme=mask, extreme_severity=WARNING
    )
    start = n - run
    f_now, a_now = float(f_sm[-1]), float(a_sm[-1])
    if severity is None:
        # The task reward may have moved while the format was being learned (a score that needs valid
        # output first) and then stalled: judged on the stretch since the format saturated.
        std_key = functions[a_name][1]
        a_std = ctx.frame.get(std_key) if std_key else None
        std_values = a_std.finite().values if a_std is not None else np.empty(0)
        spread = float(np.mean(std_values)) if std_values.size else None
        stall = _stalled_since_saturation(ctx, f, a, f_sm, f_lo + sat * (f_hi - f_lo), spread, s)
        if stall is None:
            return None
        severity, (start, early, late) = WARNING, stall
        message = (
            f"rewards/{f_name} reached {sat:.0%} of its max at step {int(steps[start])} and has held there "
            f"for {n - start} logs (now {fmt(f_now)}), while rewards/{a_name} has not risen since "
            f"({fmt(early)} -> {fmt(late)} over the two halves of that stretch) and is far from solved (its "
            "groups still spread, or it sits low in its range): the policy learned the format, not the task."
        )
    else:
        verb = "fell" if a_now < a_base else "stayed at"
        message = (
            f"rewards/{f_name} rose {fmt(f_base)} -> {fmt(f_now)}"
            + (f" (saturated, >= {sat:.0%} of its max)" if saturating[-1] else "")
            + f" while rewards/{a_name} {verb} {fmt(a_base)} -> {fmt(a_now)} since step {int(steps[start])}: "
            "the policy is learning the format, not the task."
        )
    onset = int(steps[start])
    return make_finding(
        "format_hacking",
        severity,
        onset,
        message,
        _format_hacking_remedy(ctx, f_name),
        f_series.key,
        format_reward=f_name,
        accuracy_reward=a_name,
        format_baseline=f_base,
        format_now=f_now,
        accuracy_baseline=a_base,
        accuracy_now=a_now,
        accuracy_key=a_series.key,
    )


def _format_hacking_remedy(ctx: Context, f_name: str) -> str:
    cfg = ctx.config
    return join_fixes(
        [
            "read the highest-reward completions (log_completions=True)",
            f"lower {f_name}'s weight in reward_weights{cfg.now('reward_weights')} or pay it only with a "
            "correct answer",
            'use multi_objective_aggregation="normalize_then_sum" so the accuracy advantage is not drowned',
            'evaluate on held-out prompts (eval_strategy="steps") and select checkpoints on eval accuracy',
        ]
    )


def _stalled_since_saturation(
    ctx: Context, f: np.ndarray, a: np.ndarray, f_sm: np.ndarray, level: float, spread: float | None, s: int
) -> tuple[int, float, float] | None:
    """(index where the format reward saturated, the task reward's mean over the earlier and the later half since)
    when the format has held there for a long stretch (at least a third of the log and ``format_hacking.stall_logs``
    logs) while the task reward did not rise over it (its later half no higher than its earlier half beyond twice
    the standard error) and is far from solved; None otherwise, and None when the format was already there on the
    first logs (the policy formatted before this run: it learned no format here).

    Far from solved: a 0-1 reward (or a penalty <= 0) in the lower half of its range; a reward of unknown scale whose
    completions still spread widely within their groups (mean logged std, ``spread``, at least a quarter of the range
    its means span), which a solved task does not."""
    if float(np.median(f[: max(s, 1)])) >= level:
        return None  # formatted from the first logs: no format was learned in this run (a stall is plateau's)
    first = max(s - 1, 0)  # the first full smoothing window
    hit = np.flatnonzero(f_sm[first:] >= level)
    if hit.size == 0:
        return None
    k = max(int(hit[0]) + first - (s - 1), 0)  # where that window starts: the log the format got there
    m = f.size - k
    if m < max(ctx.t("format_hacking.stall_logs"), f.size / 3) or float(np.mean(f[k:])) < level:
        return None
    tail = a[k:]
    h = m // 2
    early, late = tail[:h], tail[h:]
    se = float(np.std(tail, ddof=1)) * np.sqrt(1 / early.size + 1 / late.size) if m > 2 else 0.0
    if float(np.mean(late)) - float(np.mean(early)) > 2 * se:
        return None
    position = unit_position(a, m)
    if position is not None:
        far = position <= 0.5
    else:
        far = spread is not None and spread >= 0.25 * float(np.ptp(a))
    if not far:
        return None
    return k, float(np.mean(early)), float(np.mean(late))


def _carried_by_one(r: np.ndarray, ln: np.ndarray, at: float) -> bool:
    """The correlation falls under ``at`` without one of the records: a single log (the first batch, one outlier)
    carries it, and two series that are otherwise flat do not move together."""
    keep = np.ones(r.size, dtype=bool)
    for i in range(r.size):
        keep[i] = False
        if abs(corr(r[keep], ln[keep])) < at:
            return True
        keep[i] = True
    return False


def check_reward_length_corr(ctx: Context) -> list[Finding]:
    """Reward moves with completion length, step to step and not only along a shared trend: length is paid."""
    reward, length = ctx.frame.get("reward"), ctx.frame.get(*MEAN_LENGTH_KEYS)
    if reward is None or length is None:
        return []
    steps, r, ln = aligned(reward.finite(), length.finite())
    window = int(ctx.t("reward_length_corr.window"))
    steps, r, ln = steps[-window:], r[-window:], ln[-window:]
    if steps.size < ctx.t("reward_length_corr.min_points"):
        return []
    level, change = corr(r, ln), corr(np.diff(r), np.diff(ln))
    if abs(level) < ctx.t("reward_length_corr.info_corr") or abs(change) < ctx.t("reward_length_corr.diff_corr"):
        return []
    if level * change < 0:
        return []
    if _carried_by_one(r, ln, ctx.t("reward_length_corr.info_corr")):
        return []
    drift = abs(float(np.mean(ln[-5:])) / max(float(np.mean(ln[:5])), 1e-9) - 1)
    warn = (
        abs(level) >= ctx.t("reward_length_corr.warn_corr")
        and abs(change) >= ctx.t("reward_length_corr.warn_diff_corr")
        and drift >= ctx.t("length_drift.ratio")
    )
    severity = WARNING if warn else INFO
    sign = "longer" if level > 0 else "shorter"
    how = "move together" if level > 0 else "move in opposite directions"
    message = (
        f"Over the last {steps.size} logs reward and {length.key} {how} (corr {level:+.2f} in level, "
        f"{change:+.2f} in step-to-step changes; length changed {drift:.0%}): {sign} completions earn more reward."
    )
    cfg = ctx.config
    if level > 0:
        fixes = [
            "read long high-reward completions for padding or repetition (log_completions=True)",
            'use loss_type="dr_grpo"' + (f' (now "{cfg.raw["loss_type"]}")' if cfg.raw.get("loss_type") else ""),
            "cap or normalise the length term (get_cosine_scaled_reward, get_soft_overlong_punishment)",
        ]
    else:
        fixes = ["check whether a reward pays for brevity or for skipping the reasoning; adjust reward_weights"]
    return [
        make_finding(
            "reward_length_corr",
            severity,
            int(steps[0]),
            message,
            join_fixes(fixes),
            "reward",
            corr=level,
            diff_corr=change,
            length_change=drift,
            window=int(steps.size),
        )
    ]


def _eval_series(ctx: Context) -> Series | None:
    functions = ctx.frame.reward_functions(prefix="eval_")
    _, accuracy = _classify(ctx, list(functions))
    for key in [functions[a][0] for a in accuracy] + ["eval_reward"] + [m for m, _ in functions.values()]:
        series = ctx.frame.get(key)
        if series is not None and series.finite().values.size:
            return series.finite()
    return None


def check_overfitting(ctx: Context) -> list[Finding]:
    """Train reward keeps rising while the eval reward falls over the last evaluations."""
    ev, train = _eval_series(ctx), ctx.frame.get("reward")
    if ev is None or train is None or ev.values.size < ctx.t("overfitting.min_evals"):
        return []
    train = train.finite()
    e = ev.values
    peak = int(np.argmax(e))
    after = e.size - 1 - peak
    lo, hi = reward_range(e)
    drop = float(e[peak] - e[-1])
    if after < ctx.t("overfitting.min_evals") - 1 or drop < ctx.t("overfitting.min_drop") * max(1.0, hi - lo):
        return []
    if linear_fit(e[peak:])[0] >= 0:
        return []
    at_peak = train.values[train.steps <= ev.steps[peak]][-5:]
    at_end = train.values[train.steps <= ev.steps[-1]][-5:]
    if at_peak.size == 0 or at_end.size == 0 or float(np.mean(at_end)) <= float(np.mean(at_peak)):
        return []
    onset = int(ev.steps[peak + 1])
    message = (
        f"{ev.key} fell from {fmt(float(e[peak]))} (step {int(ev.steps[peak])}) to {fmt(float(e[-1]))} over the "
        f"{after} evaluations since, while the train reward rose {fmt(float(np.mean(at_peak)))} -> "
        f"{fmt(float(np.mean(at_end)))}: the policy is overfitting the training prompts."
    )
    cfg = ctx.config
    remedy = join_fixes(
        [
            f"keep the checkpoint from step {int(ev.steps[peak])} (load_best_model_at_end=True, "
            f'metric_for_best_model="{ev.key}")',
            "add or refresh training prompts",
            f"train fewer epochs (num_train_epochs{cfg.now('num_train_epochs')})",
            f"raise temperature{cfg.now('temperature')} for more diverse samples",
        ]
    )
    return [
        make_finding(
            "overfitting",
            WARNING,
            onset,
            message,
            remedy,
            ev.key,
            eval_peak=float(e[peak]),
            eval_peak_step=int(ev.steps[peak]),
            eval_now=float(e[-1]),
            train_at_peak=float(np.mean(at_peak)),
            train_now=float(np.mean(at_end)),
            evals_after=after,
        )
    ]


def check_forecast_stop(ctx: Context) -> list[Finding]:
    """The fitted reward curve says the rest of the run (to max_steps) buys almost nothing: an info to stop."""
    max_steps = ctx.config.number("max_steps")
    series, source = reward_series(ctx.frame)
    if not max_steps or series is None or series.values.size < ctx.t("forecast_stop.min_points"):
        return []
    now = int(series.steps[-1])
    if now >= max_steps:
        return []
    curve, _ = fit_reward_curve(series.steps, series.values)
    if curve is None:
        return []
    lo, hi = reward_range(series.values)
    gain = float(curve(float(max_steps)) - curve(float(now)))
    if gain >= ctx.t("forecast_stop.min_gain") * (hi - lo):
        return []
    left = int(max_steps) - now
    message = (
        f"The {curve.model} fit of the {source} reward (held-out error {fmt(curve.holdout_rmse)}) forecasts "
        f"{gain:+.3g} more by max_steps {int(max_steps)}, under {ctx.t('forecast_stop.min_gain'):.0%} of the reward's "
        f"range, plateau {fmt(curve.plateau)}: continuing for the remaining {left} steps is not worth it."
    )
    remedy = join_fixes(
        [
            ctx.config.stop_advice(now),
            "or change what limits the run (harder prompts, a graded reward, a larger num_generations)",
            "`python -m grpo_dashboard forecast LOG` prints the band and the cost saved",
        ]
    )
    return [
        make_finding(
            "forecast_stop",
            INFO,
            now,
            message,
            remedy,
            series.key,
            forecast_gain=gain,
            plateau=curve.plateau,
            model=curve.model,
            steps_left=left,
        )
    ]
