"""Forecast a GRPO run from its log: the reward ceiling the entropy law implies, the plateau, a stop step, the cost.

Two fits, both on the log so far and nothing else:

* **Entropy law** (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"): across models and tasks the
  reward follows ``R = -a * exp(H) + b`` as the policy entropy ``H`` falls, so the reward at ``H = 0`` -- the
  ceiling the run can reach by spending its entropy -- is ``b - a``. Fitted by least squares on ``(H, R)`` pairs;
  reported with its R^2, or with the reason it does not apply (too few points, entropy not falling, no rise).
* **Saturating curve of reward over steps**: an exponential approach ``A + B * exp(-(x - x0) / tau)``, a power-law
  approach ``A + B * ((x - x0) / s + 1) ** -alpha``, a constant and a level (the recent mean held flat), each fitted
  for every value on a grid of its shape parameter with the linear parameters in closed form. Each family is scored
  by its error on the last fifth of the log when fitted on the first four fifths, and the forecast weights the
  families by 1 / that error squared (on the real logs this beat picking the single best family, and weights of
  1 / error: see benchmarks/forecast_backtest.py). The band comes from a residual bootstrap plus the held-out error.
  Runs with enough evaluations are forecast on the eval reward.

Numbers come with ``{value, low, high}`` (a 90 % band) or ``None`` with a ``reason``. Only numpy is needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .fits import _BOOTSTRAP, _MAX_POINTS, FLAT_MODELS, MIN_POINTS, Blend, binned, fit_reward_curve, level_window
from .fits import bootstrap as resampled_draws
from .series import MetricFrame, Series

_BAND = (5.0, 95.0)
_STOP_GAIN = 0.02  # remaining gain below this share of the reward's range is not worth the steps
_EVAL_MIN = 5


# What a forecast reports, in display order: (key, label, unit); the CLI and the Run detail panel both show these.
SUMMARY: tuple[tuple[str, str, str], ...] = (
    ("reward_ceiling", "reward ceiling (entropy law R = -a*e^H + b)", ""),
    ("plateau_reward", "plateau reward", ""),
    ("plateau_step", "95% of the gain at step", ""),
    ("stop_step", "recommended stop step", ""),
    ("reward_at_max_steps", "reward at max_steps", ""),
    ("reward_at_step", "reward at the asked step", ""),
    ("cost_so_far", "cost so far", "$"),
    ("cost_to_plateau", "cost to the plateau", "$"),
    ("cost_to_max_steps", "cost to max_steps", "$"),
)


@dataclass
class Forecast:
    """What the forecast says about a run; every number is ``{value, low, high}`` or None with a reason."""

    source: str | None = None
    step: int | None = None
    max_steps: int | None = None
    reward_now: float | None = None
    reward_range: tuple[float, float] = (0.0, 1.0)
    reward_ceiling: dict[str, Any] | None = None
    plateau_reward: dict[str, Any] | None = None
    plateau_step: dict[str, Any] | None = None
    stop_step: dict[str, Any] | None = None
    reward_at_max_steps: dict[str, Any] | None = None
    reward_at_step: dict[str, Any] | None = None
    cost_so_far: dict[str, Any] | None = None
    cost_to_plateau: dict[str, Any] | None = None
    cost_to_max_steps: dict[str, Any] | None = None
    saving: dict[str, Any] | None = None
    curve: Blend | None = None
    law: dict[str, Any] | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    # "low" when the log so far already collapsed and recovered (the reward bands then span the levels it visited)
    confidence: str = "normal"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the named keys, each a ``{value, low, high}`` object or None, plus ``reasons``."""
        keys = (
            "reward_ceiling",
            "plateau_reward",
            "plateau_step",
            "stop_step",
            "reward_at_max_steps",
            "reward_at_step",
            "cost_so_far",
            "cost_to_plateau",
            "cost_to_max_steps",
            "saving",
        )
        out: dict[str, Any] = {
            "source": self.source,
            "step": self.step,
            "max_steps": self.max_steps,
            "reward_now": _round(self.reward_now),
            "reward_range": list(self.reward_range),
        }
        for key in keys:
            out[key] = getattr(self, key)
        out["model"] = self.curve.model if self.curve else None
        out["weights"] = self.curve.describe() if self.curve else None
        out["fit"] = (
            {"rmse": _round(self.curve.rmse), "holdout_rmse": _round(self.curve.holdout_rmse)} if self.curve else None
        )
        out["entropy_law"] = self.law
        out["reasons"] = dict(self.reasons)
        out["confidence"] = self.confidence
        return out


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def _band(value: float, low: float, high: float, digits: int = 6) -> dict[str, Any]:
    lo, hi = min(low, high), max(low, high)
    return {
        "value": _round(value, digits),
        "low": _round(min(lo, value), digits),
        "high": _round(max(hi, value), digits),
    }


def entropy_law(entropy: Series | None, reward: Series | None) -> tuple[dict[str, Any] | None, str | None]:
    """Fit R = -a*exp(H) + b on aligned (entropy, reward) logs; the ceiling is b - a (R at H = 0)."""
    if entropy is None:
        return None, "no entropy logged (TRL logs `entropy` from 0.19; needed for the entropy-reward law)"
    if reward is None:
        return None, "no reward logged"
    e, r = entropy.finite(), reward.finite()
    steps, ie, ir = np.intersect1d(e.steps, r.steps, assume_unique=True, return_indices=True)
    h, y = e.values[ie], r.values[ir]
    if h.size > _MAX_POINTS:
        h, y = binned(h, y)  # consecutive logs averaged: pairs stay pairs
    if h.size < MIN_POINTS:
        return None, f"too few (entropy, reward) pairs ({h.size}; at least {MIN_POINTS} needed)"
    k = max(2, h.size // 5)
    h_start, h_end = float(np.median(h[:k])), float(np.median(h[-k:]))
    if not h_end < 0.9 * h_start:
        return None, (
            f"entropy is not falling ({h_start:.3g} -> {h_end:.3g} nats): the law describes reward bought with "
            "entropy, and this run has not spent any"
        )
    eh = np.exp(np.clip(h, -50, 50))
    basis = np.stack([np.ones_like(eh), -eh], axis=1)
    (b, a), *_ = np.linalg.lstsq(basis, y, rcond=None)
    pred = basis @ np.array([b, a])
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else 0.0
    if a <= 0:
        return None, "the reward does not rise as entropy falls (fitted a <= 0): the law does not fit this run"
    if r2 < 0.2:
        return None, f"the law does not fit this run (R^2 {r2:.2f} < 0.2)"
    ceiling = float(b - a)
    # Band on the ceiling from a pairs bootstrap.
    rng = np.random.default_rng(1)
    draws = []
    for _ in range(_BOOTSTRAP):
        idx = rng.integers(0, h.size, h.size)
        (bb, aa), *_ = np.linalg.lstsq(basis[idx], y[idx], rcond=None)
        draws.append(bb - aa)
    lo, hi = np.percentile(draws, _BAND)
    now = float(np.mean(y[-k:]))
    return {
        **_band(ceiling, float(lo), float(hi)),
        "a": _round(float(a)),
        "b": _round(float(b)),
        "r2": _round(r2, 4),
        "points": int(h.size),
        "reached": _round(now / ceiling, 4) if ceiling > 0 and now >= 0 else None,
        "entropy_now": _round(h_end),
    }, None


def reward_series(frame: MetricFrame) -> tuple[Series | None, str]:
    """The series the forecast follows: the eval reward when there are enough evaluations, else the train reward."""
    for key in ("eval_reward",):
        ev = frame.get(key)
        if ev is not None and ev.finite().values.size >= _EVAL_MIN:
            return ev.finite(), "eval"
    reward = frame.get("reward")
    return (reward.finite() if reward is not None else None), "train"


def _seconds_per_step(frame: MetricFrame, hints: Mapping[str, Any]) -> float | None:
    step_time = frame.get("step_time")
    if step_time is not None and step_time.finite().values.size:
        return float(np.median(step_time.finite().values))
    runtime, last = frame.get("train_runtime"), frame.last_step()
    if runtime is not None and runtime.finite().values.size and last:
        return float(runtime.finite().values[-1]) / last
    elapsed = hints.get("elapsed_s")
    if elapsed and last:
        return float(elapsed) / last
    return None


def forecast(
    frame: MetricFrame,
    hints: Mapping[str, Any] | None = None,
    at_step: int | None = None,
    price_per_hour: float | None = None,
    max_steps: int | None = None,
    step_problem: str | None = None,
    bootstrap: bool = True,
) -> Forecast:
    """Forecast the run behind ``frame``.

    Args:
        frame: the run's metrics (``MetricFrame.from_records`` or ``load_log_frame``).
        hints: config hints (``max_steps``, ``elapsed_s`` = wall seconds so far).
        at_step: also forecast the reward at this step (``reward_at_step``).
        price_per_hour: what one hour of the run's hardware costs (all GPUs), in USD; enables the cost keys.
        max_steps: the run's planned length, overriding ``hints["max_steps"]``.
        step_problem: why the log's step column cannot be trusted (e.g. it goes backwards), found by the caller
            on the raw records (a MetricFrame is already sorted); every step-based number then says so.
        bootstrap: False skips the bootstrap (bands from the held-out error alone): for a runs table of many runs.
    """
    hints = hints or {}
    out = Forecast()
    entropy = frame.get("entropy")
    law, why = entropy_law(entropy, frame.get("reward"))
    out.law = law
    if law is None:
        out.reasons["reward_ceiling"] = why or "not available"
    else:
        out.reward_ceiling = {k: law[k] for k in ("value", "low", "high")}
    series, source = reward_series(frame)
    out.source = source
    planned = max_steps if max_steps is not None else hints.get("max_steps")
    out.max_steps = int(planned) if isinstance(planned, (int, float)) and planned and planned > 0 else None
    if series is None or series.values.size == 0:
        for key in ("plateau_reward", "plateau_step", "stop_step", "reward_at_max_steps", "reward_at_step"):
            out.reasons[key] = "no reward logged"
        return out
    x, y = series.steps.astype(float), series.values
    lo, hi = min(0.0, float(y.min())), max(1.0, float(y.max()))
    out.reward_range = (round(lo, 6), round(hi, 6))
    out.step = int(frame.last_step() or x[-1])
    k = max(1, min(5, y.size // 5))
    out.reward_now = float(np.mean(y[-k:]))
    curve, why = fit_reward_curve(x, y) if step_problem is None else (None, step_problem)
    if curve is None:
        for key in ("plateau_reward", "plateau_step", "stop_step", "reward_at_max_steps", "reward_at_step"):
            out.reasons[key] = why or "no fit"
        _cost(out, frame, hints, price_per_hour, None)
        return out
    out.curve = curve
    targets = [float(out.step)]
    if out.max_steps:
        targets.append(float(out.max_steps))
    if at_step is not None:
        targets.append(float(at_step))
    bx, by = binned(x, y)
    draws = resampled_draws(curve, bx, by, np.array(targets)) if bootstrap else np.empty((0, len(targets) + 2))
    spread = curve.holdout_rmse if math.isfinite(curve.holdout_rmse) else curve.rmse

    visited = collapse_and_recovery(bx, by)
    if visited is not None:
        out.confidence = "low"
        out.reasons["confidence"] = (
            f"the reward already collapsed once and recovered (its level fell to {visited[0]:.3g} and came back): "
            "a smooth curve cannot say whether it happens again, so the reward bands reach from the reward's floor "
            f"({lo:.3g}) to the best it logged"
        )
        visited = (lo, float(y.max()))

    def band_at(i: int, value: float) -> dict[str, Any]:
        if draws.size == 0:
            low, high = value - 1.645 * spread, value + 1.645 * spread
        else:
            d_lo, d_hi = np.percentile(draws[:, i], _BAND)
            # Model error (what the held-out fifth showed) widens the bootstrap band of the mean curve.
            low, high = float(d_lo) - spread, float(d_hi) + spread
        if visited is not None:
            low, high = min(low, visited[0]), max(high, visited[1])
        return _band(value, low, high)

    plateau_idx = len(targets)
    out.plateau_reward = band_at(plateau_idx, curve.plateau)
    if curve.model in FLAT_MODELS:
        # Flat over the whole log (const), or since the recent window began (level): the plateau is already here.
        first = int(x[0]) if curve.model == "const" else int(bx[-level_window(bx.size)])
        out.plateau_step = {"value": first, "low": first, "high": first}
        out.reasons["plateau_step"] = (
            "the reward is flat: the best model is a constant, the plateau is already here"
            if curve.model == "const"
            else "the reward has levelled off: its recent mean, held flat, predicted best; the plateau is here"
        )
    else:
        s95 = curve.gain_step(0.95)
        steps95 = draws[:, plateau_idx + 1] if draws.size else np.array([s95])
        steps95 = steps95[np.isfinite(steps95)]
        s_lo, s_hi = np.percentile(steps95, _BAND) if steps95.size else (s95, s95)
        # The families can disagree about when (a power law's long tail): each weighty family's own step is in.
        own = [
            m.gain_step(0.95)
            for m, w in zip(curve.members, curve.weights, strict=True)
            if w >= 0.2 and m.model not in FLAT_MODELS and math.isfinite(m.gain_step(0.95))
        ]
        s_lo, s_hi = min([s_lo, *own]), max([s_hi, *own])
        # A family that never settles (a power law's tail) would put the band's end at absurd steps: capped at ten
        # times the logged span past the last step, and said so.
        cap = float(x[-1]) + 10.0 * max(float(x[-1] - x[0]), 1.0)
        if s_hi > cap:
            s_hi = max(cap, s95) if math.isfinite(s95) else cap
            out.reasons["plateau_step"] = (
                "the band's end is capped at ten times the logged span: one of the fitted families never settles"
            )
        out.plateau_step = {"value": _int(s95), "low": _int(min(s_lo, s95)), "high": _int(max(s_hi, s95))}
    if at_step is not None:
        out.reward_at_step = band_at(len(targets) - 1, float(curve(float(at_step))))
    if out.max_steps:
        out.reward_at_max_steps = band_at(1, float(curve(float(out.max_steps))))
    else:
        out.reasons["reward_at_max_steps"] = "max_steps unknown (pass --max-steps)"
    stop = _stop_step(curve, out, hi - lo)
    out.stop_step = {"value": stop, "low": stop, "high": stop}
    _cost(out, frame, hints, price_per_hour, curve)
    return out


def collapse_and_recovery(x: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """(lowest, highest) level the reward visited when it fell by half its visited range below an earlier level
    (by five standard errors of a level at least) and then came back within a quarter of the range of that level;
    None otherwise. Levels are means of about a tenth of the log (at least three points), so one bad batch is not a
    collapse."""
    w = max(3, y.size // 10)
    if y.size < 3 * w:
        return None
    levels = np.convolve(y, np.ones(w) / w, mode="valid")
    span = float(levels.max() - levels.min())
    if span <= 0:
        return None
    peak = np.maximum.accumulate(levels)
    fell = np.flatnonzero(levels <= peak - 0.5 * span)
    if fell.size == 0:
        return None
    bottom = int(fell[0] + np.argmin(levels[fell[0] :]))
    # Judged against the reward's own noise too: the fall must be far beyond what a level of w noisy logs moves.
    sigma = float(np.sqrt(np.mean(np.diff(y) ** 2) / 2.0))
    if peak[fell[0]] - levels[bottom] < 5.0 * sigma / np.sqrt(w):
        return None
    if not (levels[bottom:] >= peak[fell[0]] - 0.25 * span).any():
        return None
    return float(levels.min()), float(levels.max())


def _int(x: float) -> int | None:
    return int(round(x)) if math.isfinite(x) and abs(x) < 1e15 else None


def _stop_step(curve: Blend, out: Forecast, scale: float) -> int:
    """The first step from which the rest of the forecast gain (to max_steps, else to the plateau) is below
    ``_STOP_GAIN`` of the reward's range; never before now... unless now is already past it."""
    now = float(out.step or curve.x0)
    end = float(out.max_steps) if out.max_steps else curve.gain_step(0.99)
    if not math.isfinite(end) or end <= now:
        near = curve.gain_step(0.99) if out.max_steps else end  # a search over 4,000 points of each member: once
        end = max(now, near if math.isfinite(near) else now)
    final = float(curve(end))
    grid = np.linspace(curve.x0, max(end, now), 400)
    rest = final - curve(grid)
    ok = np.flatnonzero(rest <= _STOP_GAIN * scale)
    stop = float(grid[ok[0]]) if ok.size else end
    return int(round(stop))


def _cost(
    out: Forecast, frame: MetricFrame, hints: Mapping[str, Any], price: float | None, curve: Blend | None
) -> None:
    if price is None:
        for key in ("cost_so_far", "cost_to_plateau", "cost_to_max_steps", "saving"):
            out.reasons[key] = "no price known (pass --flavor for HF Jobs or --price-per-hour)"
        return
    sps = _seconds_per_step(frame, hints)
    if sps is None or out.step is None:
        for key in ("cost_so_far", "cost_to_plateau", "cost_to_max_steps", "saving"):
            out.reasons[key] = "no timing in the log (step_time, train_runtime) to turn steps into hours"
        return
    per_step = price * sps / 3600.0

    def usd(steps: float) -> dict[str, Any]:
        return _band(max(0.0, steps) * per_step, max(0.0, steps) * per_step, max(0.0, steps) * per_step, 4)

    out.cost_so_far = usd(out.step)
    if out.plateau_step and out.plateau_step.get("value") is not None:
        p = out.plateau_step
        out.cost_to_plateau = _band(
            max(0.0, p["value"] - out.step) * per_step,
            max(0.0, (p["low"] or p["value"]) - out.step) * per_step,
            max(0.0, (p["high"] or p["value"]) - out.step) * per_step,
            4,
        )
    if out.max_steps:
        out.cost_to_max_steps = usd(out.max_steps - out.step)
        if curve is not None and out.stop_step and out.stop_step["value"] is not None:
            stop = max(out.stop_step["value"], out.step)
            saved = max(0.0, out.max_steps - stop) * per_step
            loss = float(curve(float(out.max_steps)) - curve(float(stop)))
            out.saving = {
                "value": _round(saved, 4),
                "low": _round(saved, 4),
                "high": _round(saved, 4),
                "at_step": stop,
                "reward_loss": _round(loss),
            }


def worth_continuing(fc: Forecast) -> tuple[bool, str] | None:
    """(False, why) when the forecast gain from now to max_steps is below the stop threshold; None when unknown."""
    if fc.curve is None or not fc.max_steps or fc.step is None or fc.step >= fc.max_steps:
        return None
    lo, hi = fc.reward_range
    gain = float(fc.curve(float(fc.max_steps)) - fc.curve(float(fc.step)))
    if gain >= _STOP_GAIN * (hi - lo):
        return True, f"forecast gain {gain:+.3g} by step {fc.max_steps}"
    return False, (
        f"the {fc.curve.model} fit of the {fc.source} reward forecasts {gain:+.3g} more by step {fc.max_steps} "
        f"(under {_STOP_GAIN:.0%} of the reward's range), plateau {fc.curve.plateau:.3g}"
    )
