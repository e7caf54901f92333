"""A run's console output as a log: TRL's printed dicts (as transformers writes them through the progress bar) and
verl's step lines, read by `doctor`, `forecast` and the run import alike; verl's keys read as TRL's by the doctor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grpo_dashboard.health import diagnose, doctor_main, load_log_frame, load_log_records
from grpo_dashboard.health.loaders import resolve_log_path


def _trl_dict(step: int, reward: float, as_text: bool = True) -> str:
    values = {
        "loss": 0.01 * step,
        "grad_norm": 0.5,
        "reward": reward,
        "entropy": 2.0 - 0.01 * step,
        "epoch": step / 40,
    }
    shown = ", ".join(f"'{k}': '{v:.4g}'" if as_text else f"'{k}': {v!r}" for k, v in values.items())
    return "{" + shown + "}"


def _bar(count: int, total: int = 40) -> str:
    return f" {count * 100 // total}%|##   | {count}/{total} [00:{count:02d}<00:30,  1.2it/s]"


def test_printed_trl_dicts_take_the_training_bar_step(tmp_path: Path) -> None:
    """logging_steps 5 with evaluations every 10 steps, as transformers 5 prints them (values as 4-digit strings)."""
    lines = ["/venv/transformers/training_args.py:1541: FutureWarning: deprecated", "Loading weights: 26/26 [00:00]"]
    lines.append("Loading weights: 100%|#####| 26/26 [00:00<00:00, 21806.02it/s]")
    for step in range(1, 21):
        lines.append(_bar(step) + ("\r" + _bar(step) if step % 5 else ""))
        if step % 5 == 0:
            lines.append(_trl_dict(step, 0.1 + 0.02 * step))
            lines.append(_bar(step))  # tqdm.write redraws the bar after the dict
        if step % 10 == 0:
            lines.append(" 50%|#####     | 3/6 [00:01<00:01]\r100%|##########| 6/6 [00:02<00:00]")
            lines.append(
                f"{{'eval_loss': '0.2', 'eval_reward': '{0.3 + 0.01 * step:.3g}', 'epoch': '{step / 40:.3g}'}}"
            )
            lines.append(_bar(step))
    lines.append("{'train_runtime': '31.2', 'train_samples_per_second': '2.5', 'train_loss': '0.1', 'epoch': '0.5'}")
    lines.append("{'model': 'Qwen', 'note': 'a printed dict without a number is not a record'}")
    log = tmp_path / "nohup.out"
    log.write_text("\n".join(lines) + "\n")
    records, hints = load_log_records(log)
    assert hints["format"] == "console"
    assert [(r["step"], "eval_reward" in r) for r in records] == [
        (5, False),
        (10, False),
        (10, True),
        (15, False),
        (20, False),
        (20, True),
    ]
    assert records[0]["reward"] == pytest.approx(0.2) and records[2]["eval_reward"] == pytest.approx(0.4)
    assert not any("train_runtime" in r for r in records)
    frame, _ = load_log_frame(log)
    assert frame.get("eval_reward").steps.tolist() == [10, 20] and frame.get("reward").steps.tolist() == [
        5,
        10,
        15,
        20,
    ]


def test_older_float_dicts_without_a_bar_are_numbered_in_order(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(_trl_dict(s, 0.1 * s, as_text=False) for s in range(1, 6)) + "\n")
    frame, _ = load_log_frame(log)
    assert frame.get("reward").steps.tolist() == [1, 2, 3, 4, 5]
    assert frame.get("reward").values.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def _verl_log(path: Path, n: int, clipfrac: np.ndarray, score: np.ndarray, val: dict[int, float]) -> Path:
    lines = ["(TaskRunner pid=2476) Initial validation metrics: {'val-core/gsm8k/acc/mean@4': 0.31}"]
    for i in range(n):
        step = i + 1
        parts = [
            f"step:{step}",
            "global_seqlen/mean:4185.0",
            f"actor/entropy:np.float64({0.9 - 0.001 * i})",
            f"actor/pg_clipfrac:{clipfrac[i]}",
            "actor/ppo_kl:0.0003",
            "actor/grad_norm:0.21",
            "actor/lr:1e-06",
            f"critic/score/mean:{score[i]}",
            "response_length/mean:412.5",
            "response_length/clip_ratio:0.01",
            "timing_s/step:31.2",
        ]
        if step in val:
            parts.append(f"val-core/gsm8k/acc/mean@4:{val[step]}")
            parts.append(f"val-aux/gsm8k/acc/best@4/mean:{val[step] + 0.1}")
        lines.append("(TaskRunner pid=2476) " + " - ".join(parts))
    path.write_text("\n".join(lines) + "\nTraceback (most recent call last):\n  ray.exceptions.RayTaskError\n")
    return path


def test_verl_step_lines_read_as_trl_metrics(tmp_path: Path) -> None:
    n = 30
    log = _verl_log(tmp_path / "verl", n, np.full(n, 0.002), np.linspace(0.2, 0.6, n), {10: 0.4, 20: 0.45, 30: 0.5})
    assert resolve_log_path(log)[1] == "console"  # no suffix: sniffed
    records, hints = load_log_records(log)
    assert hints["format"] == "verl console" and len(records) == n + 1
    assert records[0] == {"val-core/gsm8k/acc/mean@4": 0.31, "step": 0}  # the initial validation, before step 1
    assert records[1]["actor/entropy"] == pytest.approx(0.9) and records[1]["step"] == 1
    assert "timing_s/step" in records[1] and "val-aux/gsm8k/acc/best@4/mean" in records[10]  # read as logged
    frame, _ = load_log_frame(log)
    assert {"reward", "entropy", "clip_ratio/region_mean", "grad_norm", "completions/mean_length"} <= set(
        frame.columns
    )
    assert frame.get("completions/clipped_ratio").values[0] == pytest.approx(0.01)
    assert frame.get("eval_rewards/gsm8k/mean").steps.tolist() == [0, 10, 20, 30]
    assert "kl" not in frame.columns  # actor/ppo_kl is old-to-new policy, not the reference KL
    assert not [f for f in diagnose(frame) if f.rule in ("clip_high", "overfitting")]


def test_the_doctor_reads_a_verl_run_that_clips_and_overfits(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    n = 60
    clip = np.concatenate([np.full(30, 0.02), np.full(30, 0.33)])
    val = {10: 0.40, 20: 0.46, 30: 0.52, 40: 0.47, 50: 0.42, 60: 0.37}
    log = _verl_log(tmp_path / "verl_train.log", n, clip, np.linspace(0.2, 0.8, n), val)
    found = {f.rule: f for f in diagnose(load_log_frame(log)[0])}
    assert found["clip_high"].severity == "warning" and "0.33" in found["clip_high"].message
    assert "eval_rewards/gsm8k/mean fell from 0.52" in found["overfitting"].message
    doctor_main([str(log)])
    out = capsys.readouterr().out
    assert "clip_high" in out and "overfitting" in out


def test_not_a_console_log_says_what_it_reads(tmp_path: Path) -> None:
    log = tmp_path / "notes.txt"
    log.write_text("epoch 1 done\nloss went down\n")
    with pytest.raises(ValueError, match=r"notes.txt: no TRL log dict .* or verl step line"):
        load_log_frame(log)


def test_hostile_console_text_is_read_in_linear_time_and_refused(tmp_path: Path) -> None:
    # Long runs that a backtracking pattern would take quadratic time on, a huge literal, deep nesting.
    hostile = [
        "step:1 - " + "a" * 400_000,
        "{'" + "1" * 60_000 + "}",
        "9" * 300_000 + "/",
        "{'k': " + "1" * 100_000 + "}",
        "{'k': " + "[" * 50_000 + "}",
        "'a': '" * 50_000,
        "x:1 " * 100_000,
    ]
    log = tmp_path / "hostile.log"
    log.write_text("\n".join(hostile) + "\n")
    with pytest.raises(ValueError, match="no TRL log dict"):
        load_log_frame(log)
