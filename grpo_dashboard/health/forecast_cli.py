"""``python -m grpo_dashboard forecast LOG``: where the reward is heading, when to stop, and what it costs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from .forecast import SUMMARY, Forecast, forecast, worth_continuing
from .loaders import iter_log_records, load_log_frame

EXIT_OK, EXIT_UNREADABLE = 0, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_dashboard forecast",
        description=(
            "Forecast a TRL GRPO run from its log: the reward ceiling from the entropy-reward law, the plateau, the "
            "step where 95%% of the gain is reached, a recommended stop step, and the cost. Exit status: 0 a "
            "forecast was printed (numbers it cannot give say why), 2 the input cannot be read."
        ),
    )
    parser.add_argument("path", help="any log the doctor reads (trainer_state.json, a checkpoint dir, metrics.jsonl)")
    parser.add_argument("--json", action="store_true", help="print the forecast as JSON")
    parser.add_argument("--at-step", type=int, metavar="N", help="also forecast the reward at step N")
    parser.add_argument("--max-steps", type=int, metavar="N", help="the run's planned length (else from the log)")
    parser.add_argument("--price-per-hour", type=float, metavar="USD", help="price of one hour of the run's hardware")
    return parser


def forecast_main(argv: list[str] | None = None, price_per_hour: float | None = None, price_note: str = "") -> int:
    """Run the forecast CLI; ``price_per_hour`` comes from an HF Jobs flavor when the caller resolved one."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_UNREADABLE
    for name in ("at_step", "max_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"forecast: --{name.replace('_', '-')} must be a step >= 1, got {value}", file=sys.stderr)
            return EXIT_UNREADABLE
    price = args.price_per_hour if args.price_per_hour is not None else price_per_hour
    if price is not None and not price >= 0:
        print(f"forecast: --price-per-hour must be >= 0 USD, got {price}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        frame, hints = load_log_frame(args.path)
    except ValueError as exc:
        print(f"forecast: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    fc = forecast(
        frame,
        hints,
        at_step=args.at_step,
        price_per_hour=price,
        max_steps=args.max_steps,
        step_problem=step_order_problem(args.path),
    )
    if args.json:
        out = fc.to_dict()
        if args.at_step is None:
            out.pop("reward_at_step", None)
            out["reasons"].pop("reward_at_step", None)
        if price is not None:
            out["price_per_hour"] = price
        print(json.dumps(out, indent=2))
    else:
        render(str(hints.get("source", args.path)), fc, sys.stdout, price, price_note, args.at_step is not None)
    return EXIT_OK


def step_order_problem(path: str) -> str | None:
    """Why the log's train steps cannot be fitted over, or None: a step that goes backwards (a resumed run appended
    to the same log, or two runs merged) leaves two rewards for one step."""
    previous: int | None = None
    for index, (step, record) in enumerate(iter_log_records(path, {})):
        if "reward" not in record:
            continue
        if previous is not None and step < previous:
            return (
                f"the step column goes backwards (record {index + 1}: step {step} after step {previous}); a resumed "
                "or merged log cannot be forecast over steps: forecast each segment's log on its own"
            )
        previous = step
    return None


def _fmt(band: dict[str, Any] | None, unit: str = "", digits: int = 3) -> str:
    if band is None:
        return "-"
    v, lo, hi = band["value"], band["low"], band["high"]
    if isinstance(v, int) or digits == 0:
        return f"{unit}{v}" + (f" ({unit}{lo}-{unit}{hi})" if lo != hi else "")
    return f"{unit}{v:.{digits}g}" + (f" ({unit}{lo:.{digits}g} to {unit}{hi:.{digits}g})" if lo != hi else "")


def render(
    source: str, fc: Forecast, out: TextIO, price: float | None = None, price_note: str = "", asked: bool = False
) -> None:
    """Write the human-readable forecast."""
    out.write(f"GRPO forecast: {source}\n")
    out.write(f"  at step {fc.step}" + (f" of {fc.max_steps}" if fc.max_steps else "") + f"; {fc.source} reward")
    out.write(f" now {fc.reward_now:.3g}\n" if fc.reward_now is not None else "\n")
    if fc.curve is not None:
        out.write(
            f"  fit: {fc.curve.model} ({fc.curve.describe()}, weighted by 1 / held-out error squared; rmse "
            f"{fc.curve.rmse:.3g})\n"
        )
    if fc.confidence == "low":
        out.write(f"  confidence: LOW: {fc.reasons.get('confidence', '')}\n")
    for key, label, unit in SUMMARY:
        if key == "reward_at_step" and not asked:
            continue
        if key == "reward_at_max_steps":
            label = f"{label} ({fc.max_steps or '?'})"
        band = getattr(fc, key)
        text = _fmt(band, unit) if band is not None else f"- ({fc.reasons.get(key, 'not available')})"
        if key == "reward_ceiling" and fc.law:
            text += f"; R^2 {fc.law['r2']}, {fc.law['points']} points"
            if fc.law.get("reached") is not None:
                text += f", {fc.law['reached']:.0%} of it reached"
        out.write(f"  {label:<44} {text}\n")
    if price is not None:
        out.write(f"  price: ${price:g}/hour{price_note}\n")
    if fc.saving:
        out.write(
            f"  stopping at step {fc.saving['at_step']} would save ${fc.saving['value']:.2f} for an expected loss of "
            f"{fc.saving['reward_loss']:.3g} reward\n"
        )
    verdict = worth_continuing(fc)
    if verdict is not None and not verdict[0]:
        out.write(f"  continuing is not worth it: {verdict[1]}\n")
