"""A user's own TRL training script, as a TRL user writes it (not launched by the dashboard): GRPOTrainer on the
tiny local model for a few CPU steps, logging with `report_to` (trackio, wandb, tensorboard) and, with
`--dashboard DIR_OR_URL`, the dashboard's callback.

Usage: python tests/plain_trl_script.py MODEL_DIR OUTPUT_DIR [--steps N] [--report-to trackio,wandb] [--beta B]
[--dashboard DIR] [--run-name NAME] [--guard] [--health JSON] [--step-sleep S] [--hold-at N --hold FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

PROMPTS = [f"Say {c}:" for c in "abcdefghijklmnopqrstuvwxyz"] + ["Count to three:"] * 6


def letter_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """1 per `a` in the completion (a reward the tiny random model sometimes earns)."""
    return [float(c.count("a")) for c in completions]


def main() -> None:
    """Train for a few steps with the options given on the command line."""
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("output_dir")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--report-to", default="none")
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--dashboard", help="the dashboard's data directory (or URL): add its callback")
    p.add_argument("--run-name", default="plain-script")
    p.add_argument("--project", default="trl-proj", help="the trackio project")
    p.add_argument("--guard", action="store_true", help="the callback stops on an error finding")
    p.add_argument("--health", help="the callback's health options as JSON (guard, guard_persist, thresholds)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds each step waits (a slower run)")
    p.add_argument("--hold-at", type=int, default=0, help="after this step, wait until --hold exists")
    p.add_argument("--hold", help="the file whose creation lets the run go on past --hold-at")
    p.add_argument("--logging-steps", type=int, default=1)
    p.add_argument("--log-history", help="write the trainer's own log history (JSON) here after training")
    p.add_argument("--eval-steps", type=int, default=0, help="evaluate every N steps (0: never)")
    args = p.parse_args()

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=args.output_dir,
        run_name=args.run_name,
        project=args.project,
        max_steps=args.steps,
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=8,
        logging_steps=args.logging_steps,
        beta=args.beta,
        report_to=[r for r in args.report_to.split(",") if r and r != "none"] or "none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        log_completions=False,
        seed=0,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        per_device_eval_batch_size=8,
    )
    health: dict[str, Any] | None = {"guard": True} if args.guard else None
    if args.health:
        health = {**(health or {}), **json.loads(args.health)}
    callbacks: list[Any] = []
    if args.dashboard:
        from grpo_dashboard.integrations import DashboardCallback

        callbacks.append(DashboardCallback(args.dashboard, name=args.run_name, health=health))
    if args.step_sleep:

        class Slow(TrainerCallback):
            def on_step_end(self, *a: Any, **k: Any) -> None:
                time.sleep(args.step_sleep)

        callbacks.append(Slow())
    if args.hold_at and args.hold:
        hold_at, hold = args.hold_at, Path(args.hold)

        class Hold(TrainerCallback):
            # a test's watcher decides when the run goes on, so a slow machine cannot let it end unwatched
            def on_step_end(self, _args: Any, state: Any, *a: Any, **k: Any) -> None:
                deadline = time.monotonic() + 900
                while state.global_step == hold_at and not hold.exists() and time.monotonic() < deadline:
                    time.sleep(0.2)

        callbacks.append(Hold())
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=letter_reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        eval_dataset=Dataset.from_dict({"prompt": PROMPTS[:8]}) if args.eval_steps else None,
        callbacks=callbacks,
    )
    trainer.train()
    if args.log_history:
        with open(args.log_history, "w", encoding="utf-8") as f:
            json.dump(trainer.state.log_history, f)


if __name__ == "__main__":
    main()
