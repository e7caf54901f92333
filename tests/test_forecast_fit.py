"""The reward fit's vectorised grid search against the generic algorithm it replaced: one lstsq per grid point, the
first strictly smallest error kept. Same family choices, same grid point, coefficients within 1e-9."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from grpo_dashboard.health import fits
from grpo_dashboard.health.fits import _ALPHA_GRID, _PLATEAU_REACH, _RATE_GRID, _basis, binned, fit_reward_curve

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real_logs"


def reference_fit(
    model: str, x: np.ndarray, y: np.ndarray
) -> tuple[tuple[float, ...], np.ndarray, float, dict[tuple[float, ...], tuple[float, np.ndarray]]] | None:
    """The grid search as it was (commit 22706dd): (shape, coef, rmse) of the best grid point and every admitted
    grid point's (sse, coef), or None."""
    x0, span = float(x[0]), max(float(x[-1] - x[0]), 1.0)
    if model == "exp":
        shapes: list[tuple[float, ...]] = [(r * span,) for r in _RATE_GRID]
    else:
        shapes = [(r * span, a) for r in _RATE_GRID[::3] for a in _ALPHA_GRID]
    best, admitted = None, {}
    lo, hi = float(np.min(y)), float(np.max(y))
    reach = _PLATEAU_REACH * max(hi - lo, 1e-9)
    for shape in shapes:
        basis = _basis(model, x, x0, shape)
        coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
        if not lo - reach <= coef[0] <= hi + reach:
            continue
        sse = float(np.sum((basis @ coef - y) ** 2))
        admitted[tuple(float(s) for s in shape)] = (sse, coef)
        if best is None or sse < best[0]:
            best = (sse, shape, coef)
    if best is None:
        return None
    return best[1], best[2], math.sqrt(best[0] / x.size), admitted


def _series() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for n in (8, 9, 50, 400, 3000):
        x = np.arange(1, n + 1, dtype=float) * 5.0
        t = (x - x[0]) / max(x[-1] - x[0], 1.0)
        out += [
            (f"exp-{n}", x, 0.9 - 0.7 * np.exp(-t / 0.2) + rng.normal(0, 0.02, n)),
            (f"power-{n}", x, 1.0 - 0.8 * (t / 0.05 + 1.0) ** -0.7 + rng.normal(0, 0.01, n)),
            (f"flat-{n}", x, 0.5 + rng.normal(0, 0.1, n)),
            (f"falling-{n}", x, 2.0 - 1.5 * t + rng.normal(0, 0.05, n)),
            (f"constant-{n}", x, np.full(n, 0.25)),
            (f"step-{n}", x, np.where(t < 0.5, 0.0, 1.0)),
            (f"exact-{n}", x, 0.3 + 0.4 * np.exp(-(x - x[0]) / (_RATE_GRID[10] * (x[-1] - x[0])))),
        ]
    x = 1e6 + np.arange(40, dtype=float)  # a resumed run: large x0, small span
    out.append(("offset", x, np.log1p(np.arange(40.0))))
    for path in sorted(REAL.glob("*.jsonl"))[:12]:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        pts = [(r["step"], r["reward"]) for r in rows if isinstance(r.get("reward"), (int, float)) and "step" in r]
        steps = np.array([p[0] for p in pts], dtype=float)
        if steps.size >= 8 and np.all(np.diff(steps) > 0):
            out.append((path.name[:40], steps, np.array([p[1] for p in pts], dtype=float)))
    return out


SERIES = _series()


def test_the_corpus_feeds_real_rewards_to_the_comparison() -> None:
    """At least a few real logs' reward columns are among the compared series (not synthetic ones only)."""
    synthetic = {"exp", "power", "flat", "falling", "constant", "step", "exact", "offset"}
    assert sum(name.split("-")[0] not in synthetic for name, _, _ in SERIES) >= 3


@pytest.mark.parametrize("name,x,y", SERIES, ids=[s[0] for s in SERIES])
def test_grid_search_matches_one_lstsq_per_grid_point(name: str, x: np.ndarray, y: np.ndarray) -> None:
    """Every family on the whole series and on its first four fifths: same grid point, same coefficients."""
    x, y = binned(x, y)
    cut = max(4, int(round(x.size * 0.8)))
    for xs, ys in ((x, y), (x[:cut], y[:cut])):
        for model in ("exp", "power"):
            want = reference_fit(model, xs, ys)
            got = fits._fit_model(model, xs, ys)
            if want is None:
                assert got is None, (name, model)
                continue
            assert got is not None, (name, model)
            shape, coef, rmse, admitted = want
            scale = max(1.0, float(np.max(np.abs(ys))))
            least = rmse**2 * xs.size
            if got.shape != tuple(float(s) for s in shape):
                # Only a tie may pick another grid point: an exactly fitting series (every sse rounding noise).
                assert admitted[got.shape][0] <= least * (1 + 1e-9) + 1e-24 * scale**2 * xs.size, (name, model)
                coef = admitted[got.shape][1]
            assert got.coef == pytest.approx(tuple(coef), rel=1e-9, abs=1e-9 * scale), (name, model)
            assert got.rmse == pytest.approx(rmse, rel=1e-9, abs=1e-12 * scale), (name, model)
            best = _basis(model, xs, float(xs[0]), shape) @ want[1]
            assert got(xs) == pytest.approx(best, rel=1e-9, abs=1e-9 * scale), (name, model)


@pytest.mark.parametrize("name,x,y", SERIES[::5], ids=[s[0] for s in SERIES[::5]])
def test_blend_matches_the_reference_families(name: str, x: np.ndarray, y: np.ndarray) -> None:
    """The blend of the forecast keeps its members' families and weights to 1e-9."""
    blend, why = fit_reward_curve(x, y)
    assert blend is not None, why
    bx, by = binned(x, y)
    for member in blend.members:
        if member.model in fits.FLAT_MODELS:
            continue
        want = reference_fit(member.model, bx, by)
        assert want is not None
        assert member.shape == tuple(float(s) for s in want[0]) or member.rmse < 1e-12
        assert member.plateau == pytest.approx(float(want[1][0]), rel=1e-9, abs=1e-9)
    assert sum(blend.weights) == pytest.approx(1.0)


def test_a_row_without_spread_gets_lstsqs_minimum_norm_answer() -> None:
    """A grid row that is constant (the second column undetermined) is solved as lstsq solves it, not divided by 0."""
    y = np.array([1.0, 2.0, 3.0, 5.0])
    basis = np.array([[0.5, 0.5, 0.5, 0.5], [0.0, 1.0, 2.0, 3.0]])
    a, b = fits._line_fits(basis, y)
    for k in range(2):
        want, *_ = np.linalg.lstsq(np.stack([np.ones(4), basis[k]], axis=-1), y, rcond=None)
        assert (a[k], b[k]) == pytest.approx(tuple(want), rel=1e-12)
    assert b[0] != 0.0  # the minimum-norm answer splits the level between both columns


def test_kept_grids_give_the_fits_computed_afresh() -> None:
    """A grid kept from an earlier fit at the same x (the bootstrap's refits, runs logged at the same steps) gives
    bit for bit what a grid built for this fit gives; a different x gets its own grid; kept grids are read-only."""
    rng = np.random.default_rng(5)
    x = np.arange(1.0, 301.0) * 10
    fits._GRIDS.clear()
    for model in ("exp", "power"):
        for trial in range(3):
            y = 1.0 - np.exp(-x / (500.0 * (trial + 1))) + rng.normal(0, 0.02, x.size)
            kept = fits._fit_model(model, x, y)
            shapes, basis = fits._grid_bases(model, x)
            a, b = fits._line_fits(basis, y)
            fresh = fits._grid(model, x.copy())  # the same x in another array: the kept grid
            assert fresh.basis.tobytes() == basis.tobytes() and fresh.shapes == shapes
            assert not fresh.basis.flags.writeable and not fresh.centred.flags.writeable
            got_a, got_b = fits._solve(fresh, y)
            assert got_a.tobytes() == a.tobytes() and got_b.tobytes() == b.tobytes()
            assert kept is not None and kept.coef in {(float(a[k]), float(b[k])) for k in range(len(shapes))}
    assert len(fits._GRIDS) == 2
    assert fits._grid("exp", x[:-1]) is not fits._grid("exp", x)
    blend, _ = fit_reward_curve(x, 1.0 - np.exp(-x / 700.0) + rng.normal(0, 0.02, x.size))
    assert blend is not None
    span = max([1.0] + [float(m.shape[0]) for m in blend.members if m.shape])
    grid = blend.x0 + np.concatenate(([0.0], np.geomspace(1e-3, 1e4, 4000))) * span
    share = (np.asarray(blend(grid)) - blend.start) / (blend.plateau - blend.start)
    for wanted in (0.95, 0.5, 0.99, 0.95):  # the gain curve is evaluated once, whatever the order of the asks
        hit = np.flatnonzero(share >= wanted)
        assert blend.gain_step(wanted) == float(grid[hit[0]])


def test_sse_in_one_buffer_is_the_plain_expression_bit_for_bit() -> None:
    rng = np.random.default_rng(9)
    basis = rng.random((84, 400))
    basis[3, 7], basis[5, 0] = math.inf, math.nan
    a, b, y = rng.normal(size=84), rng.normal(size=84) * 1e3, rng.normal(size=400)
    b[10] = 0.0
    want = np.sum((a[:, None] + b[:, None] * basis - y) ** 2, axis=1)
    assert fits._sse(a, b, basis, y).tobytes() == want.tobytes()
