"""reward_drop judged against the reward's own noise: a fall must be from a level (not one lucky log) and exceed what
the reward's log-to-log scatter explains, at every point of the run (the findings history), not only at its end."""

from __future__ import annotations

import numpy as np

from grpo_dashboard.health import diagnose, finding_history


def log(values: list[float] | np.ndarray, std: float | list[float] = 0.3) -> list[dict[str, float]]:
    """A log with one reward function whose batch mean is ``values`` (and its per-sample std)."""
    stds = [std] * len(values) if isinstance(std, float) else std
    return [
        {
            "step": i + 1,
            "reward": float(v),
            "reward_std": float(s),
            "rewards/r/mean": float(v),
            "rewards/r/std": float(s),
            "entropy": 1.0,
        }
        for i, (v, s) in enumerate(zip(values, stds, strict=True))
    ]


def drops(records: list[dict[str, float]]) -> list[tuple[str, int, str]]:
    """Each reward_drop shown at warning or error, live or at the end: (severity, onset, status)."""
    return [
        (f.severity, f.step, f.status)
        for f in finding_history(records)
        if f.rule == "reward_drop" and f.severity in ("warning", "error")
    ]


def test_two_lucky_logs_in_a_noisy_reward_are_not_a_level_that_was_lost() -> None:
    """A game reward that swings by +-0.5 between logs: two logs up near +0.3, the rest about -0.55. The old rule
    took the two as a peak and raised a warning at log 11 (withdrawn at log 13)."""
    values = [-0.78, -0.38, -0.55, -0.8, 0.26, 0.39, -0.07, -0.55, -0.51, -0.5, -0.66, -0.4, 0.08, -0.48, -0.65]
    assert not [f for f in diagnose(log(values[:11])) if f.rule == "reward_drop"]
    assert drops(log(values)) == []


def test_one_log_peak_of_a_rare_reward_is_not_a_level() -> None:
    """A reward earned by 1 or 2 of 16 completions (0.0625 / 0.125), then by none: the old rule raised an error from
    the 0.125 log alone (an unmistakable 'pinned at its floor' fall); the level before the fall is 0.094, under
    reward_drop.min_drop."""
    values = [0.0625, 0.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0625, 0.0625, 0.0625, 0.0, 0.0, 0.0, 0.0625, 0.0]
    stds = [0.25 if v else 0.0 for v in values]
    for n in (3, 4, 5):
        assert not [f for f in diagnose(log(values[:n], stds[:n])) if f.rule == "reward_drop"], n
    assert drops(log(values, stds)) == []


def test_a_real_drop_in_a_noisy_reward_still_fires_with_its_onset() -> None:
    """Same scatter as the game reward (sd 0.2 per log), but a held level of 0.6 for 30 logs that falls to 0.1."""
    rng = np.random.default_rng(3)
    values = np.clip(np.concatenate((np.full(30, 0.6), np.full(15, 0.1))) + rng.normal(0, 0.2, 45), -1, 1)
    found = [f for f in diagnose(log(values)) if f.rule == "reward_drop"]
    assert len(found) == 1 and found[0].severity in ("warning", "error") and 30 <= found[0].step <= 34
    assert found[0].evidence["noise_z"] > 5
    assert "standard errors of its log-to-log scatter" in found[0].message
    history = drops(log(values))
    assert history and history[0][2] == "active" and 30 <= history[0][1] <= 34


def test_an_unmistakable_fall_on_three_logs_still_fires() -> None:
    """A format reward at 0.575 that drops to 0.012 and then 0 (a real three-record log): no scatter to judge, the
    fall from the first log on is the evidence."""
    found = [f for f in diagnose(log([0.575, 0.012, 0.0], [0.5, 0.1, 0.0])) if f.rule == "reward_drop"]
    assert len(found) == 1 and found[0].severity == "error" and found[0].step == 2


def test_three_falling_logs_within_the_completions_spread_are_not_a_drop() -> None:
    """A 0/1 accuracy reward 0.475 -> 0.325 -> 0.175 whose completions' std is 0.44: small batches move that much by
    chance (the run recovers to 0.325 two logs later). The old rule raised a warning on the third log. The same fall
    by more than the spread, or with no spread logged, is still a drop."""
    assert not [f for f in diagnose(log([0.475, 0.325, 0.175], [0.44, 0.47, 0.35])) if f.rule == "reward_drop"]
    assert drops(log([0.475, 0.325, 0.175, 0.275, 0.325], [0.44, 0.47, 0.35, 0.45, 0.44])) == []
    assert [f for f in diagnose(log([0.575, 0.2, 0.05], [0.3, 0.3, 0.2])) if f.rule == "reward_drop"]


def test_the_lowest_total_reward_so_far_is_not_a_floor_while_its_groups_still_spread() -> None:
    """The total reward 2.15 -> -0.3 -> -0.3 with reward_std 2.9 (completions still differ): not pinned at a floor,
    so not an unmistakable drop on a three-record log (the next log is back at 2.15)."""
    records = [
        {"step": s, "reward": r, "reward_std": sd, "entropy": 1.0}
        for s, r, sd in ((1, 2.15, 0.1), (2, -0.3, 2.887), (3, -0.3, 2.887))
    ]
    assert not [f for f in diagnose(records) if f.rule == "reward_drop"]
    pinned = [dict(r, reward_std=0.0) if r["step"] > 1 else r for r in records]
    assert [f for f in diagnose(pinned) if f.rule == "reward_drop"]


def test_a_short_log_without_a_logged_spread_is_never_pinned_at_its_floor() -> None:
    """A format reward 0.25, 0.25, 0, 0 with no `/std` logged (trainer_state logs of older TRL): nothing says the
    completions all score 0, and the log had not reached the reward's floor (-1.25 two logs later); no drop, live or
    at the end. With its spread logged as 0 on those logs the same values are pinned at the floor."""
    values = [0.25, 0.25, 0.0, 0.0]
    bare = [{"step": i + 1, "rewards/fmt": v, "reward": v - 1.0, "entropy": 1.0} for i, v in enumerate(values)]
    assert not [f for f in finding_history(bare) if f.rule == "reward_drop"]
    spread = [dict(r, **{"rewards/fmt/std": 0.1 if r["step"] < 3 else 0.0}) for r in bare]
    for r in spread:
        r["rewards/fmt/mean"] = r.pop("rewards/fmt")
    assert [f for f in diagnose(spread) if f.rule == "reward_drop"]


def test_a_lucky_stretch_of_a_mostly_floor_reward_is_not_a_drop_at_any_length() -> None:
    """A penalty-like reward at its floor (-1.5) on most logs and +0.4..+1.9 on about a third of them, with one
    stretch of six high logs in nine: a mean of five such logs is far from normal (skewness ~0.9), and the normal
    test alone took the stretch for a level. Judged on shuffles of its own values, no length shows a drop."""
    rng = np.random.default_rng(11)
    values = np.where(rng.random(70) < 0.3, rng.choice([0.375, 0.5, 1.0, 1.875], 70), -1.5)
    values[40:49] = [1.125, 1.0, 0.375, 1.75, -1.5, -1.5, -1.5, 1.875, 1.875]
    values[49:56] = -1.5
    records = log(values, [1.2 if v > -1.5 else 0.0 for v in values])
    for n in range(50, 71):
        assert not [f for f in diagnose(records[:n]) if f.rule == "reward_drop"], n


def test_one_log_at_the_lowest_value_so_far_is_not_a_pinned_floor() -> None:
    """A recall reward 0.70 -> -0.08 -> -0.10 (spread 1.29, then 0.007, then 0): the third log is the lowest seen and
    has zero spread, but one such log is where a noisy reward sits now and then (it is at 1.5 two logs later). Two
    logs at the floor with zero spread are the unmistakable state."""
    assert not [f for f in diagnose(log([0.702, -0.082, -0.1], [1.286, 0.007, 0.0])) if f.rule == "reward_drop"]
    assert [f for f in diagnose(log([0.702, -0.1, -0.1], [1.286, 0.0, 0.0])) if f.rule == "reward_drop"]


def _slow(start: float, end: float, n: int, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.linspace(start, end, n) + rng.normal(0.0, noise, n), 0.0, 1.0)


def test_a_slow_steady_decline_without_a_single_fall_is_a_warning() -> None:
    """An accuracy reward that slides from 0.8 to 0.55 over 30 noisy logs (+-0.12 log to log) never loses half its
    gain at once; it is reported as a slow decline, a warning with the thirds and the trend in its message."""
    values = _slow(0.8, 0.55, 30, 0.12, seed=0)
    found = [f for f in diagnose(log(values)) if f.rule == "reward_drop"]
    assert [f.severity for f in found] == ["warning"], found
    assert "declined slowly" in found[0].message and found[0].evidence["trend_t"] <= -2.5
    assert found[0].metric == "rewards/r/mean"


def test_a_flat_noisy_reward_a_rising_one_and_rare_penalties_are_not_a_slow_decline() -> None:
    """The same noise without a trend (twenty seeds), a reward that rises, a decline that has come back up at the
    end, and a penalty-style reward (0.05 on most logs, -0.25 to -0.5 now and then, more often later): none is a
    decline."""
    for seed in range(20):
        flat = _slow(0.7, 0.7, 30, 0.12, seed=seed)
        assert not [f for f in diagnose(log(flat)) if "declined slowly" in f.message], seed
    rising = _slow(0.5, 0.8, 30, 0.12, seed=1)
    assert not [f for f in diagnose(log(rising)) if f.rule == "reward_drop"]
    back = np.concatenate([_slow(0.8, 0.55, 27, 0.05, seed=2), [0.8, 0.82, 0.8]])
    assert not [f for f in diagnose(log(back)) if "declined slowly" in f.message]
    penalty = np.full(30, 0.05)
    penalty[[12, 18, 21, 23, 24, 25, 27]] = [-0.5, -0.25, -0.25, -0.25, -0.5, -0.25, -0.25]
    assert not [f for f in diagnose(log(penalty, 0.1)) if f.rule == "reward_drop"]


def test_a_resumed_policy_that_training_made_worse_for_good_is_a_warning() -> None:
    """A policy resumed at its best (1.6-1.9 on the first four logs) falls to ~1.2 and never comes back: a third of
    its level lost, far less than half of a 'gain' it never made, but held for the rest of the run at many standard
    errors of its scatter."""
    rng = np.random.default_rng(5)
    values = np.concatenate(([1.59, 1.72, 1.73, 1.92], 1.19 + rng.normal(0, 0.08, 56)))
    (found,) = [f for f in diagnose(log(values)) if f.rule == "reward_drop"]
    assert found.severity == "warning" and found.evidence["sustained"] and found.step == 5, found.message
    assert "has not come back" in found.message and "standard errors" in found.message
    # The same fall that comes back within the log is a dip, and a flat noisy reward never fell.
    back = values.copy()
    back[30:] += 0.55
    assert not [f for f in diagnose(log(back)) if f.rule == "reward_drop"]
    flat = 1.2 + rng.normal(0, 0.08, 60)
    assert not drops(log(flat))
    # A third lost for a few logs at the end is not yet a fall that stayed.
    late = np.concatenate((1.7 + rng.normal(0, 0.05, 54), [1.15] * 6))
    assert not [f for f in diagnose(log(late)) if f.rule == "reward_drop" and f.evidence.get("sustained")]


def test_three_falling_logs_without_a_logged_spread_need_a_fourth_or_a_rising_reward() -> None:
    """verl logs no per-batch std: three noisy agent scores that happen to fall in order (one time in six by chance)
    are not a drop; four are, and so are three while another reward function rose by more (open-r1#255)."""

    def bare(values: list[float]) -> list[dict[str, float]]:
        return [{"step": i + 1, "critic/score/mean": v, "actor/entropy": 0.05} for i, v in enumerate(values)]

    assert not [f for f in diagnose(bare([0.77, 0.34, 0.31])) if f.rule == "reward_drop"]
    assert [f for f in diagnose(bare([0.77, 0.34, 0.31, 0.12])) if f.rule == "reward_drop"]
