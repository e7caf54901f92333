"""Benchmark: backtest the reward forecast on every real GRPO log found.

Each log is cut at 25 %, 50 % and 75 % of its steps; the forecast made from the cut log (with max_steps = the log's
last step) is compared with what happened: the final reward, taken as the mean of the last 5 % of its logs (at least
one), so that one noisy last batch does not decide. Printed per cut: the median absolute error as a share of the
reward's range (max - min of the logged reward over the whole log), and how often the forecast's 90 % band covers
the final reward; a cell marked L is a forecast that said its confidence is low (the cut log already collapsed and
recovered), and those cuts are counted on their own row too. Also the entropy-law ceiling where it fits, next to the
best reward actually reached.

    python benchmarks/forecast_backtest.py [--verbose]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from doctor_real_logs import labelled_logs  # noqa: E402

from grpo_dashboard.health import load_log_frame  # noqa: E402
from grpo_dashboard.health.forecast import forecast, reward_series  # noqa: E402

CUTS = (0.25, 0.5, 0.75)


def truth(values: np.ndarray) -> float:
    """The final reward: mean of the last 5 % of the logs (at least one)."""
    k = max(1, int(round(values.size * 0.05)))
    return float(np.mean(values[-k:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    rows: dict[float, list[tuple[float, bool]]] = {c: [] for c in CUTS}
    flagged: dict[float, list[bool]] = {c: [] for c in CUTS}  # coverage of the cuts said to be low confidence
    skipped: list[str] = []
    print(f"{'log':<52} {'n':>5} {'final':>7} " + " ".join(f"{'@' + str(int(c * 100)) + '%':>22}" for c in CUTS))
    for path, _ in labelled_logs():
        frame, hints = load_log_frame(path)
        series, source = reward_series(frame)
        if series is None or series.values.size < 16:
            skipped.append(f"{path.name} ({0 if series is None else series.values.size} reward logs)")
            continue
        steps, values = series.steps, series.values
        final, span = truth(values), float(values.max() - values.min()) or 1.0
        last = int(steps[-1])
        cells = []
        for cut in CUTS:
            at = int(steps[0] + cut * (last - steps[0]))
            fc = forecast(frame.upto(at), {}, max_steps=last)
            band = fc.reward_at_max_steps
            if band is None:
                cells.append(f"{'no fit':>22}")
                continue
            err = abs(band["value"] - final) / span
            covered = band["low"] <= final <= band["high"]
            rows[cut].append((err, covered))
            low_conf = fc.confidence == "low"
            if low_conf:
                flagged[cut].append(covered)
            mark = ("+" if covered else "-") + ("L" if low_conf else " ")
            cells.append(f"{band['value']:>7.3f} [{band['low']:.2f},{band['high']:.2f}]{mark}")
        print(f"{path.name[:50]:<52} {values.size:>5} {final:>7.3f} " + " ".join(f"{c:>22}" for c in cells))
        if args.verbose:
            fc = forecast(frame, hints)
            print(
                f"    source {source}; full-log model {fc.curve.model if fc.curve else None}; ceiling "
                f"{fc.reward_ceiling} ({fc.reasons.get('reward_ceiling', '')}); best reached {values.max():.3f}"
            )
    if skipped:
        print("skipped (too short to backtest): " + "; ".join(skipped))
    print("| figure | ours | peer | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    for cut in CUTS:
        r = rows[cut]
        if not r:
            continue
        med = float(np.median([e for e, _ in r]))
        cov = float(np.mean([c for _, c in r]))
        target = "<= 10 %, >= 80 %" if cut >= 0.5 else "- , >= 80 %"
        met = (med <= 0.10 or cut < 0.5) and cov >= 0.8
        print(
            f"| forecast of the final reward from the first {int(cut * 100)} % of {len(r)} real logs: median abs "
            f"error / reward range, 90 % band coverage | {med:.1%}, {cov:.0%} | - (no peer forecasts) | - | "
            f"{target} | {'yes' if met else 'NO'} |"
        )
    for cut in CUTS:
        if flagged[cut]:
            print(
                f"| low-confidence forecasts (collapsed and recovered before the cut) at {int(cut * 100)} %: "
                "covered | "
                f"{sum(flagged[cut])}/{len(flagged[cut])} | - | - | all | "
                f"{'yes' if all(flagged[cut]) else 'NO'} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
