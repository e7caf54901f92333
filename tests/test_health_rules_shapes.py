"""Constructed logs with the shapes the third batch of real logs showed (see tests/fixtures/real_logs/INDEX.md):
relative KL drift at a flat reward, a plateau at the reward's ceiling, steady partial truncation, and short logs
whose zero-spread state has a one-log gap. Each behaviour has a case where it fires and one where it must not."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_dashboard.health import diagnose, finding_history

from .test_health_rules import healthy, no_rule_crashes, only, rules  # noqa: F401  (the fixture is autouse)

BETA = {"beta": 0.04}


def _drift_kl(n: int, seed: int = 0, top: float = 0.08) -> np.ndarray:
    """kl 0.0008 for 20 logs, growing ~100x by log 60, then noisy at that level (with two one-log blips)."""
    rng = np.random.default_rng(seed)
    kl = np.concatenate([np.full(20, 0.0008), np.geomspace(0.0008, top, 40), np.full(n - 60, top)])
    kl = kl * rng.uniform(0.7, 1.3, n)
    kl[[70, 100]] *= 2.5
    return kl


def _flat(n: int, level: float, seed: int = 0, noise: float = 0.03) -> np.ndarray:
    return np.clip(level + np.random.default_rng(seed).normal(0, noise, n), 0, 1)


# ---- kl_outpaces_reward: relative drift -----------------------------------------------------------------------------


def test_relative_kl_drift_at_a_flat_ceiling_reward_is_an_info() -> None:
    n = 120
    reward = _flat(n, 0.92)
    records = healthy(n, kl=_drift_kl(n), reward=reward, rewards__count_a__mean=reward)
    findings = diagnose(records, config=BETA)
    f = only(findings, "kl_outpaces_reward")
    assert f.severity == "info" and f.evidence["kind"] == "relative_drift"
    assert 30 <= f.step <= 60 and f.evidence["growth"] >= 50
    assert "ceiling" in f.message and "beta (now 0.04)" in f.remedy
    assert not {"kl_high", "kl_spike"} & rules(findings, "warning")


def test_relative_kl_drift_is_silent_when_it_buys_reward_or_stays_tiny_or_beta_is_zero() -> None:
    n = 120
    rising = np.clip(np.linspace(0.3, 0.8, n) + np.random.default_rng(1).normal(0, 0.03, n), 0, 1)
    bought = healthy(n, kl=_drift_kl(n), reward=rising, rewards__count_a__mean=rising)
    assert "kl_outpaces_reward" not in rules(diagnose(bought, config=BETA))
    flat = _flat(n, 0.92)
    tiny = healthy(n, kl=_drift_kl(n, top=0.015), reward=flat, rewards__count_a__mean=flat)
    assert "kl_outpaces_reward" not in rules(diagnose(tiny, config=BETA))
    drifting = healthy(n, kl=_drift_kl(n), reward=flat, rewards__count_a__mean=flat)
    assert not {"kl_outpaces_reward", "kl_high", "kl_spike"} & rules(diagnose(drifting, config={"beta": 0.0}))


# ---- plateau at the reward's ceiling ------------------------------------------------------------------------------


def test_flat_reward_at_its_ceiling_is_a_converged_info_not_raise_the_learning_rate() -> None:
    n = 100
    reward = _flat(n, 0.94)
    f = only(diagnose(healthy(n, reward=reward, rewards__count_a__mean=reward)), "plateau")
    assert f.severity == "info" and f.evidence["kind"] == "ceiling"
    assert "converged" in f.message and "stop" in f.remedy.lower() and "learning_rate" not in f.remedy


def test_flat_reward_below_or_off_a_known_ceiling_stays_a_no_learning_warning() -> None:
    n = 100
    low = _flat(n, 0.5)
    f = only(diagnose(healthy(n, reward=low, rewards__count_a__mean=low)), "plateau")
    assert f.severity == "warning" and "learning_rate" in f.remedy
    # A total near its own logged maximum on a scale above 1: the log does not show the ceiling, so no "converged".
    big = 1.9 + np.random.default_rng(2).normal(0, 0.03, n)
    f = only(diagnose(healthy(n, reward=big, rewards__count_a__mean=None, rewards__count_a__std=None)), "plateau")
    assert f.severity == "warning"
    # One reward function at its ceiling, another far from it: the run is not at its ceiling.
    high, mid = _flat(n, 0.95), _flat(n, 0.3, seed=3)
    records = healthy(n, reward=(high + mid) / 2, rewards__count_a__mean=high, rewards__acc__mean=mid)
    assert only(diagnose(records), "plateau").severity == "warning"


def _climb(n: int, seed: int) -> np.ndarray:
    """A healthy run climbing 15-fold, 0.03 -> 0.45, exponentially, with 30% scatter: slow in absolute terms early."""
    rng = np.random.default_rng(seed)
    return np.clip(0.03 * 15 ** (np.arange(n) / n) * (1 + rng.normal(0, 0.3, n)), 0, 1)


def test_a_long_run_without_a_trend_is_a_no_learning_warning_whatever_its_last_window_does() -> None:
    n = 500
    for seed in range(6):
        flat = _flat(n, 0.3, seed=seed, noise=0.1)
        f = only(diagnose(healthy(n, reward=flat, rewards__count_a__mean=flat)), "plateau")
        assert f.severity == "warning" and f.evidence["kind"] == "trend", (seed, f.message)


def test_a_slow_start_that_climbs_several_fold_never_warns_as_a_plateau() -> None:
    n = 500
    for seed in range(4):
        climb = _climb(n, seed)
        history = finding_history(healthy(n, reward=climb, rewards__count_a__mean=climb), {})
        plateau = [f for f in history if f.rule == "plateau"]
        assert not [f for f in plateau if "warning" in (f.severity, f.evidence.get("peak_severity"))], seed
        assert "plateau" not in rules(diagnose(healthy(n, reward=climb, rewards__count_a__mean=climb)), "warning")


# ---- truncation: steady partial truncation --------------------------------------------------------------------------

L2_CLIPPED = [0.375, 0.25, 0, 0.125, 0.875, 0, 0, 0.5, 0.875, 0.125, 0.25, 0.125, 0, 0.125, 0, 0, 0.25, 0.25]
L2_CLIPPED += [0.125, 0.5, 0.125, 0.125, 0, 0.375, 0.125]


def test_steady_partial_truncation_is_an_info_with_the_cap_and_share() -> None:
    clipped = np.array(L2_CLIPPED)
    n = clipped.size
    longest = np.where(clipped > 0, 512.0, 400.0)
    reward = 0.5 - clipped + np.random.default_rng(0).normal(0, 0.05, n)
    records = healthy(n, completions__clipped_ratio=clipped, completions__max_length=longest, reward=reward)
    f = only(diagnose(records), "truncation")
    assert f.severity == "info" and f.evidence["kind"] == "steady" and f.evidence["cap"] == 512
    assert "512" in f.message and "score lowest" in f.message and 0.15 <= f.evidence["mean"] <= 0.25
    # The config's cap wins over the one read from the log.
    assert only(diagnose(records, config={"max_completion_length": 600}), "truncation").evidence["cap"] == 600


def test_rare_or_light_truncation_is_not_a_finding() -> None:
    n = 25
    rare = np.zeros(n)
    rare[[4, 8]] = 0.875  # two batches cut heavily, the rest never: mean 0.07, 2 of 25 logs
    assert "truncation" not in rules(diagnose(healthy(n, completions__clipped_ratio=rare)))
    light = np.full(n, 0.05)  # a few completions cut on every log
    assert "truncation" not in rules(diagnose(healthy(n, completions__clipped_ratio=light)))


def _old_lengths(n: int, pinned: list[int], cap: float = 768.0, seed: int = 0) -> list[dict]:
    """An old-key log (completion_length, no clipped_ratio): lengths 200-740, ``cap`` on the ``pinned`` logs."""
    rng = np.random.default_rng(seed)
    lengths = rng.uniform(200, 740, n).round(2)
    lengths[pinned] = cap
    reward = np.where(np.isin(np.arange(n), pinned), -2.0, -1.3 + rng.normal(0, 0.2, n))
    return [
        {"step": i + 1, "completion_length": float(v), "reward": float(r)}
        for i, (v, r) in enumerate(zip(lengths, reward, strict=True))
    ]


def test_isolated_batches_at_the_cap_on_an_old_log_are_a_truncation_note_with_a_lower_bound() -> None:
    n = 120
    pinned = list(range(3, n, 6))  # one batch in six wholly cut, never two in a row
    f = only(diagnose(_old_lengths(n, pinned)), "truncation")
    assert f.severity == "info" and f.evidence["kind"] == "pinned_batches" and f.evidence["cap"] == 768
    assert f.evidence["lower_bound"] and f.evidence["pinned_logs"] >= 3 and 0.1 <= f.evidence["current"] <= 0.2
    assert f.metric == "completion_length" and "768" in f.message and "at least" in f.message
    # A third of the batches wholly cut: the bound alone is at the clipped ratio's warning level.
    dense = only(diagnose(_old_lengths(n, list(range(1, n, 3)))), "truncation")
    assert dense.severity == "warning" and dense.evidence["current"] >= 0.3 and "warning level" in dense.message
    # The config's cap counts the same batches.
    assert (
        only(diagnose(_old_lengths(n, pinned), config={"max_completion_length": 768}), "truncation").evidence["cap"]
        == 768
    )


def test_a_maximum_met_once_or_twice_or_under_a_larger_cap_is_no_truncation() -> None:
    n = 120
    assert "truncation" not in rules(diagnose(_old_lengths(n, [])))
    assert "truncation" not in rules(diagnose(_old_lengths(n, [100, 110])))  # two batches at the top: chance
    spread = _old_lengths(n, list(range(3, n, 6)))
    assert "truncation" not in rules(diagnose(spread, config={"max_completion_length": 1024}))


# ---- short logs: a zero-spread state with a one-log gap ----------------------------------------------------------


def _l3(frac: list[float], reward: list[float], std: list[float]) -> list[dict]:
    n = len(frac)
    r = np.array(reward, dtype=float)
    return healthy(
        n,
        frac_reward_zero_std=np.array(frac, dtype=float),
        reward=r,
        reward_std=np.array(std, dtype=float),
        rewards__count_a__mean=r,
        rewards__count_a__std=np.array(std, dtype=float),
        grad_norm=np.where(np.array(std) == 0, 1e-3, 0.1),
    )


def test_short_log_with_zero_spread_on_most_logs_fires_and_stays_active_through_one_batch_with_spread() -> None:
    records = _l3([1, 1, 1, 0, 1], [0, 0, 0, -0.25, 0], [0, 0, 0, 0.46, 0])
    findings = diagnose(records)
    assert only(findings, "zero_variance").severity == "error"
    plateau = only(findings, "plateau")
    assert plateau.severity == "warning" and plateau.step == 1 and "exactly 0" in plateau.message
    history = {f.rule: f for f in finding_history(records)}
    assert history["zero_variance"].status == "active" and history["zero_variance"].step == 1
    assert history["plateau"].status == "active"
    # The log as it was at step 4: one batch with spread after three without does not end the state.
    at4 = {f.rule: f for f in finding_history(records[:4])}
    assert at4["zero_variance"].status == "active"
    # Two batches with spread in a row: the snapshot no longer fires, but the record waits for a sustained return
    # (history.RESOLVE_DWELL cuts); the third one resolves it, at that step.
    recovered = _l3([1, 1, 1, 0, 0, 0], [0, 0, 0, -0.25, 0.4, 0.5], [0, 0, 0, 0.46, 0.4, 0.4])
    assert "zero_variance" not in rules(diagnose(recovered))
    assert {f.rule: f for f in finding_history(recovered)}["zero_variance"].status == "active"
    recovered = _l3([1, 1, 1, 0, 0, 0, 0], [0, 0, 0, -0.25, 0.4, 0.5, 0.3], [0, 0, 0, 0.46, 0.4, 0.4, 0.4])
    later = {f.rule: f for f in finding_history(recovered)}["zero_variance"]
    assert later.status == "resolved" and later.resolved_step == 7
    # A note on the first two logs (too few for a state), an error from the third, resolved at the seventh.
    assert [(e["event"], e["severity"]) for e in later.evidence["events"]] == [
        ("raised", "info"),
        ("escalated", "error"),
        ("resolved", "error"),
    ]


def test_short_log_without_a_majority_state_or_without_zero_spread_is_silent() -> None:
    mixed = _l3([1, 0, 1, 0, 1], [0, 0.4, 0, 0.3, 0], [0, 0.4, 0, 0.4, 0])
    assert not {"zero_variance", "plateau"} & rules(diagnose(mixed))
    # The same mean on 4 of 5 logs, but every batch has spread: a coincidence of means, not a state.
    spread = _l3([0, 0, 0, 0, 0], [0.5, 0.5, 0.5, 0.7, 0.5], [0.3, 0.3, 0.3, 0.3, 0.3])
    assert "plateau" not in rules(diagnose(spread))


# ---- kl_spike on the latest log; one spread-less batch on a short log ---------------------------------------------


def test_a_kl_spike_on_the_latest_log_is_a_note_until_the_next_log_unless_it_is_huge() -> None:
    n = 60
    kl = 0.05 + 0.005 * np.random.default_rng(4).random(n)
    kl[-1] = 0.35  # 7x its level on the very last log, beta small, reward rising
    f = only(diagnose(healthy(n, kl=kl), config=BETA), "kl_spike")
    assert f.severity == "info" and f.evidence["pending"] and "not known yet" in f.message
    assert "came back down" not in f.message and "resume" not in f.remedy
    stays = healthy(n + 1, kl=np.append(kl, 0.35))  # the next log is still up: no longer a blip
    assert only(diagnose(stays, config=BETA), "kl_spike").severity == "warning"
    kl[-1] = 2.5  # 50x on the latest log: a warning at once, an error once the next log is still up
    assert only(diagnose(healthy(n, kl=kl), config=BETA), "kl_spike").severity == "warning"
    assert only(diagnose(healthy(n + 1, kl=np.append(kl, 2.5)), config=BETA), "kl_spike").severity == "error"
    kl[-1] = 0.35  # the same 7x spike with a large beta is a warning at once
    assert only(diagnose(healthy(n, kl=kl), config={"beta": 0.5}), "kl_spike").severity == "warning"


def test_one_spread_less_batch_after_batches_with_spread_is_not_a_zero_variance_state() -> None:
    assert "zero_variance" not in rules(diagnose(_l3([0, 0, 1], [0.7, 1.5, -0.1], [1.2, 0.6, 0.0])))
    assert "zero_variance" not in rules(diagnose(_l3([0, 1], [0.7, -0.1], [1.2, 0.0])))
    # Two in a row at the end of three logs, or the whole log from three logs on, is a state; a log of two is a note.
    assert only(diagnose(_l3([0, 1, 1], [0.7, 0, 0], [1.2, 0, 0])), "zero_variance").severity == "error"
    assert only(diagnose(_l3([1, 1], [0, 0], [0, 0])), "zero_variance").severity == "info"
    assert only(diagnose(_l3([1, 1, 1], [0, 0, 0], [0, 0, 0])), "zero_variance").severity == "error"


def test_real_angle_log_kl_spikes_are_notes_at_every_length() -> None:
    """tikz dataset_angle (beta 0.04, reward rising near its ceiling): two one-log kl spikes (s36, s40) are notes live
    too, while each is the latest log, not warnings."""
    from pathlib import Path

    from grpo_dashboard.health import load_log_frame

    folder = Path(__file__).parent / "fixtures" / "real_logs"
    (path,) = folder.glob("screechingviolet__*dataset_angle_grpo-first71.jsonl")
    frame, hints = load_log_frame(path)
    for step in (36, 37, 40, 41, 71):
        f = only(diagnose(frame.upto(step), hints), "kl_spike")
        assert f.severity == "info", (step, f.message)


def test_entropy_halving_under_the_floor_is_an_error_only_from_a_baseline_clearly_above_it() -> None:
    n = 60
    low = np.concatenate((np.full(20, 0.13), np.full(n - 20, 0.06)))  # near the floor from the start, halved
    assert "entropy_collapse" not in rules(diagnose(healthy(n, entropy=low)))
    high = np.concatenate((np.full(20, 0.25), np.full(n - 20, 0.09)))  # clearly above it, now under 0.1 nats
    assert only(diagnose(healthy(n, entropy=high)), "entropy_collapse").severity == "error"


# ---- format_hacking: a task reward that moved while the format was learned, then stalled ---------------------------


def _game(n: int, rise: int, late_slope: float, seed: int = 3) -> dict[str, np.ndarray]:
    """A JSON-format reward (max 2) learned in `rise` logs, and a noisy game score (no accuracy-like name) that climbs
    with it (valid output scores) and then moves by `late_slope` per log."""
    rng = np.random.default_rng(seed)
    fmt_r = np.concatenate([np.linspace(-0.9, 2.0, rise), np.full(n - rise, 2.0)]) - rng.uniform(0, 0.15, n)
    game = np.concatenate([np.linspace(-7.0, -1.0, rise), -1.0 + late_slope * np.arange(n - rise)])
    game = game + rng.normal(0, 4.0, n)
    spread = np.full(n, 10.0)  # completions score from -10 to +10 within a group: the game is far from solved
    return {
        "rewards/valid_json_reward/mean": fmt_r,
        "rewards/gameplay_scores/mean": game,
        "rewards/gameplay_scores/std": spread,
        "reward": fmt_r + game,
    }


def _with(records: list[dict], series: dict[str, np.ndarray]) -> list[dict]:
    for i, rec in enumerate(records):
        rec.pop("rewards/count_a/mean", None)
        rec.pop("rewards/count_a/std", None)
        rec.update({k: float(v[i]) for k, v in series.items()})
    return records


def test_format_saturated_while_an_unnamed_task_score_stalls_is_format_hacking() -> None:
    n = 60
    f = only(diagnose(_with(healthy(n), _game(n, 6, 0.0))), "format_hacking")
    assert f.severity == "warning" and f.step <= 10 and f.metric == "rewards/valid_json_reward/mean"
    assert "has not risen since" in f.message and "gameplay_scores" in f.message


def test_format_saturated_while_the_task_keeps_rising_or_sits_high_is_not_format_hacking() -> None:
    n = 60
    rising = _with(healthy(n), _game(n, 6, 0.35))  # the game score climbs ~19 over the stretch since
    assert "format_hacking" not in rules(diagnose(rising))
    solved = _game(n, 6, 0.0)
    solved["rewards/gameplay_scores/std"] = np.full(n, 0.5)  # every completion scores about the same: solved
    assert "format_hacking" not in rules(diagnose(_with(healthy(n), solved)))
    high = _game(n, 6, 0.0)  # a 0-1 accuracy flat at 0.8 of its range after the format saturated: a plateau
    high["rewards/gameplay_scores/mean"] = np.clip(0.8 + np.random.default_rng(4).normal(0, 0.03, n), 0, 1)
    high["rewards/gameplay_scores/std"] = np.full(n, 0.4)
    assert "format_hacking" not in rules(diagnose(_with(healthy(n), high)))
    low = dict(high)  # the same accuracy flat at 0.2: the format was learned, the task was not
    low["rewards/gameplay_scores/mean"] = high["rewards/gameplay_scores/mean"] - 0.6
    assert only(diagnose(_with(healthy(n), low)), "format_hacking").severity == "warning"
    short = _with(healthy(18), _game(18, 6, 0.0))  # 12 logs since saturation: too short a stretch to call
    assert "format_hacking" not in rules(diagnose(short))


def test_a_format_saturated_from_the_first_log_was_not_learned_in_the_run_so_it_is_not_format_hacking() -> None:
    """A policy that formats from its first log (an SFT or instruct start): the same stalled, far-from-solved task
    score is a plateau, not a format learned instead of the task; learned over 6 logs, the same log is one."""
    n = 60
    early = _game(n, 6, 0.0)
    early["rewards/valid_json_reward/mean"] = np.full(n, 2.0) - np.random.default_rng(5).uniform(0, 0.15, n)
    early["reward"] = early["rewards/valid_json_reward/mean"] + early["rewards/gameplay_scores/mean"]
    assert "format_hacking" not in rules(diagnose(_with(healthy(n), early)))
    assert "format_hacking" in rules(diagnose(_with(healthy(n), _game(n, 6, 0.0))))


def test_with_several_unnamed_functions_none_is_guessed_to_be_the_task() -> None:
    n = 60
    series = _game(n, 6, 0.0)
    series["rewards/pnl_reward_fn/mean"] = series["rewards/gameplay_scores/mean"] * 0.5  # which one is the task?
    assert "format_hacking" not in rules(diagnose(_with(healthy(n), series)))


# ---- entropy_collapse inside the warm-up window --------------------------------------------------------------------


def test_entropy_that_collapsed_within_the_warm_up_window_stays_a_collapse_on_the_whole_log() -> None:
    """learning_rate 5e-2 on the smoke task: entropy 4.46 -> 0.43 by the fifth log, then 0 for 55 logs; the warm-up
    median of 60 logs is the collapsed level itself."""
    n = 60
    entropy = np.concatenate([[4.46, 4.31, 3.98, 3.05, 0.43, 0.025, 0.005], np.zeros(n - 7)])
    findings = finding_history(healthy(n, entropy=entropy), {})
    f = only(findings, "entropy_collapse")
    assert f.severity == "error" and f.status == "active" and f.step <= 6
    near_zero = np.full(n, 0.05)  # near zero from the very first log: still the "since the first log" warning
    assert only(diagnose(healthy(n, entropy=near_zero), {}), "entropy_collapse").severity == "warning"


def test_a_reward_spread_less_within_batches_but_not_constant_is_no_constant_reward_error() -> None:
    """A per-prompt reward (one prompt per step): std 0 within every batch, but 1.0 on a third of the logs and 0
    otherwise. It is not "0 on every sample"; a warning that says what it is, never the constant-reward error."""
    n = 30
    records = [
        {
            "step": s,
            "reward": 0.4 + 0.01 * s,
            "reward_std": 0.3,
            "rewards/bonus/mean": 1.0 if s % 3 == 0 else 0.0,
            "rewards/bonus/std": 0.0,
            "entropy": 1.0,
        }
        for s in range(1, n + 1)
    ]
    f = only(diagnose(records), "flat_reward")
    assert f.severity in ("info", "warning") and "not a constant" in f.message and "10 of 30 logs" in f.message
    assert "on every sample" not in f.message
    for r in records:
        r["rewards/bonus/mean"] = 0.0
    constant = only(diagnose(records), "flat_reward")
    assert "on every sample" in constant.message and "not a constant" not in constant.message


def test_a_gradient_explosion_in_the_first_logs_is_caught_before_any_baseline() -> None:
    """grad_norm 0.8, 1.1, 3e4 on the first three logs: by the absolute and the relative test an explosion, although
    no trailing baseline exists yet; the same jump from 0.8 to 40 (not large in absolute terms) is not one."""
    base = [{"step": s, "reward": 0.3, "entropy": 1.0} for s in range(1, 4)]
    boom = [{**r, "grad_norm": g} for r, g in zip(base, (0.8, 1.1, 3e4), strict=True)]
    f = only(diagnose(boom), "grad_spike")
    assert f.severity == "error" and f.step == 3 and "before a baseline" in f.message
    mild = [{**r, "grad_norm": g} for r, g in zip(base, (0.8, 1.1, 40.0), strict=True)]
    assert "grad_spike" not in rules(diagnose(mild))


def _pairs(n: int, quiet_share: float, seed: int = 4, spread_logged: bool = True) -> list[dict]:
    """One prompt of 2 completions a step: a batch whose two rewards are equal (``quiet_share`` of them) has no
    advantage and a grad_norm of ~0.002 (the KL term), the others an ordinary 0.3 with lognormal scatter."""
    rng = np.random.default_rng(seed)
    quiet = rng.random(n) < quiet_share
    grad = np.where(quiet, rng.uniform(0.001, 0.004, n), 0.3 * rng.lognormal(0, 0.4, n))
    reward = np.where(quiet, rng.choice([0.0, 1.0], n), 0.5)
    std = np.where(quiet, 0.0, 0.7071) if spread_logged else None
    return healthy(
        n, grad_norm=grad, reward=reward, reward_std=std, frac_reward_zero_std=None, rewards__count_a__mean=reward
    )


def test_grad_norm_alternating_with_no_advantage_batches_of_groups_of_2_is_no_spike() -> None:
    for share in (0.55, 0.65):
        for spread_logged in (True, False):
            records = _pairs(150, share, spread_logged=spread_logged)
            assert "grad_spike" not in rules(diagnose(records, config={"num_generations": 2})), (share, spread_logged)


def test_a_real_spike_among_groups_of_2_is_still_caught() -> None:
    records = _pairs(150, 0.6)
    records[100]["grad_norm"], records[100]["reward_std"] = 30.0, 0.7071
    f = only(diagnose(records, config={"num_generations": 2}), "grad_spike")
    assert f.evidence["max_step"] == 101 and f.evidence["reference_median"] >= 0.1


def _saturated(n: int, seed: int = 6) -> list[dict]:
    """A run whose groups are mostly saturated (frac_reward_zero_std ~0.85, reward ~0.95): grad_norm scales with the
    few groups that still have spread, 0.01-0.5 and jumpy against a near-zero median."""
    rng = np.random.default_rng(seed)
    frac = np.clip(rng.normal(0.85, 0.08, n), 0, 1)
    grad = np.where(rng.random(n) < 0.5, 0.01, 0.3) * rng.lognormal(0, 0.5, n)
    reward = np.clip(rng.normal(0.95, 0.02, n), 0, 1)
    return healthy(n, grad_norm=grad, frac_reward_zero_std=frac, reward=reward, rewards__count_a__mean=reward)


def test_gradient_spikes_of_a_few_hundred_on_a_saturated_run_are_caught_and_its_ordinary_jumps_are_not() -> None:
    """On saturated stretches a relative jump is no spike (the few groups with spread set the norm), but a norm of a
    few hundred, large in absolute terms and far above the run's typical level, is one."""
    records = _saturated(200)
    assert "grad_spike" not in rules(diagnose(records))
    for i, g in ((120, 310.0), (150, 480.0)):
        records[i]["grad_norm"] = g
    f = only(diagnose(records), "grad_spike")
    assert f.severity == "warning" and f.evidence["max_step"] == 151 and f.evidence["count"] == 2
    assert "480" in f.message and f.step == 121


def test_grad_spike_typical_level_is_the_median_of_every_earlier_block() -> None:
    """The run's typical grad_norm at each block start equals np.median of all earlier values (odd and even counts)."""
    from grpo_dashboard.health.checks_optimizer import _expanding_median

    rng = np.random.default_rng(7)
    for n in (2, 3, 17, 257, 5000):
        for v in (rng.lognormal(size=n), np.round(rng.random(n) * 3)):
            got = _expanding_median(v)
            stride = max(1, n // 256)
            assert np.isnan(got[0])
            for end in range(1, n, stride):
                assert got[end] == np.median(v[:end])


def test_grad_spike_typical_level_matches_the_sorted_prefix_merge_on_ties_and_nans() -> None:
    """The bucketed rank selection gives np.median of each block prefix on repeated values, zeros, NaN and the
    lengths where the stride changes (NaN from the first block holding one, as np.median gives)."""
    from grpo_dashboard.health.checks_optimizer import _expanding_median

    rng = np.random.default_rng(11)
    for n in (4, 255, 256, 511, 512, 10_001):
        nan = rng.normal(size=n)
        nan[n // 3] = np.nan
        for v in (np.round(rng.random(n) * 2), np.where(rng.random(n) < 0.6, 0.0, rng.random(n)), nan):
            got = _expanding_median(v)
            stride = max(1, n // 256)
            for end in range(1, n, stride):
                want = np.median(v[:end])
                assert got[end] == want or (np.isnan(want) and np.isnan(got[end])), (n, end)
                assert np.array_equal(got[end : end + stride], np.full(min(stride, n - end), got[end]), equal_nan=True)


def test_window_medians_equal_np_median_per_row() -> None:
    """The sorted-row medians of the trailing windows are np.median's, with NaN and infinities in the rows."""
    from grpo_dashboard.health.series import window_medians

    rng = np.random.default_rng(5)
    for h in (1, 2, 3, 20, 21):
        v = rng.normal(size=300)
        v[rng.random(300) < 0.03] = np.nan
        v[rng.random(300) < 0.03] = np.inf
        v[rng.random(300) < 0.03] = -np.inf
        w = np.lib.stride_tricks.sliding_window_view(v, h)
        with np.errstate(invalid="ignore"):
            assert np.array_equal(window_medians(w), np.median(w, axis=1), equal_nan=True), h


def test_grad_spike_reference_built_only_where_a_spike_is_possible_finds_every_spike() -> None:
    """The windowed reference is built only for logs at or above `ratio` x the typical floor; built for every log,
    as before, it gives the same spikes (steps, worst ratio and reference) on spiky, quiet, saturated and tied logs,
    under the default thresholds and under a floor of 0 or a low ratio (where every log is a candidate)."""
    from grpo_dashboard.health import resolve_thresholds
    from grpo_dashboard.health.checks_optimizer import _active_reference, _expanding_median, check_grad_spike
    from grpo_dashboard.health.findings import Context, RunConfig
    from grpo_dashboard.health.series import MetricFrame, trailing_count_zero_share

    def spikes_everywhere(ctx: Context) -> tuple[list[int], float]:
        series = ctx.frame.get("grad_norm").finite()
        v, history = series.values, int(ctx.t("grad_spike.history"))
        med, active = _active_reference(ctx, series, history, np.arange(v.size))
        med = np.maximum(med, ctx.t("grad_spike.typical_floor") * _expanding_median(v))
        count, zero_share = trailing_count_zero_share(v, history)
        valid = (count >= ctx.t("grad_spike.min_history")) & (zero_share < ctx.t("grad_spike.zero_frac")) & (med > 0)
        valid &= active >= ctx.t("grad_spike.min_active")
        ratio = np.where(valid, v / np.where(med > 0, med, 1.0), 0.0)
        at = np.flatnonzero(ratio >= ctx.t("grad_spike.ratio"))
        return [int(s) for s in series.steps[at[:20]]], float(ratio[at].max()) if at.size else 0.0

    rng = np.random.default_rng(3)
    found = 0
    for case in range(60):
        n = int(rng.choice([40, 300, 2000]))
        grad = 0.3 * rng.lognormal(0, rng.choice([0.1, 0.6, 1.5]), n)
        grad[rng.random(n) < 0.03] *= rng.choice([10.0, 60.0, 400.0])
        grad[rng.random(n) < 0.05] = 0.0
        if case % 3 == 0:
            grad = np.round(grad, 1)  # ties
        quiet = rng.random(n) < (0.6 if case % 2 else 0.0)
        grad = np.where(quiet, grad * 0.005, grad)
        std = np.where(quiet, 0.0, 0.5) if case % 4 else None
        frame = MetricFrame.from_records(healthy(n, grad_norm=grad, reward_std=std, frac_reward_zero_std=None))
        for overrides in ({}, {"grad_spike.typical_floor": 0.0}, {"grad_spike.ratio": 0.5}):
            ctx = Context(frame, RunConfig({}), resolve_thresholds(overrides))
            with np.errstate(all="ignore"):
                got = check_grad_spike(ctx)
                want_steps, want_ratio = spikes_everywhere(ctx)
            if not got or got[0].evidence.get("early"):
                assert not want_steps or (got and got[0].evidence.get("early")), (case, overrides)
                continue
            found += 1
            assert got[0].evidence["spike_steps"] == want_steps, (case, overrides)
            assert got[0].evidence["max_ratio"] == pytest.approx(want_ratio, rel=1e-6), (case, overrides)  # rounded
    assert found >= 30  # the cases do exercise spikes
