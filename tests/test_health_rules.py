"""Synthetic series for every health rule: a positive and a negative case each, plus the traps from issue 4."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from grpo_dashboard.health import DEFAULT_THRESHOLDS, RULE_IDS, Finding, diagnose, finding_history, resolve_thresholds
from grpo_dashboard.health.series import lattice_count


def healthy(n: int = 100, seed: int = 0, **metrics: Any) -> list[dict[str, Any]]:
    """A realistic healthy GRPO log: reward rising noisily 0.1 -> 0.6, entropy 4.3 -> 2.1, little truncation.

    Keyword arguments replace a metric (array of length n, or None to drop it); use ``m(key=...)`` for keys with
    slashes.
    """
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, n)
    reward = 0.1 + 0.5 * t + rng.normal(0, 0.08, n)
    base: dict[str, Any] = {
        "loss": rng.normal(0, 0.01, n),
        "grad_norm": 0.5 + 0.2 * rng.random(n),
        "learning_rate": np.full(n, 1e-3),
        "reward": reward,
        "reward_std": 0.3 + 0.02 * rng.random(n),
        "frac_reward_zero_std": np.clip(rng.normal(0.05, 0.03, n), 0, 1),
        "entropy": 4.3 - 2.2 * t + rng.normal(0, 0.05, n),
        "completions/mean_length": 10.5 + rng.random(n),
        "completions/max_length": np.full(n, 12.0),
        "completions/clipped_ratio": 0.05 * rng.random(n),
        "rewards/count_a/mean": reward,
        "rewards/count_a/std": 0.2 + 0.02 * rng.random(n),
        "clip_ratio/region_mean": np.zeros(n),
        "clip_ratio/high_mean": np.zeros(n),
        "clip_ratio/low_mean": np.zeros(n),
    }
    for key, value in metrics.items():
        base[key.replace("__", "/")] = value
    records = []
    for i in range(n):
        rec: dict[str, Any] = {"step": i + 1}
        for key, values in base.items():
            if values is None:
                continue
            v = values[i]
            rec[key] = None if v is None else float(v)
        records.append(rec)
    return records


def rules(findings: list[Finding], min_severity: str = "info") -> set[str]:
    rank = {"info": 0, "warning": 1, "error": 2}
    return {f.rule for f in findings if rank[f.severity] >= rank[min_severity]}


def only(findings: list[Finding], rule: str) -> Finding:
    matching = [f for f in findings if f.rule == rule]
    assert len(matching) == 1, f"expected one {rule} finding, got {[f.to_dict() for f in findings]}"
    return matching[0]


def ramp(n: int, a: float, b: float, start: int, stop: int | None = None) -> np.ndarray:
    """a until ``start``, then linear to b by ``stop`` (default: immediately), then b."""
    stop = start if stop is None else stop
    x = np.full(n, float(a))
    if stop > start:
        x[start:stop] = np.linspace(a, b, stop - start)
    x[stop:] = b
    return x


@pytest.fixture(autouse=True)
def no_rule_crashes(caplog: pytest.LogCaptureFixture):
    """A rule that raises fails the test: strict ``diagnose`` (tests/conftest.py) re-raises it; a non-strict one that
    reports it as a "rule failed" finding logs it too."""
    with caplog.at_level(logging.ERROR, logger="grpo_dashboard.health"):
        yield
    crashes = [r for r in caplog.records if r.name.startswith("grpo_dashboard.health")]
    assert not crashes, crashes[0].getMessage() + "\n" + (crashes[0].exc_text or "")


# ---- healthy runs: no warning or error ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_realistic_healthy_run_raises_nothing(seed: int) -> None:
    findings = diagnose(healthy(seed=seed), config={"beta": 0.0, "num_iterations": 1, "max_completion_length": 12})
    assert rules(findings, "warning") == set(), [f.to_dict() for f in findings]


def test_healthy_run_with_kl_and_off_policy_clipping_raises_nothing() -> None:
    n = 100
    rng = np.random.default_rng(3)
    kl = np.concatenate(([0.0], np.linspace(0.001, 0.08, n - 1))) * (1 + 0.1 * rng.random(n))
    region = 0.05 + 0.03 * rng.random(n)
    records = healthy(
        n, kl=kl, clip_ratio__region_mean=region, clip_ratio__high_mean=region / 2, clip_ratio__low_mean=region / 2
    )
    findings = diagnose(records, config={"beta": 0.04, "num_iterations": 2})
    assert rules(findings, "warning") == set(), [f.to_dict() for f in findings]


def test_healthy_long_run_with_fast_but_smooth_kl_growth_is_not_a_spike() -> None:
    n = 200
    kl = np.concatenate(([0.0, 0.0005, 0.002, 0.01, 0.05, 0.1, 0.2, 0.3], np.linspace(0.3, 0.35, n - 8)))
    findings = diagnose(healthy(n, kl=kl), config={"beta": 0.04})
    assert "kl_spike" not in rules(findings)


def test_every_finding_is_well_formed() -> None:
    records = healthy(entropy=ramp(100, 4.3, 0.0, 30, 50), grad_norm=np.where(np.arange(100) > 80, np.nan, 0.5))
    findings = diagnose(records)
    assert findings
    for f in findings:
        d = f.to_dict()
        assert d["rule"] in RULE_IDS
        assert d["severity"] in {"info", "warning", "error"}
        assert isinstance(d["step"], int) and d["message"] and d["remedy"]
        assert isinstance(d["evidence"], dict)
    rank = {"error": 2, "warning": 1, "info": 0}
    keys = [(-rank[f.severity], f.step) for f in findings]
    assert keys == sorted(keys), "causes first: worst severity, then earliest onset"


# ---- nan ----------------------------------------------------------------------------------------------------------


def test_nan_flags_non_finite_and_none_core_values() -> None:
    n = 60
    grad = np.full(n, 0.5)
    grad[40] = np.nan
    loss: list[Any] = [0.0] * n
    loss[45] = None
    records = healthy(n, grad_norm=grad, loss=np.array(loss, dtype=object))
    records[50]["reward"] = float("inf")
    f = only(diagnose(records), "nan")
    assert f.severity == "error" and f.step == 41 and f.metric == "grad_norm"
    assert {"grad_norm", "loss", "reward"} <= set(f.evidence["metrics"])


def test_nan_remedy_resumes_only_from_a_checkpoint_the_run_saved() -> None:
    n = 60
    grad = np.full(n, 0.5)
    grad[40:] = np.nan
    records = healthy(n, grad_norm=grad)
    saved = only(diagnose(records, {"save_strategy": "steps", "save_steps": 20}), "nan")
    assert saved.remedy.startswith("Resume from a checkpoint saved before step 41"), saved.remedy
    none = only(diagnose(records, {"save_strategy": "no"}), "nan")
    assert none.remedy.startswith("Rerun with checkpoints before step 41"), none.remedy
    assert "saved none to resume from, save_strategy no) with a lower learning_rate" in none.remedy
    late = only(diagnose(records, {"save_strategy": "steps", "save_steps": 50}), "nan")
    assert late.remedy.startswith("Rerun with checkpoints before step 41"), late.remedy


def test_nan_one_gradient_log_that_the_run_survived_is_a_warning() -> None:
    n = 60
    grad = np.full(n, 0.5)
    grad[40] = np.nan
    f = only(diagnose(healthy(n, grad_norm=grad)), "nan")
    assert f.severity == "warning" and f.step == 41 and "skipped or zeroed" in f.message
    grad[-1] = np.nan  # still non-finite at the end: not survived
    assert only(diagnose(healthy(n, grad_norm=grad)), "nan").severity == "error"


def test_nan_ignores_absent_keys_none_in_other_metrics_and_kl_when_beta_is_zero() -> None:
    records = healthy(60)
    for i, rec in enumerate(records):
        rec["rewards/maybe_none/mean"] = None  # a reward function that returns None is not a numerical fault
        rec["kl"] = None
        if i % 2:
            del rec["reward"]  # sparse keys: absent is not NaN
    assert "nan" not in rules(diagnose(records, config={"beta": 0.0}))


# ---- zero_variance -------------------------------------------------------------------------------------------------


def test_zero_variance_saturated_groups() -> None:
    n = 100
    records = healthy(n, frac_reward_zero_std=ramp(n, 0.05, 1.0, 60, 65), reward=ramp(n, 0.5, 1.0, 55, 65))
    f = only(diagnose(records), "zero_variance")
    assert f.severity == "error" and 58 <= f.step <= 66
    assert "saturated" in f.message


def test_zero_variance_starved_groups_in_old_logs_without_frac_key() -> None:
    n = 40
    records = healthy(n, frac_reward_zero_std=None, reward=np.zeros(n), reward_std=np.zeros(n))
    f = only(diagnose(records), "zero_variance")
    assert f.severity == "error" and f.step == 1 and "starved" in f.message and f.evidence["inferred"]


def test_zero_variance_warning_level_and_no_alarm_on_moderate_or_brief_values() -> None:
    n = 100
    warn = diagnose(healthy(n, frac_reward_zero_std=ramp(n, 0.1, 0.6, 70)))
    assert only(warn, "zero_variance").severity == "warning"
    moderate = healthy(n, frac_reward_zero_std=np.full(n, 0.35))
    blip = healthy(n, frac_reward_zero_std=np.where((np.arange(n) > 50) & (np.arange(n) < 53), 0.95, 0.05))
    assert "zero_variance" not in rules(diagnose(moderate)) | rules(diagnose(blip))


# ---- flat_reward --------------------------------------------------------------------------------------------------


def test_flat_reward_constant_function_is_an_error_when_it_is_the_only_signal() -> None:
    n = 30
    records = healthy(
        n,
        reward=np.full(n, 0.5),
        rewards__count_a__mean=np.full(n, 0.5),
        rewards__count_a__std=np.zeros(n),
    )
    f = only(diagnose(records), "flat_reward")
    assert f.severity == "error" and f.step == 1 and f.metric == "rewards/count_a/mean"


def test_flat_reward_one_of_two_functions_is_a_warning_and_old_keys_work() -> None:
    n = 30
    records = healthy(n, rewards__count_a__mean=None, rewards__count_a__std=None)
    for rec in records:
        rec["rewards/const"] = 1.0  # TRL < 0.17 key, no std
        rec["rewards/varied"] = rec["reward"]
    f = only(diagnose(records), "flat_reward")
    assert f.severity == "warning" and f.metric == "rewards/const"


def test_flat_reward_several_constant_functions_are_one_finding_naming_each() -> None:
    """Two format rewards that never fire beside a task reward that learns: one cause, one warning (not one each)."""
    n = 30
    records = healthy(n)
    for rec in records:
        rec["rewards/strict_format/mean"], rec["rewards/strict_format/std"] = 0.0, 0.0
        rec["rewards/soft_format/mean"], rec["rewards/soft_format/std"] = 0.0, 0.0
    flat = [f for f in diagnose(records) if f.rule == "flat_reward"]
    assert len(flat) == 1, flat
    f = flat[0]
    assert f.severity == "warning" and f.metric == "rewards/soft_format/mean" and f.step == 1
    assert f.evidence["functions"] == ["soft_format", "strict_format"]
    assert "2 reward functions are constant" in f.message
    assert "rewards/soft_format 0 since the first log" in f.message and "rewards/strict_format 0" in f.message
    assert "Call soft_format, strict_format on a few real completions" in f.remedy and "drop them" in f.remedy


def test_flat_reward_negative_varying_and_saturated_later_is_only_info() -> None:
    assert "flat_reward" not in rules(diagnose(healthy()))
    n = 60
    mean = ramp(n, 0.2, 1.0, 10, 30)
    std = np.where(np.arange(n) < 30, 0.3, 0.0)
    findings = diagnose(healthy(n, rewards__fmt__mean=mean, rewards__fmt__std=std))
    assert only(findings, "flat_reward").severity == "info"


# ---- entropy_collapse ---------------------------------------------------------------------------------------------


def test_entropy_collapse_from_high_learning_rate() -> None:
    n = 60
    rng = np.random.default_rng(1)
    entropy = np.clip(ramp(n, 4.3, 0.0, 25, 45) + rng.normal(0, 0.03, n), 0, None)
    findings = diagnose(healthy(n, entropy=entropy), config={"learning_rate": 5e-2})
    f = only(findings, "entropy_collapse")
    assert f.severity == "error" and 25 <= f.step <= 45
    assert "learning_rate (now 0.05)" in f.remedy


def test_entropy_collapse_in_the_first_three_records() -> None:
    records = [
        {"step": 1, "entropy": 1.0, "reward": 0.2},
        {"step": 2, "entropy": 0.3, "reward": 0.2},
        {"step": 3, "entropy": 0.01, "reward": 0.2},
    ]
    f = only(diagnose(records), "entropy_collapse")
    assert f.severity == "error" and f.step == 3


def test_entropy_near_zero_from_the_start_and_negatives() -> None:
    near_zero = diagnose(healthy(30, entropy=np.full(30, 0.02)))
    assert only(near_zero, "entropy_collapse").severity == "warning"
    noisy = 3.0 + np.random.default_rng(2).normal(0, 0.4, 100)
    assert "entropy_collapse" not in rules(diagnose(healthy(entropy=noisy)))
    assert "entropy_collapse" not in rules(diagnose(healthy()))  # 4.3 -> 2.1 is learning, not collapse


# ---- entropy_blowup -----------------------------------------------------------------------------------------------


def test_entropy_blowup_warning_and_error_with_truncation() -> None:
    n = 80
    entropy = ramp(n, 1.0, 3.5, 40, 50)
    assert only(diagnose(healthy(n, entropy=entropy)), "entropy_blowup").severity == "warning"
    both = diagnose(healthy(n, entropy=entropy, completions__clipped_ratio=ramp(n, 0.05, 0.7, 45, 50)))
    assert only(both, "entropy_blowup").severity == "error"


def test_entropy_blowup_negative_small_absolute_rise() -> None:
    n = 80
    assert "entropy_blowup" not in rules(diagnose(healthy(n, entropy=ramp(n, 0.1, 0.35, 40, 50))))


# ---- truncation ---------------------------------------------------------------------------------------------------


def test_truncation_error_and_warning_levels() -> None:
    n = 80
    stuck = 0.3 + np.random.default_rng(16).normal(0, 0.03, n)
    err = diagnose(healthy(n, completions__clipped_ratio=ramp(n, 0.05, 0.8, 20), reward=stuck))
    assert only(err, "truncation").severity == "error" and only(err, "truncation").step == 21
    warn = only(diagnose(healthy(n, completions__clipped_ratio=ramp(n, 0.05, 0.4, 20), reward=stuck)), "truncation")
    assert warn.severity == "warning"


def test_partial_truncation_while_reward_improves_is_info_and_young_episode_a_warning() -> None:
    """The tiny smoke task truncates ~96% of completions at 12 tokens yet learns: that is a note, not a page.

    Truncation present from the first logs is a note until the reward trend is known (then a warning if stuck);
    truncation that grows mid-run warns at once, before any trend is known.
    """
    n = 100
    clipped = 0.96 + 0.03 * np.sin(np.arange(n))
    f = only(diagnose(healthy(n, completions__clipped_ratio=clipped)), "truncation")
    assert f.severity == "info" and f.evidence["reward_improving"] == "improving"
    young = only(diagnose(healthy(12, completions__clipped_ratio=clipped[:12])), "truncation")
    assert young.severity == "info" and young.evidence["reward_improving"] is None
    stuck = only(diagnose(healthy(n, completions__clipped_ratio=clipped, reward=np.full(n, 0.3))), "truncation")
    assert stuck.severity == "error" and stuck.evidence["reward_improving"] == "stuck"
    grown = np.concatenate([np.full(20, 0.05), np.full(12, 0.8)])
    mid_run = only(diagnose(healthy(32, completions__clipped_ratio=grown)), "truncation")
    assert mid_run.severity == "warning" and mid_run.step == 21


def test_total_truncation_broken_by_one_batch_is_still_an_error() -> None:
    """max_completion_length=2: every completion cut for 9 logs, then one batch where one ends; no flip to a note."""
    clipped = np.array([0.94] + [1.0] * 9 + [0.94, 1.0])
    f = only(diagnose(healthy(12, completions__clipped_ratio=clipped)), "truncation")
    assert f.severity == "error"


def test_total_truncation_with_masking_explains_zero_gradients_and_is_not_entropy_collapse() -> None:
    """mask_truncated_completions=True with every completion cut: TRL logs entropy, loss and grad_norm as 0."""
    n = 60
    masked = (np.arange(n) // 10) % 2 == 1
    records = healthy(
        n,
        completions__clipped_ratio=np.where(masked, 1.0, 0.95),
        completions__mean_terminated_length=np.where(masked, 0.0, 6.0),
        entropy=np.where(masked, 0.0, 4.4),
        grad_norm=np.where(masked, 0.0, 1.0),
        reward=np.full(n, 0.02),
    )
    config = {"mask_truncated_completions": True, "max_completion_length": 12}
    findings = diagnose(records, config=config)
    assert "entropy_collapse" not in rules(findings)
    assert only(findings, "truncation").severity == "error"
    zero = only(findings, "zero_gradient")
    assert "mask_truncated_completions" in zero.message and "max_completion_length" in zero.remedy
    assert "entropy_collapse" in rules(diagnose(records, config={"max_completion_length": 12}))


def test_truncation_every_completion_at_cap_in_three_records() -> None:
    records = [{"step": s, "completions/clipped_ratio": 1.0, "completions/mean_length": 12.0} for s in (1, 2, 3)]
    f = only(diagnose(records, config={"max_completion_length": 12}), "truncation")
    assert f.severity == "error" and "max_completion_length (now 12)" in f.remedy


def test_truncation_on_a_log_shorter_than_the_window_is_a_note_when_every_log_cuts_a_large_share() -> None:
    """Real short logs: 4 logs cutting 40-70% at a 192 cap, or a single log cutting 91%: reported, as a note."""
    for clipped in ([0.65, 0.65, 0.4, 0.7], [0.9125]):
        records = [
            {"step": 5 * (i + 1), "completions/clipped_ratio": c, "completions/mean_terminated_length": 90.0}
            for i, c in enumerate(clipped)
        ]
        f = only(diagnose(records), "truncation")
        assert f.severity == "info" and f.step == 5
    one_low = [{"step": s, "completions/clipped_ratio": c} for s, c in ((1, 0.6), (2, 0.1), (3, 0.7))]
    assert "truncation" not in rules(diagnose(one_low))


def test_truncation_old_keys_lengths_pinned_at_cap() -> None:
    n = 20
    records = [{"step": i + 1, "completion_length": 256.0, "reward": 0.1} for i in range(n)]
    with_cap = only(diagnose(records, config={"max_completion_length": 256}), "truncation")
    assert with_cap.severity == "error" and with_cap.metric == "completion_length"
    without_cap = only(diagnose(records), "truncation")
    assert without_cap.severity == "warning"


def test_truncation_negatives_single_blip_and_varying_old_lengths() -> None:
    clipped = np.full(80, 0.05)
    clipped[50] = 1.0
    assert "truncation" not in rules(diagnose(healthy(80, completions__clipped_ratio=clipped)))
    lengths = 200 + 30 * np.random.default_rng(0).random(30)
    records = [{"step": i + 1, "completion_length": float(v)} for i, v in enumerate(lengths)]
    assert "truncation" not in rules(diagnose(records, config={"max_completion_length": 256}))


# ---- length_collapse / length_drift -------------------------------------------------------------------------------


def test_length_collapse_with_format_reward_rising() -> None:
    n = 80
    records = healthy(
        n,
        completions__mean_length=ramp(n, 200, 60, 40, 45),
        rewards__format__mean=ramp(n, 0.3, 0.9, 40, 45),
        rewards__format__std=np.full(n, 0.2),
    )
    f = only(diagnose(records), "length_collapse")
    assert f.severity == "warning" and 40 <= f.step <= 45 and "format" in f.message


def test_length_collapse_negative_and_empty_completions_error() -> None:
    assert "length_collapse" not in rules(diagnose(healthy()))
    n = 40
    empty = only(diagnose(healthy(n, completions__mean_length=ramp(n, 50, 1.0, 20))), "length_collapse")
    assert empty.severity == "error"


def test_lattice_count_reads_groups_per_log() -> None:
    rng = np.random.default_rng(3)
    assert lattice_count(rng.integers(0, 9, 30) / 8) == 8
    assert lattice_count(np.round(rng.integers(0, 4, 30) / 3, 4)) == 3  # printed with 4 digits
    assert lattice_count(rng.integers(0, 2, 30).astype(float)) == 1
    assert lattice_count(np.zeros(30)) is None  # never saturated: says nothing
    assert lattice_count(rng.random(30)) is None
    assert lattice_count(np.array([0.0, 1.0, 0.5])) is None  # too few logs


def _one_prompt_per_log(groups: int) -> list[dict[str, Any]]:
    """A run whose first logs happened to draw long-answer prompts: mean lengths of 4 completions, 105 and 100 tokens,
    then prompts answered in 8-37 tokens for eleven logs, then the run's usual 10-120 swing around 45."""
    rng = np.random.default_rng(11)
    lengths = [105.0, 100.0, 50.0, 80.0, 17.0, 27.0, 26.0, 19.0, 36.0, 8.0, 37.0, 28.0, 22.0, 15.0, 15.0]
    lengths += list(np.clip(rng.normal(48, 25, 45), 10, 120))
    n = len(lengths)
    frac = rng.integers(0, groups + 1, n) / groups if groups > 1 else (rng.random(n) < 0.3).astype(float)
    return healthy(n, completions__mean_length=np.array(lengths), frac_reward_zero_std=frac)


def test_length_collapse_needs_a_baseline_of_enough_prompts() -> None:
    # One prompt's group per log (frac_reward_zero_std only 0 or 1): four logs are four prompts, not a level.
    shown = [f for f in finding_history(_one_prompt_per_log(1)) if f.rule == "length_collapse"]
    assert not [f for f in shown if f.severity != "info" or f.evidence.get("peak_severity")], shown
    # The same lengths averaged over 8 groups a log are a fall of 32 prompts against 32: it is shown.
    shown = [f for f in finding_history(_one_prompt_per_log(8)) if f.rule == "length_collapse"]
    assert [f for f in shown if "warning" in (f.severity, f.evidence.get("peak_severity"))], shown
    # A real collapse of a one-prompt run is still caught: a few tokens on every log of the persistence window.
    records = _one_prompt_per_log(1)[:10]
    for rec, tokens in zip(records[4:], (4.0, 3.0, 3.0, 2.0, 2.0, 2.0), strict=True):
        rec["completions/mean_length"] = tokens
    assert only(diagnose(records), "length_collapse").severity == "error"
    # One prompt answered in 3 tokens after prompts answered at length is that prompt, not a collapse.
    for rec, tokens in zip(records[4:], (30.0, 20.0, 25.0, 18.0, 30.0, 3.0), strict=True):
        rec["completions/mean_length"] = tokens
    assert "length_collapse" not in rules(diagnose(records), "warning")


def test_length_drift_warning_without_reward_gain_and_info_with_it() -> None:
    n = 100
    rng = np.random.default_rng(4)
    grow = ramp(n, 100, 170, 30, 50) + rng.normal(0, 3, n)
    flat_reward = 0.3 + rng.normal(0, 0.03, n)
    warn = diagnose(healthy(n, completions__mean_length=grow, reward=flat_reward))
    assert only(warn, "length_drift").severity == "warning"
    info = diagnose(healthy(n, completions__mean_length=grow))
    assert only(info, "length_drift").severity == "info"
    steady = 100 + rng.normal(0, 8, n)
    assert "length_drift" not in rules(diagnose(healthy(n, completions__mean_length=steady)))


def test_a_length_that_grows_after_the_reward_stalled_is_not_credited_with_the_earlier_gain() -> None:
    # The reward rises over the first 40 logs at a steady length, then holds; only then does the length double. The
    # reward gained before the drift began is not a gain the longer completions bought.
    n = 200
    rng = np.random.default_rng(11)
    reward = ramp(n, 0.2, 0.6, 0, 40) + rng.normal(0, 0.03, n)
    grow = ramp(n, 100, 220, 100, 130) + rng.normal(0, 3, n)
    drift = only(diagnose(healthy(n, completions__mean_length=grow, reward=reward)), "length_drift")
    assert drift.severity == "warning" and "without a matching reward improvement" in drift.message
    # The same drift while the reward keeps rising with it is an info.
    rising = ramp(n, 0.2, 0.4, 0, 100) + ramp(n, 0.0, 0.3, 100, 200) + rng.normal(0, 0.03, n)
    assert only(diagnose(healthy(n, completions__mean_length=grow, reward=rising)), "length_drift").severity == "info"


def test_length_drift_is_judged_against_the_lengths_own_scatter() -> None:
    # One prompt's group per record: short answers (13 tokens) with a long one every fifth record. The trailing mean
    # of such a log stays far above a median of its first records by chance alone; the shift is within its scatter.
    n = 24
    swings = np.tile([13.0, 13.0, 13.0, 13.0, 150.0], 5)[:n]
    swings[:6] = 12.5
    flat = 0.05 + np.random.default_rng(7).normal(0, 0.01, n)
    assert "length_drift" not in rules(diagnose(healthy(n, completions__mean_length=swings, reward=flat)))
    # The same scatter around a level that really moved is a drift.
    moved = swings + np.where(np.arange(n) >= 8, 400.0, 0.0)
    assert (
        only(diagnose(healthy(n, completions__mean_length=moved, reward=flat)), "length_drift").severity == "warning"
    )


# ---- format_hacking -----------------------------------------------------------------------------------------------


def test_format_hacking_saturated_format_with_flat_accuracy() -> None:
    n = 80
    rng = np.random.default_rng(5)
    records = healthy(
        n,
        rewards__count_a__mean=None,
        rewards__count_a__std=None,
        rewards__format_reward__mean=ramp(n, 0.2, 1.0, 10, 40),
        rewards__format_reward__std=np.full(n, 0.1),
        rewards__accuracy_reward__mean=0.1 + rng.normal(0, 0.02, n),
        rewards__accuracy_reward__std=np.full(n, 0.2),
    )
    f = only(diagnose(records), "format_hacking")
    assert f.severity == "warning" and f.metric == "rewards/format_reward/mean"


def test_format_hacking_three_logs_open_r1_255() -> None:
    """open-r1#255: format 0.48 -> 0.86 while accuracy 0.16 -> 0.06 and length 387 -> 190 in three logs."""
    records = [
        {"step": s, "rewards/format_reward": f, "rewards/accuracy_reward": a, "completion_length": ln, "reward": f + a}
        for s, f, a, ln in ((10, 0.48, 0.16, 387.0), (20, 0.70, 0.10, 290.0), (30, 0.86, 0.06, 190.0))
    ]
    findings = diagnose(records)
    assert only(findings, "format_hacking").step <= 30
    assert "reward_drop" in rules(findings, "warning")  # the accuracy reward lost most of its level


def test_format_hacking_negative_both_rising() -> None:
    n = 80
    records = healthy(
        n,
        rewards__format_reward__mean=ramp(n, 0.2, 1.0, 10, 40),
        rewards__format_reward__std=np.full(n, 0.1),
        rewards__accuracy_reward__mean=ramp(n, 0.1, 0.6, 10, 70),
        rewards__accuracy_reward__std=np.full(n, 0.2),
    )
    assert "format_hacking" not in rules(diagnose(records))


# ---- reward_drop --------------------------------------------------------------------------------------------------


def test_reward_drop_format_lost() -> None:
    n = 90
    rng = np.random.default_rng(6)
    fmt_mean = np.clip(np.concatenate((np.linspace(0.1, 0.9, 50), np.full(40, 0.08))) + rng.normal(0, 0.03, n), 0, 1)
    f = only(diagnose(healthy(n, rewards__format__mean=fmt_mean, rewards__format__std=np.full(n, 0.2))), "reward_drop")
    assert f.severity == "error" and 50 <= f.step <= 54 and f.metric == "rewards/format/mean"


def test_reward_drop_negative_noisy_rising_and_small_dip() -> None:
    for seed in range(5):
        assert "reward_drop" not in rules(diagnose(healthy(seed=seed)))
    n = 80
    dip = np.concatenate((np.linspace(0.1, 0.6, 40), np.full(40, 0.55)))
    assert "reward_drop" not in rules(diagnose(healthy(n, reward=dip, rewards__count_a__mean=dip)))


def test_reward_drop_not_reported_once_the_latest_log_is_back_at_the_peak() -> None:
    """A per-function reward with two samples per group (values 0 / 0.1 / 0.2): one empty batch, then back at 0.2."""

    def log(values: list[float]) -> list[dict[str, float]]:
        return [
            {"step": i + 1, "reward": 0.3 + 0.01 * i, "rewards/c/mean": v, "rewards/c/std": 0.05}
            for i, v in enumerate(values)
        ]

    still_low = [0.05, 0.0, 0.1, 0.2, 0.2, 0.2, 0.0, 0.2, 0.0, 0.0, 0.1]
    assert "reward_drop" in rules(diagnose(log(still_low)), "warning")
    assert "reward_drop" not in rules(diagnose(log(still_low[:-1] + [0.2])))


# ---- reward_length_corr -------------------------------------------------------------------------------------------


def test_reward_length_corr_length_is_paid() -> None:
    n = 100
    rng = np.random.default_rng(7)
    length = 100 + np.cumsum(rng.normal(1.0, 4.0, n))
    reward = 0.004 * length + rng.normal(0, 0.02, n)
    f = only(diagnose(healthy(n, reward=reward, completions__mean_length=length)), "reward_length_corr")
    assert f.severity == "warning" and f.evidence["corr"] > 0.8


def test_reward_length_corr_negative_shared_trend_only() -> None:
    n = 100
    rng = np.random.default_rng(8)
    length = np.linspace(100, 130, n) + rng.normal(0, 2, n)  # trends with the reward but moves independently
    assert "reward_length_corr" not in rules(diagnose(healthy(n, completions__mean_length=length), {}), "warning")


# ---- kl_spike / kl_high / kl_outpaces_reward ----------------------------------------------------------------------


def test_kl_spike_mid_run() -> None:
    n = 100
    kl = 0.05 + 0.005 * np.random.default_rng(9).random(n)
    kl[60] = 2.5
    f = only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "kl_spike")
    # A one-log blip, back at its level on the next log, while beta is small and the reward rises: a note.
    assert f.severity == "info" and f.step == 61 and f.evidence["recovered"] and "blips" in f.message
    flat = healthy(n, kl=kl, reward=0.3 + 0.01 * np.random.default_rng(2).random(n))
    assert only(diagnose(flat, config={"beta": 0.04}), "kl_spike").severity == "warning"
    assert only(diagnose(healthy(n, kl=kl), config={"beta": 0.5}), "kl_spike").severity == "warning"
    kl[61] = kl[62] = 2.5  # a spike that holds for three logs is no blip
    assert only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "kl_spike").severity == "warning"


def test_kl_spike_early_explosion_that_decays() -> None:
    n = 80
    kl = np.concatenate(([30.0, 12.0, 3.0, 0.8], np.full(n - 4, 0.05)))
    f = only(diagnose(healthy(n, kl=kl)), "kl_spike")
    assert f.step == 1 and f.evidence["recovered"] and "first logs" in f.message


def test_kl_spike_in_the_last_window_that_fell_back_is_no_error() -> None:
    n = 100
    kl = 0.05 + 0.005 * np.random.default_rng(11).random(n)
    kl[96] = 3.0  # inside the last smoothing window, back at its level on the next log
    f = only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "kl_spike")
    assert f.severity != "error" and f.evidence["recovered"] and "came back down" in f.message
    kl[-1] = 3.0  # a spike on the very last log has not fallen back yet
    assert not only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "kl_spike").evidence["recovered"]


def test_kl_spike_explosion_still_high_is_an_error() -> None:
    n = 60
    kl = np.concatenate((np.full(40, 0.02), np.full(n - 40, 5.0)))
    f = only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "kl_spike")
    assert f.severity == "error" and f.step == 41


def test_kl_near_one_from_step_one_is_kl_high_info_not_a_blowup() -> None:
    n = 100
    kl = 1.0 + np.random.default_rng(10).normal(0, 0.03, n)
    findings = diagnose(healthy(n, kl=kl), config={"beta": 0.04})
    assert rules(findings, "warning") == set()
    f = only(findings, "kl_high")
    assert f.severity == "info" and f.step == 1 and f.evidence["flat"]
    assert "kl_spike" not in rules(findings) and "kl_outpaces_reward" not in rules(findings)


def test_kl_high_large_offset_is_a_warning_never_an_error() -> None:
    n = 50
    f = only(diagnose(healthy(n, kl=np.full(n, 8.0)), config={"beta": 0.04}), "kl_high")
    assert f.severity == "warning"


def test_kl_high_drift_and_beta_zero_gate() -> None:
    n = 100
    kl = np.concatenate((np.full(20, 0.01), np.geomspace(0.01, 3.0, 40), np.full(40, 3.0)))
    drift = only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "kl_high")
    assert drift.severity == "warning" and drift.step > 40
    silenced = diagnose(healthy(n, kl=kl), config={"beta": 0.0})
    assert not rules(silenced) & {"kl_high", "kl_spike", "kl_outpaces_reward"}


def test_kl_outpaces_reward() -> None:
    n = 100
    rng = np.random.default_rng(11)
    reward = 0.4 + rng.normal(0, 0.03, n)
    kl = np.linspace(0.05, 1.0, n) + rng.normal(0, 0.01, n)
    f = only(diagnose(healthy(n, kl=kl, reward=reward), config={"beta": 0.04}), "kl_outpaces_reward")
    assert f.severity == "warning" and f.metric == "kl"


def test_kl_outpaces_reward_negative_slow_kl_and_no_missing_kl_alarm() -> None:
    n = 100
    kl = np.linspace(0.01, 0.05, n)
    assert "kl_outpaces_reward" not in rules(diagnose(healthy(n, kl=kl), config={"beta": 0.04}))
    assert not {r for r in rules(diagnose(healthy(), config={"beta": 0.04})) if r.startswith("kl")}


# ---- clip_high ----------------------------------------------------------------------------------------------------


def test_clip_high_off_policy_upper_clip() -> None:
    n = 80
    region = ramp(n, 0.05, 0.35, 40)
    records = healthy(
        n, clip_ratio__region_mean=region, clip_ratio__high_mean=region * 0.9, clip_ratio__low_mean=region * 0.1
    )
    f = only(diagnose(records, config={"num_iterations": 2}), "clip_high")
    assert f.severity == "warning" and f.step == 41 and "epsilon_high" in f.remedy
    err = healthy(n, clip_ratio__region_mean=ramp(n, 0.05, 0.5, 40))
    assert only(diagnose(err, config={"num_iterations": 4}), "clip_high").severity == "error"


def test_clip_high_negative_on_policy_zeros_and_moderate_values() -> None:
    assert "clip_high" not in rules(diagnose(healthy(), config={"num_iterations": 1}))
    moderate = healthy(clip_ratio__region_mean=np.full(100, 0.12))
    assert "clip_high" not in rules(diagnose(moderate, config={"num_iterations": 2}))


def test_clip_high_leaves_out_each_generations_on_policy_first_update() -> None:
    # num_iterations 4: TRL logs 0 on every 4th update (the on-policy one) and 0.3 on the three that reuse it.
    n = 40
    region = np.where(np.arange(n) % 4 == 0, 0.0, 0.3)
    for config in ({"num_iterations": 4}, None):  # the period read from the zeros when the config is unknown
        f = only(diagnose(healthy(n, clip_ratio__region_mean=region), config=config), "clip_high")
        assert f.severity == "warning" and "the 10 on-policy first updates log 0" in f.message, f.message
        assert f.evidence["current"] == pytest.approx(0.3)
    # Zeros with no period are clipping that stopped, not on-policy updates: judged as logged.
    stopped = region.copy()
    stopped[[9, 17, 18, 30]] = 0.0
    assert "clip_high" not in rules(diagnose(healthy(n, clip_ratio__region_mean=stopped)), "warning")


def test_clip_high_warns_on_a_clip_ratio_climbing_far_above_its_working_level() -> None:
    # verl-style: 0.3-0.6 % for most of the run, then 5-11 % for five logs (the trust region binding, then a collapse).
    n = 50
    rng = np.random.default_rng(3)
    region = 0.003 + 0.003 * rng.random(n)
    region[45:] = [0.055, 0.089, 0.086, 0.099, 0.114]
    f = only(diagnose(healthy(n, clip_ratio__region_mean=region)), "clip_high")
    assert f.severity == "warning" and f.step == 46, (f.step, f.message)
    assert "rose from" in f.message and "median of the first" in f.message and "x;" in f.message, f.message
    assert f.evidence["baseline"] == pytest.approx(float(np.median(region[:12])), rel=0.3)
    # The same climb that stays under the floor (0.4 % -> 3 %) is not yet a trust-region problem.
    low = region.copy()
    low[45:] = 0.03
    assert "clip_high" not in rules(diagnose(healthy(n, clip_ratio__region_mean=low)))
    # A run that clips a high share from its first log (sequence-level ratios) is at its working point.
    steady = 0.15 + 0.01 * rng.random(n)
    assert "clip_high" not in rules(diagnose(healthy(n, clip_ratio__region_mean=steady)))


# ---- grad_spike / zero_gradient -----------------------------------------------------------------------------------


def test_grad_spike() -> None:
    n = 100
    grad = 0.5 + 0.1 * np.random.default_rng(12).random(n)
    grad[[40, 70]] = 20.0
    f = only(diagnose(healthy(n, grad_norm=grad)), "grad_spike")
    assert f.severity == "warning" and f.step == 41 and f.evidence["count"] == 2


def test_grad_spikes_in_a_run_without_signal_do_not_page_zero_gradient_does() -> None:
    n = 100
    grad = np.zeros(n)
    grad[[13, 47, 81]] = [3.0, 5.0, 2.0]
    findings = diagnose(healthy(n, grad_norm=grad, frac_reward_zero_std=np.full(n, 0.95)))
    assert "grad_spike" not in rules(findings)
    f = only(findings, "zero_gradient")
    assert f.severity == "error" and "frac_reward_zero_std" in f.message


def test_zero_gradient_warning_and_negatives() -> None:
    n = 100
    grad = np.where(np.arange(n) % 3 == 0, 0.5, 0.0)  # two thirds of the steps do nothing
    assert only(diagnose(healthy(n, grad_norm=grad)), "zero_gradient").severity == "warning"
    one_zero = 0.5 + np.zeros(n)
    one_zero[95] = 0.0
    assert "zero_gradient" not in rules(diagnose(healthy(n, grad_norm=one_zero)))
    assert "grad_spike" not in rules(diagnose(healthy()))


# ---- overfitting --------------------------------------------------------------------------------------------------


def _with_evals(records: list[dict[str, Any]], evals: dict[int, float]) -> list[dict[str, Any]]:
    out = []
    for rec in records:
        out.append(rec)
        if rec["step"] in evals:
            out.append({"step": rec["step"], "eval_reward": evals[rec["step"]], "eval_loss": 0.0, "epoch": 1.0})
    return out


def test_overfitting_train_up_eval_down() -> None:
    records = _with_evals(healthy(100), {20: 0.3, 40: 0.5, 60: 0.45, 80: 0.4, 100: 0.33})
    f = only(diagnose(records), "overfitting")
    assert f.severity == "warning" and f.step == 60 and f.metric == "eval_reward"


def test_overfitting_negative_eval_rising_or_too_few_evals() -> None:
    assert "overfitting" not in rules(diagnose(_with_evals(healthy(100), {20: 0.2, 40: 0.3, 60: 0.4, 80: 0.5})))
    assert "overfitting" not in rules(diagnose(_with_evals(healthy(100), {50: 0.5, 100: 0.3})))


# ---- plateau ------------------------------------------------------------------------------------------------------


def test_plateau_reward_exactly_zero_on_most_steps() -> None:
    n = 60
    reward = np.where(np.arange(n) % 7 == 3, 0.125, 0.0)
    findings = diagnose(healthy(n, reward=reward, rewards__count_a__mean=reward))
    f = only(findings, "plateau")
    assert f.severity == "warning" and f.evidence["kind"] == "constant" and f.step <= 5


def test_plateau_noisy_flat_reward_and_saturated_reward_is_info() -> None:
    n = 100
    flat = 0.3 + np.random.default_rng(13).normal(0, 0.05, n)
    f = only(diagnose(healthy(n, reward=flat, rewards__count_a__mean=flat)), "plateau")
    assert f.severity == "warning" and f.evidence["kind"] == "trend"
    top = np.concatenate((np.linspace(0.2, 1.0, 40), np.ones(60)))
    assert only(diagnose(healthy(n, reward=top, rewards__count_a__mean=top)), "plateau").severity == "info"


def test_plateau_negative_noisy_but_rising_reward() -> None:
    n = 100
    rng = np.random.default_rng(14)
    noisy_rising = np.linspace(0.1, 0.4, n) + rng.normal(0, 0.15, n)
    assert "plateau" not in rules(diagnose(healthy(n, reward=noisy_rising, rewards__count_a__mean=noisy_rising)))


# ---- duplicate_completions ----------------------------------------------------------------------------------------


def _completions(step: int, distinct_per_group: int, groups: int = 4, g: int = 8) -> list[dict[str, Any]]:
    return [
        {"step": step, "prompt": f"say apple {p}:", "completion": f"a{p}-{i % distinct_per_group}", "reward": 0.5}
        for p in range(groups)
        for i in range(g)
    ]


def test_duplicate_completions_levels_and_negative() -> None:
    records = healthy(40)
    identical = _completions(39, 1) + _completions(40, 1)
    f = only(diagnose(records, completions=identical), "duplicate_completions")
    assert f.severity == "error" and f.step == 39
    mostly = _completions(40, 3)
    assert only(diagnose(records, completions=mostly), "duplicate_completions").severity == "warning"
    distinct = _completions(40, 8)
    assert "duplicate_completions" not in rules(diagnose(records, completions=distinct))
    assert "duplicate_completions" not in rules(diagnose(records))


def test_duplicate_completions_same_answer_for_every_prompt_and_chat_messages() -> None:
    rows = [
        {
            "step": 5,
            "prompt": [{"role": "user", "content": f"q{p}"}],
            "completion": [{"role": "assistant", "content": "42"}],
        }
        for p in range(8)
    ]
    f = only(diagnose(healthy(10), completions=rows), "duplicate_completions")
    assert f.evidence["across_prompts"] == 1.0


# ---- key generations, sparse keys, thresholds ---------------------------------------------------------------------


def test_old_key_generation_healthy_and_collapsed() -> None:
    n = 80
    rng = np.random.default_rng(15)
    t = np.linspace(0, 1, n)
    old = [
        {
            "step": i + 1,
            "loss": 0.0,
            "grad_norm": float(0.5 + 0.1 * rng.random()),
            "reward": float(0.1 + 0.5 * t[i] + rng.normal(0, 0.05)),
            "reward_std": float(0.3 + 0.05 * rng.random()),
            "rewards/accuracy_reward": float(0.1 + 0.5 * t[i] + rng.normal(0, 0.05)),
            "completion_length": float(180 + 20 * rng.random()),
            "kl": float(0.001 + 0.01 * t[i]),
        }
        for i in range(n)
    ]
    assert rules(diagnose(old, config={"max_completion_length": 256}), "warning") == set()
    for i, rec in enumerate(old):
        if i >= 40:
            rec["reward_std"] = 0.0
            rec["completion_length"] = 256.0
    found = rules(diagnose(old, config={"max_completion_length": 256}), "warning")
    assert {"zero_variance", "truncation"} <= found


def test_sparse_keys_generation_metrics_on_every_other_record() -> None:
    """num_iterations=2: loss-side records carry no reward/completion keys."""
    records = []
    for rec in healthy(120, entropy=ramp(120, 4.3, 0.01, 60, 70)):
        if rec["step"] % 2 == 0:
            rec = {
                k: v for k, v in rec.items() if k in ("step", "loss", "grad_norm", "entropy", "clip_ratio/region_mean")
            }
        records.append(rec)
    findings = diagnose(records, config={"num_iterations": 2})
    assert rules(findings, "warning") == {"entropy_collapse"}


def test_train_slash_and_eval_slash_tracker_spellings_are_understood() -> None:
    records = [{("train/" + k if k != "step" else k): v for k, v in r.items()} for r in healthy(60)]
    records[30]["train/grad_norm"] = float("nan")
    assert "nan" in rules(diagnose(records))


def test_unsorted_and_repeated_steps_last_write_wins() -> None:
    records = healthy(60, entropy=np.full(60, 3.0))
    resumed = [dict(r, entropy=0.01) for r in records[40:]]  # a resume re-logs steps 41-60 with a collapse
    f = only(diagnose(records + resumed), "entropy_collapse")
    assert f.step == 41


def test_thresholds_are_data() -> None:
    records = healthy(completions__clipped_ratio=np.full(100, 0.35), reward=np.full(100, 0.3))
    assert only(diagnose(records), "truncation").severity == "warning"
    # Under a raised warning level the same truncation is only the steady-truncation note, and gone above its level.
    assert only(diagnose(records, thresholds={"truncation.warn": 0.4}), "truncation").severity == "info"
    assert "truncation" not in rules(diagnose(records, thresholds={"truncation.warn": 0.4, "truncation.note": 0.4}))
    assert "truncation" not in rules(diagnose(records, thresholds={"truncation": {"enabled": False}}))
    assert only(diagnose(records, thresholds={"truncation.error": "0.3"}), "truncation").severity == "error"
    with pytest.raises(ValueError, match="did you mean truncation.warn"):
        diagnose(records, thresholds={"truncation.wran": 0.4})
    with pytest.raises(ValueError, match="whole number"):
        resolve_thresholds({"truncation.persist": 2.5})


def test_every_rule_has_an_enabled_switch_and_documented_thresholds() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "health.md").read_text()
    for rule in RULE_IDS:
        assert DEFAULT_THRESHOLDS[f"{rule}.enabled"] is True
        assert f"`{rule}`" in doc
    for key in DEFAULT_THRESHOLDS:
        if not key.endswith(".enabled"):
            assert key.split(".", 1)[1] in doc, key


def test_empty_and_degenerate_inputs() -> None:
    assert diagnose([]) == []
    assert diagnose([{"step": 1}]) == []
    assert [(f.rule, f.step) for f in diagnose([{"step": 1, "reward": None}])] == [("nan", 1)]  # a None reward
    assert diagnose([{"step": 1, "samples": [{"a": 1}], "note": "text", "reward": 0.5}]) == []
    assert diagnose(healthy(5)) == []  # five healthy steps: nothing to flag


def test_hundred_thousand_steps_diagnose_quickly() -> None:
    import time

    n = 100_000
    records = healthy(n, seed=1)
    start = time.perf_counter()
    findings = diagnose(records, config={"beta": 0.0})
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0, elapsed
    assert rules(findings, "warning") <= {"plateau"}


@pytest.mark.parametrize("seed", range(20))
def test_random_garbage_logs_never_crash_a_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = [
        "loss",
        "grad_norm",
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "entropy",
        "kl",
        "completion_length",
        "completions/mean_length",
        "completions/clipped_ratio",
        "completions/mean_terminated_length",
        "rewards/format_reward/mean",
        "rewards/format_reward/std",
        "rewards/accuracy_reward",
        "clip_ratio",
        "clip_ratio/region_mean",
        "clip_ratio/high_mean",
        "clip_ratio/low_mean",
        "eval_reward",
        "learning_rate",
    ]
    specials = [None, float("nan"), float("inf"), -float("inf"), 0.0, 1.0, -1.0, 1e300, "text", [1, 2], {"a": 1}, True]
    records = []
    for _ in range(int(rng.integers(0, 80))):
        rec: dict[str, Any] = {"step": int(rng.integers(0, 50)) if rng.random() < 0.9 else None}
        for key in rng.choice(keys, size=int(rng.integers(0, len(keys))), replace=False):
            rec[str(key)] = specials[int(rng.integers(len(specials)))] if rng.random() < 0.2 else float(rng.normal())
        records.append(rec)
    config = {
        "beta": [None, 0.0, 0.04][seed % 3],
        "num_iterations": [None, 1, 2][seed % 3],
        "mask_truncated_completions": seed % 2 == 0,
        "max_completion_length": [None, 12][seed % 2],
    }
    rows = [
        {"step": i % 3, "prompt": [None, "p", ["x"]][i % 3], "completion": ["a", None, 3][i % 3]} for i in range(9)
    ]
    for finding in diagnose(records, config=config, completions=rows, strict=True):  # a rule that raises fails it
        assert finding.rule in RULE_IDS
        finding.to_dict()


def test_a_constant_task_reward_is_a_warning_when_the_total_still_moves() -> None:
    """verl-agent: the environment's episode reward is 0 on every log, while the total (critic/score) carries the
    invalid-action penalty that fades as the policy learns the action format: it learns from that part only."""
    n = 30
    penalty = -0.08 * np.exp(-np.arange(n) / 6.0)
    records = [
        {"step": i + 1, "critic/score/mean": float(penalty[i]), "episode/reward/mean": 0.0, "actor/entropy": 0.8}
        for i in range(n)
    ]
    f = only(diagnose(records), "flat_reward")
    assert f.metric == "rewards/episode_reward/mean" and f.severity == "warning", f.message
    assert "total reward still moves" in f.message and "no other reward does either" not in f.message
    for r in records:
        r["critic/score/mean"] = 0.0
    assert only(diagnose(records), "flat_reward").severity == "error"


def test_an_entropy_of_exactly_zero_on_every_log_is_not_computed_and_a_rising_low_one_is_no_collapse() -> None:
    # A hand-written GRPO loop that logs `entropy` as 0.0 without computing it: diverse samples, no collapse.
    n = 40
    placeholder = healthy(n, entropy=np.zeros(n))
    assert "entropy_collapse" not in rules(diagnose(placeholder))
    from grpo_dashboard.health.doctor_cli import coverage_notes
    from grpo_dashboard.health.series import MetricFrame

    notes = coverage_notes(MetricFrame.from_records(placeholder), {})
    assert any("entropy is exactly 0 on every log" in note for note in notes), notes
    # Low from the first log (short formulaic actions) but climbing steadily: not a policy stuck deterministic.
    rising = healthy(16, entropy=np.linspace(0.03, 0.09, 16))
    assert "entropy_collapse" not in rules(diagnose(rising))
    stuck = healthy(16, entropy=0.03 + 0.002 * np.random.default_rng(1).random(16))
    assert only(diagnose(stuck), "entropy_collapse").severity == "warning"


def test_a_reward_length_correlation_carried_by_one_record_is_not_reported() -> None:
    """An Unsloth run dead from its second log: every completion at the 128 cap with reward 0, and the first log at
    125 tokens with reward 0.024. The correlation is -1.00 from that one record; without it both series are flat."""
    n = 40
    length = np.full(n, 128.0)
    reward = np.zeros(n)
    length[0], reward[0] = 124.95, 0.024
    records = healthy(n, completions__mean_length=length, reward=reward)
    assert "reward_length_corr" not in rules(diagnose(records))
    # A correlation every record shares still is one.
    rng = np.random.default_rng(2)
    grow = 100.0 + np.cumsum(rng.uniform(0.5, 3.0, n))
    paid = 0.002 * grow + rng.normal(0, 0.0005, n)
    assert "reward_length_corr" in rules(diagnose(healthy(n, completions__mean_length=grow, reward=paid)))


def test_a_nan_kl_with_a_finite_loss_and_gradient_is_a_warning_that_says_the_update_was_finite() -> None:
    """TRL 0.15 logged `kl` as NaN on one log while that log's loss and grad_norm were finite: the statistic failed,
    the update did not. NaN gradients too stay an error."""
    n = 30
    kl = np.full(n, 0.001)
    kl[12] = np.nan
    f = only(diagnose(healthy(n, kl=kl), config={"beta": 0.04}), "nan")
    assert f.severity == "warning" and "update itself was not NaN" in f.message, f.message
    grad = 0.5 + np.zeros(n)
    grad[12] = np.nan
    both = only(diagnose(healthy(n, kl=kl, grad_norm=grad), config={"beta": 0.04}), "nan")
    assert both.severity == "error" and "in the weights" in both.message
