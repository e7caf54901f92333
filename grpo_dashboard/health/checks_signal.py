"""Rules about the learning signal itself: groups without reward spread, constant rewards, identical completions."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from .checks_policy import check_entropy_collapse, entropy_series
from .findings import ERROR, INFO, WARNING, Context, Finding, join_fixes, judge_state, make_finding
from .series import Series, extend_onset, fmt, mostly, reward_range, short_required, trailing_mean, trailing_streak


def _frac_zero_std(ctx: Context) -> tuple[Series, bool] | None:
    """frac_reward_zero_std, or for older TRL a 0/1 stand-in from reward_std == 0 (every group identical)."""
    frac = ctx.frame.get("frac_reward_zero_std")
    if frac is not None:
        return frac.finite(), False
    std = ctx.frame.get("reward_std")
    if std is None:
        return None
    std = std.finite()
    return Series("reward_std", std.steps, (std.values <= ctx.t("flat_reward.std_atol")).astype(float)), True


def check_zero_variance(ctx: Context) -> list[Finding]:
    """Most groups score every completion the same: zero advantage, no gradient. Says saturated or starved."""
    found = _frac_zero_std(ctx)
    if found is None:
        return []
    frac, inferred = found
    v, n = frac.values, frac.values.size
    if n == 0:
        return []
    s = ctx.smooth_n(n)
    sm = trailing_mean(v, s)
    warn_t, err_t = ctx.t("zero_variance.warn"), ctx.t("zero_variance.error")
    severity, run = _zero_variance_state(ctx, v, sm)
    if severity is None:
        return []
    start = extend_onset(v > warn_t, n - run, s)
    onset = int(frac.steps[start])
    current = float(v[-1]) if s == 1 else float(sm[-1])
    what = (
        "reward_std is exactly 0 (every completion scored the same)"
        if inferred
        else (
            f"frac_reward_zero_std is {current:.2f}: {current:.0%} of completions are in groups where all "
            "scored the same"
        )
    )
    message = f"Since step {onset} {what}, so their advantages are 0 and they teach nothing."
    evidence: dict[str, Any] = {"current": current, "window": s, "warn": warn_t, "error": err_t, "inferred": inferred}
    cause, level, collapse_step = _zero_variance_cause(ctx, onset, evidence)
    # Saturation reached late, after the reward rose to it, is the run having learned the data: converged.
    converged = cause == "saturated" and float(np.median(v[: ctx.baseline_n(n)])) <= warn_t and _rose(ctx, onset)
    if converged and severity == WARNING:
        severity = INFO
    explained, fixes = _zero_variance_explanation(ctx, "converged" if converged else cause, level, collapse_step)
    message += explained
    g = ctx.config.number("num_generations")
    if g and level is not None and 0 <= level <= 1:
        expected = level**g + (1 - level) ** g
        evidence["expected_for_binary_reward"] = expected
        message += f" (For a 0/1 reward at this pass rate with {int(g)} generations about {expected:.0%} is expected.)"
    return [make_finding("zero_variance", severity, onset, message, join_fixes(fixes), frac.key, **evidence)]


def _zero_variance_state(ctx: Context, v: np.ndarray, sm: np.ndarray) -> tuple[str | None, int]:
    """Severity of spread-less groups on the latest logs (raw ``v``, smoothed ``sm``) and how many logs it spans."""
    n = v.size
    warn_t, err_t = ctx.t("zero_variance.warn"), ctx.t("zero_variance.error")
    error_persist = int(ctx.t("zero_variance.error_persist"))
    severity, run = judge_state(
        n - 1,
        int(ctx.t("zero_variance.warn_persist")),
        error_persist,
        sm > warn_t,
        sm > err_t,
        v >= ctx.t("zero_variance.extreme"),
        # One batch without spread after batches with it is chance (a single prompt per step, an easy prompt), not a
        # state: an unmistakable one needs two logs in a row, unless it is the whole log.
        extreme_required=max(min(2, n), short_required(n - 1, error_persist)),
    )
    share = ctx.t("zero_variance.short_share")
    if severity is None and 3 <= n < int(ctx.t("zero_variance.warn_persist")) and mostly(v > warn_t, share):
        # A short log with most groups spread-less on (nearly) every log: a state, no persistence window needed; one
        # batch that happened to have spread neither hides it nor ends it.
        severity, run = (ERROR if mostly(v > err_t, share) else WARNING), n - int(np.argmax(v > warn_t))
    if severity is not None and n < 3:
        # One or two logs show the groups' spread, not yet a state of the run: a note until a third log says.
        severity = INFO
    return severity, run


def _zero_variance_cause(ctx: Context, onset: int, evidence: dict[str, Any]) -> tuple[str, float | None, int | None]:
    """Why the groups have no spread since ``onset``: ``"collapse"`` (of entropy; with its step), ``"saturated"`` or
    ``"starved"`` (reward near its maximum or minimum; with that level), ``"deterministic"`` or ``"mixed"``.
    Adds what it read to ``evidence``."""
    cause, level = "mixed", None
    reward = ctx.frame.get("reward")
    if reward is not None:
        r = reward.finite()
        sel = r.values[r.steps >= onset]
        if sel.size:
            lo, hi = reward_range(r.values)
            level = float(np.mean(sel))
            position = (level - lo) / (hi - lo)
            evidence.update(reward_level=level, reward_position=position)
            if position >= ctx.t("zero_variance.saturated"):
                cause = "saturated"
            elif position <= ctx.t("zero_variance.starved"):
                cause = "starved"
    collapse = [f for f in check_entropy_collapse(ctx) if f.severity != INFO]
    entropy = entropy_series(ctx)
    if collapse:
        # A policy that collapsed produces identical completions: that, not easy prompts, explains the zero spread.
        evidence.update(entropy_collapse_step=collapse[0].step, entropy=collapse[0].evidence.get("current"))
        return "collapse", level, collapse[0].step
    if entropy is not None:
        e = entropy.values
        if e.size >= 2 and e[-1] < 0.1 * max(float(np.median(e[: max(1, e.size // 4)])), 1e-9):
            cause = "deterministic" if cause == "mixed" else cause
            evidence["entropy"] = float(e[-1])
    return cause, level, None


def _zero_variance_explanation(
    ctx: Context, cause: str, level: float | None, collapse_step: int | None
) -> tuple[str, list[str]]:
    """What the message adds for ``cause`` (``_zero_variance_cause``, or ``"converged"``) and the fixes."""
    cfg = ctx.config
    more = f"raise num_generations{cfg.now('num_generations')} and temperature{cfg.now('temperature')}"
    if cause == "collapse":
        return (
            f" This follows the entropy collapse from step {collapse_step}: the policy produces the same "
            "completion for every sample of a prompt, so the groups have no spread to learn from."
        ), [
            f"fix the collapse first (see entropy_collapse): lower learning_rate{cfg.now('learning_rate')}",
            cfg.resume_advice(collapse_step) if collapse_step is not None else "resume from before the collapse",
            more,
        ]
    if cause == "converged":
        return (
            f" The reward rose to near its maximum ({fmt(level)}) before this: the run has converged on these prompts."
            " Stop here, or make the task harder to keep learning."
        ), [
            f"{cfg.stop_advice(ctx.frame.last_step() or 0)} (it is as good as it gets on this data)",
            "or continue on harder prompts / a curriculum; drop prompts the model always solves (filter by pass rate)",
        ]
    if cause == "saturated":
        return (
            f" Groups are saturated: the reward is near its maximum ({fmt(level)}), the prompts are too easy now."
        ), [
            "use harder prompts or a curriculum; drop prompts the model always solves (filter by pass rate)",
            "or stop here: the run has converged on this data",
            more,
        ]
    if cause == "starved":
        return (
            f" Groups are starved: the reward is near its minimum ({fmt(level)}), the task is too hard or the "
            "reward never fires."
        ), [
            "check the reward functions on real completions (log_completions=True)",
            "start from easier prompts or an SFT'd model; give partial credit (a graded reward)",
            more,
        ]
    if cause == "deterministic":
        return " Entropy has collapsed, so the completions of a group are identical.", [
            more,
            f"lower learning_rate{cfg.now('learning_rate')}",
            "see entropy_collapse",
        ]
    return "", [more, "mix prompt difficulty so that each group has some successes and some failures"]


def _rose(ctx: Context, onset: int) -> bool:
    """The reward before ``onset`` rose: its last logs before it sit well above its first ones."""
    reward = ctx.frame.get("reward")
    if reward is None:
        return False
    r = reward.finite()
    before = r.values[r.steps < onset]
    if before.size < 6:
        return False
    lo, hi = reward_range(r.values)
    k = max(3, before.size // 5)
    return float(np.mean(before[-k:]) - np.mean(before[:k])) >= 2 * ctx.t("plateau.min_gain") * (hi - lo)


def check_flat_reward(ctx: Context) -> list[Finding]:
    """A reward function returns the same value for every sample: it contributes no signal (often a bug)."""
    functions = ctx.frame.reward_functions()
    if not functions:
        return []
    atol, persist = ctx.t("flat_reward.std_atol"), int(ctx.t("flat_reward.persist"))
    min_points = int(ctx.t("flat_reward.min_points"))
    flat: list[dict[str, Any]] = []
    for name, (mean_key, std_key) in functions.items():
        mean = ctx.frame.columns[mean_key].finite()
        if mean.values.size == 0:
            continue
        if std_key is not None:
            std = ctx.frame.columns[std_key].finite()
            steps, constant = std.steps, std.values <= atol
        else:
            # Old logs have no per-function std: identical means on consecutive logs stand in for it.
            steps, m = mean.steps, mean.values
            same = np.abs(np.diff(m)) <= atol
            constant = np.concatenate(([same[0]] if same.size else [False], same))
        n = constant.size
        run = trailing_streak(constant)
        whole = run == n and n >= min_points
        if run < persist and not whole:
            continue
        start = n - run
        value = float(mean.values[-1])
        lo, hi = reward_range(mean.values)
        saturated = start > 0 and value >= float(np.max(mean.values)) - atol and value > lo
        # Spread-less within each batch is not a constant function when its batch means differ across the log.
        varied = int(np.sum(np.abs(mean.values - value) > atol))
        flat.append(
            {
                "name": name,
                "key": mean_key,
                "onset": int(steps[start]),
                "logs": run,
                "value": value,
                "from_start": start == 0,
                "saturated": saturated,
                "confirmed": run >= persist,
                "varied": varied,
                "nonzero": int(np.sum(np.abs(mean.values) > atol)),
                "of": int(mean.values.size),
            }
        )
    if not flat:
        return []
    all_flat = len(flat) == len(functions) and all(
        f["confirmed"] and not f["saturated"] and not f["varied"] for f in flat
    )
    total = ctx.frame.get("reward")
    total_moves = False
    if all_flat and total is not None:
        # The logged functions are not the whole reward when the total still moves (verl's step penalties,
        # an unlogged term): the run learns from that part, so it is not without signal.
        tail = total.finite().values[-min(f["logs"] for f in flat) :]
        total_moves = bool(tail.size and float(np.ptp(tail)) > atol)
        all_flat = not total_moves
    findings = []
    cfg = ctx.config
    returns_constant: dict[str, list[dict[str, Any]]] = defaultdict(list)  # severity -> constant functions
    for f in flat:
        if f["saturated"]:
            severity = INFO
            message = (
                f"rewards/{f['name']} has been {fmt(f['value'])} on every sample for {f['logs']} logs since step "
                f"{f['onset']}: it is saturated and no longer contributes signal."
            )
            remedy = "Consider lowering its weight in reward_weights or removing it now that it is always satisfied."
        elif f["varied"]:
            # Its batch means differ: it is not a constant function, it just gives every sample of a batch the same
            # value (a per-prompt score, or a rarely firing penalty). A warning at most, and said as it is.
            severity = WARNING if f["confirmed"] else INFO
            message = (
                f"rewards/{f['name']} has std 0 within the batch on the last {f['logs']} logs "
                f"(now {fmt(f['value'])}), "
                f"but it is not a constant: its batch mean is non-zero on {f['nonzero']} of {f['of']} logs and "
                "differs between batches. "
                "Every sample of a batch gets the same value, so it adds no spread within a group."
            )
            remedy = join_fixes(
                [
                    f"check whether {f['name']} scores the prompt rather than the completion",
                    "if it is a rarely firing penalty, that is expected; else make it depend on the completion",
                ]
            )
        else:
            # Constant on a few first logs only (fewer than `persist`): a warning when no reward function gives any
            # signal (the run cannot learn), else a note until it holds (a rarely firing penalty looks the same).
            every = len(flat) == len(functions) and not any(g["saturated"] for g in flat)
            severity = (ERROR if all_flat else WARNING) if f["confirmed"] else (WARNING if every else INFO)
            returns_constant[severity].append(f)
            continue
        findings.append(
            make_finding(
                "flat_reward",
                severity,
                f["onset"],
                message,
                remedy,
                f["key"],
                value=f["value"],
                logs=f["logs"],
                function=f["name"],
                all_flat=all_flat,
            )
        )
    # Functions that return a constant are one finding per severity: one cause (the completions never earn them, or
    # they are broken alike) and one remedy, not a warning for each of them.
    for severity, group in returns_constant.items():
        findings.append(_constant_finding(severity, sorted(group, key=lambda g: g["key"]), all_flat, cfg, total_moves))
    return findings


def _constant_finding(
    severity: str, group: list[dict[str, Any]], all_flat: bool, cfg: Any, total_moves: bool
) -> Finding:
    """One flat_reward finding for the reward functions of `group`, each constant (std 0) on every sample."""

    def since(f: dict[str, Any]) -> str:
        return "since the first log" if f["from_start"] else f"since step {f['onset']}"

    first = group[0]
    if len(group) == 1:
        message = (
            f"rewards/{first['name']} is {fmt(first['value'])} on every sample {since(first)} ({first['logs']} logs, "
            "std 0): the function returns a constant, so it gives no learning signal"
        )
    else:
        each = "; ".join(f"rewards/{f['name']} {fmt(f['value'])} {since(f)} ({f['logs']} logs)" for f in group)
        message = (
            f"{len(group)} reward functions are constant on every sample (std 0): {each}. They give no learning signal"
        )
    message += ", and no other reward does either." if all_flat else "."
    if total_moves:
        which = "this function does" if len(group) == 1 else "these functions do"
        message += f" The total reward still moves: the run learns only from the part of it {which} not log."
    one = len(group) == 1
    names = ", ".join(f["name"] for f in group)
    remedy = join_fixes(
        [
            f"call {names} on a few real completions (log_completions=True shows "
            + ("its column)" if one else "their columns)"),
            "check its signature (prompts, completions, **kwargs) and the dataset column it reads"
            if one
            else "check each one's signature (prompts, completions, **kwargs) and the dataset column it reads",
            "if the task is simply too hard, make the reward graded or start from easier prompts",
            f"otherwise drop {'it' if one else 'them'} from reward_funcs or set "
            f"{'its weight' if one else 'their weights'} to 0 (reward_weights{cfg.now('reward_weights')})",
        ]
    )
    return make_finding(
        "flat_reward",
        severity,
        min(f["onset"] for f in group),
        message,
        remedy,
        first["key"],
        value=first["value"],
        logs=first["logs"],
        function=first["name"],
        functions=[f["name"] for f in group],
        all_flat=all_flat,
    )


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(m.get("content", m)) if isinstance(m, dict) else str(m) for m in value).strip()
    if isinstance(value, dict):
        return str(value.get("content", value)).strip()
    return str(value).strip()


def check_duplicate_completions(ctx: Context) -> list[Finding]:
    """Completions repeat within prompt groups (or across prompts): nothing left for GRPO to compare."""
    rows = ctx.completions or []
    by_step: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for row in rows:
        if not isinstance(row, dict) or "completion" not in row:
            continue
        step = row.get("step")
        by_step[int(step) if isinstance(step, (int, float)) else -1].append(
            (_text(row.get("prompt", "")), _text(row["completion"]))
        )
    if not by_step:
        return []
    stats = []
    for step in sorted(by_step):
        pairs = by_step[step]
        groups: dict[str, list[str]] = defaultdict(list)
        for prompt, completion in pairs:
            groups[prompt].append(completion)
        sized = [g for g in groups.values() if len(g) >= 2]
        # 0 when every completion of a group differs, 1 when all are the same text.
        in_group = (sum(len(g) - len(set(g)) for g in sized) / sum(len(g) - 1 for g in sized)) if sized else 0.0
        across = 0.0
        if len(groups) >= 2:
            across = Counter(c for _, c in pairs).most_common(1)[0][1] / len(pairs)
            across = across if across > 1 / len(pairs) else 0.0
        stats.append((step, max(in_group, across), in_group, across, len(pairs)))
    rates = np.array([s[1] for s in stats])
    warn_t, err_t = ctx.t("duplicate_completions.warn"), ctx.t("duplicate_completions.error")
    run = trailing_streak(rates > warn_t)
    if run == 0:
        return []
    err_run = trailing_streak(rates >= err_t)
    severity = ERROR if err_run >= min(2, len(stats)) else WARNING
    step, rate, in_group, across, size = stats[-1]
    onset = stats[len(stats) - run][0]
    message = (
        f"In the latest completion batch (step {step}, {size} completions) {in_group:.0%} of the completions in a "
        f"prompt group are exact duplicates"
        + (f" and one completion makes up {across:.0%} of all prompts' answers" if across > warn_t else "")
        + f"; above {warn_t:.0%} for {run} logged batch(es) since step {onset}. Identical completions have equal "
        "rewards, so the group gives no advantage."
    )
    cfg = ctx.config
    remedy = join_fixes(
        [
            f"raise temperature{cfg.now('temperature')} (and top_p{cfg.now('top_p')} toward 1.0)",
            f"lower learning_rate{cfg.now('learning_rate')}",
            "add an entropy bonus (entropy_coef=0.001) or epsilon_high=0.28 off-policy; see entropy_collapse",
        ]
    )
    return [
        make_finding(
            "duplicate_completions",
            severity,
            onset,
            message,
            remedy,
            None,
            duplicate_rate=rate,
            in_group=in_group,
            across_prompts=across,
            batches=run,
        )
    ]
