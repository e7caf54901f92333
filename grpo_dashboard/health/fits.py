"""The saturating fits of reward over steps that the forecast blends: exponential and power-law approaches, a
constant (the mean of every point) and a level (the mean of the last quarter, held flat: the persistence forecast).

Each family is fitted for every value on a grid of its shape parameter with its linear parameters in closed form
(least squares), on at most ``_MAX_POINTS`` bin means; a grid point whose plateau lies more than ``_PLATEAU_REACH``
times the logged range beyond the data is a straight line in disguise and is skipped. ``fit_reward_curve`` scores
each family on the last fifth of the log after fitting the first four fifths and blends them by 1 / that error
squared (inverse-variance weights: a family that clearly predicted better dominates); ``bootstrap`` varies the blend
by resampling its residuals. Only numpy is needed.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import cast

import numpy as np

MIN_POINTS = 8
_HOLDOUT = 0.2
_LEVEL_SHARE = 0.25  # the "level" family: the mean of the last quarter of the points, held flat
FLAT_MODELS = ("const", "level")
_PLATEAU_REACH = 0.5  # a plateau may lie at most this many times the logged reward's range beyond it
_BOOTSTRAP = 60
_MAX_POINTS = 400
_RATE_GRID = np.geomspace(0.03, 30.0, 36)  # tau or s, as a multiple of the fitted step span
_ALPHA_GRID = np.array([0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0])


@dataclass
class Curve:
    """A fitted saturating curve of reward over steps."""

    model: str
    plateau: float
    start: float
    x0: float
    shape: tuple[float, ...]
    coef: tuple[float, float]
    rmse: float
    holdout_rmse: float

    def __call__(self, x: np.ndarray | float) -> np.ndarray:
        return _basis(self.model, np.asarray(x, dtype=float), self.x0, self.shape) @ np.array(self.coef)

    def gain_step(self, share: float) -> float:
        """Step at which ``share`` of the gain from ``x0`` to the plateau is reached (inf when never)."""
        left = 1.0 - share
        if self.model == "exp":
            return self.x0 + self.shape[0] * math.log(1.0 / left)
        if self.model == "power":
            s, alpha = self.shape
            return self.x0 + s * (left ** (-1.0 / alpha) - 1.0)
        return self.x0


def _basis(model: str, x: np.ndarray, x0: float, shape: tuple[float, ...]) -> np.ndarray:
    ones = np.ones_like(x)
    if model == "exp":
        return np.stack([ones, np.exp(-(x - x0) / shape[0])], axis=-1)
    if model == "power":
        s, alpha = shape
        return np.stack([ones, (np.maximum(x - x0, 0.0) / s + 1.0) ** (-alpha)], axis=-1)
    return np.stack([ones, np.zeros_like(x)], axis=-1)


def level_window(n: int) -> int:
    """How many of the last of ``n`` points the ``level`` family averages."""
    return min(n, max(MIN_POINTS // 2, int(round(n * _LEVEL_SHARE))))


def _fit_model(model: str, x: np.ndarray, y: np.ndarray) -> Curve | None:
    """Best curve of one family on (x, y): grid over the shape parameter, linear least squares for the rest."""
    x0 = float(x[0])
    if model == "const":
        mean = float(np.mean(y))
        rmse = float(np.sqrt(np.mean((y - mean) ** 2)))
        return Curve("const", mean, mean, x0, (), (mean, 0.0), rmse, math.nan)
    if model == "level":
        recent = y[-level_window(y.size) :]
        level = float(np.mean(recent))
        rmse = float(np.sqrt(np.mean((recent - level) ** 2)))
        return Curve("level", level, level, x0, (), (level, 0.0), rmse, math.nan)
    grid = _grid(model, x)
    shapes, basis = grid.shapes, grid.basis
    a, b = _solve(grid, y)
    # A saturating approach: the curve must not bend back (B's sign fixes the direction, any is allowed), and a
    # plateau absurdly far from the data means the grid point is a straight line in disguise: skipped.
    lo, hi = float(np.min(y)), float(np.max(y))
    reach = _PLATEAU_REACH * max(hi - lo, 1e-9)
    sse = _sse(a, b, basis, y)
    sse[~((lo - reach <= a) & (a <= hi + reach)) | np.isnan(sse)] = np.inf
    if not np.isfinite(sse).any():
        return None
    k = int(np.argmin(sse))  # the first of equal minima, as a strict "<" scan over the grid picks
    plateau, gain = float(a[k]), float(b[k])
    rmse = math.sqrt(float(sse[k]) / x.size)
    return Curve(model, plateau, plateau + gain, x0, shapes[k], (plateau, gain), rmse, 0.0)


def _sse(a: np.ndarray, b: np.ndarray, basis: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``np.sum((a[:, None] + b[:, None] * basis - y) ** 2, axis=1)``, the same bits, in one (G, n) buffer: the
    temporaries of the plain expression cost more than its arithmetic."""
    work = b[:, None] * basis
    np.add(a[:, None], work, out=work)
    np.subtract(work, y, out=work)
    np.multiply(work, work, out=work)
    return np.sum(work, axis=1)


@dataclass(frozen=True)
class _Grid:
    """A family's grid at one ``x``: its shapes, the varying basis column of each (G, n) and what the least squares
    of any ``y`` on them needs from the basis alone (row means, centred rows, their spread, the rows left to lstsq).
    Its arrays are read-only: a grid is shared between callers."""

    shapes: tuple[tuple[float, ...], ...]
    basis: np.ndarray
    mean: np.ndarray
    centred: np.ndarray
    spread: np.ndarray
    flat: np.ndarray


_GRIDS: OrderedDict[tuple[str, str, bytes], _Grid] = OrderedDict()
_GRIDS_KEPT = 32  # a run's fits use 4 (2 families x early / full); runs of one length and cadence share them
_GRIDS_LOCK = threading.Lock()


def _grid(model: str, x: np.ndarray) -> _Grid:
    """``model``'s grid at ``x``, kept by the exact ``x``: the bootstrap refits at the same ``x`` many times, and runs
    logged at the same steps bin to the same ``x``."""
    key = (model, x.dtype.str, x.tobytes())
    with _GRIDS_LOCK:
        kept = _GRIDS.get(key)
        if kept is not None:
            _GRIDS.move_to_end(key)
            return kept
    shapes, basis = _grid_bases(model, x)
    grid = _prepared(shapes, basis, x.size)
    for array in (grid.basis, grid.mean, grid.centred, grid.spread, grid.flat):
        array.flags.writeable = False
    with _GRIDS_LOCK:
        _GRIDS[key] = grid
        if len(_GRIDS) > _GRIDS_KEPT:
            _GRIDS.popitem(last=False)
    return grid


def _grid_bases(model: str, x: np.ndarray) -> tuple[tuple[tuple[float, ...], ...], np.ndarray]:
    """Every grid shape of ``model`` and its varying basis column at ``x``, one row per shape: (shapes, (G, n))."""
    x0, span = float(x[0]), max(float(x[-1] - x[0]), 1.0)
    if model == "exp":
        taus = _RATE_GRID * span
        return tuple((float(t),) for t in taus), np.exp(-(x - x0)[None, :] / taus[:, None])
    scales = np.repeat(_RATE_GRID[::3] * span, _ALPHA_GRID.size)
    alphas = np.tile(_ALPHA_GRID, _RATE_GRID[::3].size)
    shapes = tuple((float(s), float(a)) for s, a in zip(scales, alphas, strict=True))
    return shapes, (np.maximum(x - x0, 0.0)[None, :] / scales[:, None] + 1.0) ** (-alphas[:, None])


def _prepared(shapes: tuple[tuple[float, ...], ...], basis: np.ndarray, n: int) -> _Grid:
    """What the least squares on ``basis`` rows needs from them alone, for ``y`` of ``n`` points (see _solve)."""
    mean = basis.mean(axis=1)
    centred = basis - mean[:, None]
    spread = np.einsum("gn,gn->g", centred, centred)
    # lstsq (rcond=None) zeroes a singular value under eps * max(n, 2) * the largest. With F the design's Frobenius
    # norm, the largest is <= F and the smallest >= sqrt(n * spread) / F (its Gram determinant over its trace), so
    # every row lstsq could truncate has sqrt(spread) < eps * max(n, 2) * F^2 / sqrt(n), and is sent to it.
    frobenius2 = n + np.einsum("gn,gn->g", basis, basis)
    flat = ~(np.sqrt(spread) > 4 * np.finfo(float).eps * max(n, 2) * frobenius2 / math.sqrt(n))
    return _Grid(shapes, basis, mean, centred, spread, flat)


def _line_fits(basis: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of y ~ a + b * row for every row of ``basis`` at once, in closed form: (a, b), one per row."""
    return _solve(_prepared((), basis, y.size), y)


def _solve(grid: _Grid, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_line_fits`` on a prepared grid.

    The centred normal equations of a two-column design are well conditioned; a row with (nearly) no spread, where
    lstsq's rank cut-off could drop the second column, is left to lstsq itself, so every row gets a generic solver's
    answer."""
    b = grid.centred @ (y - y.mean())
    b = np.divide(b, grid.spread, out=np.zeros_like(b), where=~grid.flat)
    a = y.mean() - b * grid.mean
    for k in np.flatnonzero(grid.flat):
        design = np.stack([np.ones_like(y), grid.basis[k]], axis=-1)
        (a[k], b[k]), *_ = np.linalg.lstsq(design, y, rcond=None)
    return a, b


@dataclass
class Blend:
    """The families fitted on every point, weighted by 1 / their held-out error squared: a family that predicted the
    last fifth of the log well dominates, and when none clearly wins the forecast does not bet on one extrapolation.
    Quacks like a ``Curve`` (call it, ``plateau``, ``gain_step``)."""

    members: list[Curve]
    weights: list[float]
    holdout_rmse: float
    rmse: float = 0.0

    @property
    def model(self) -> str:
        """The dominant family when it carries >= 60 % of the weight, else ``blend``."""
        top = int(np.argmax(self.weights))
        return self.members[top].model if self.weights[top] >= 0.6 else "blend"

    @property
    def x0(self) -> float:
        return self.members[0].x0

    @property
    def plateau(self) -> float:
        return float(sum(w * m.plateau for w, m in zip(self.weights, self.members, strict=True)))

    @property
    def start(self) -> float:
        return float(self(self.x0))

    def describe(self) -> str:
        """``exp 0.62 / power 0.31 / const 0.02 / level 0.05``."""
        return " / ".join(f"{m.model} {w:.2f}" for m, w in zip(self.members, self.weights, strict=True))

    def __call__(self, x: np.ndarray | float) -> np.ndarray:
        return cast(np.ndarray, sum(w * m(x) for w, m in zip(self.weights, self.members, strict=True)))

    def gain_step(self, share: float) -> float:
        """Step at which ``share`` of the gain from ``x0`` to the plateau is reached (inf when never)."""
        if abs(self.plateau - self.start) < 1e-12:
            return self.x0
        grid, share_reached = self._gain_curve
        hit = np.flatnonzero(share_reached >= share)
        return float(grid[hit[0]]) if hit.size else math.inf

    @functools.cached_property
    def _gain_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """The search grid of ``gain_step`` and the share of the gain reached at each of its points: evaluated once
        per blend (the forecast asks for several shares; members and weights do not change after the fit)."""
        span = max([1.0] + [float(m.shape[0]) for m in self.members if m.shape])
        grid = self.x0 + np.concatenate(([0.0], np.geomspace(1e-3, 1e4, 4000))) * span
        return grid, (np.asarray(self(grid)) - self.start) / (self.plateau - self.start)

    def refit(self, x: np.ndarray, y: np.ndarray) -> Blend:
        """The same weights on the families refitted to ``(x, y)`` (what the bootstrap varies)."""
        members = [_fit_model(m.model, x, y) or m for m in self.members]
        return Blend(members, self.weights, self.holdout_rmse, self.rmse)


def binned(x: np.ndarray, y: np.ndarray, bins: int = _MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``bins`` points: means over consecutive equal-count groups (a 100,000-step log fits as fast as a
    short one, and a bin mean is what the curve describes anyway)."""
    if x.size <= bins:
        return x, y
    # np.array_split's groups: the first `longer` hold size + 1 points, the rest `size`; row means over reshaped
    # contiguous blocks are the per-group means without a Python loop.
    size, longer = divmod(x.size, bins)
    cut = longer * (size + 1)

    def means(v: np.ndarray) -> np.ndarray:
        head = v[:cut].reshape(longer, size + 1).mean(axis=1)
        return np.concatenate((head, v[cut:].reshape(bins - longer, size).mean(axis=1)))

    return means(x), means(y)


def fit_reward_curve(steps: np.ndarray, values: np.ndarray) -> tuple[Blend | None, str | None]:
    """The families fitted on every point, weighted by 1 / their squared error on the last fifth of the log when
    fitted on the first four fifths; or None and why."""
    ok = np.isfinite(values) & np.isfinite(steps)
    x, y = steps[ok].astype(float), values[ok].astype(float)
    if x.size < MIN_POINTS:
        return None, f"too few reward points ({x.size}; at least {MIN_POINTS} needed)"
    if np.any(np.diff(x) <= 0):
        return None, "the step column is not strictly increasing (a resumed or merged log?): cannot fit over steps"
    x, y = binned(x, y)
    cut = max(MIN_POINTS // 2, int(round(x.size * (1 - _HOLDOUT))))
    members, errors = [], []
    for model in ("exp", "power", "const", "level"):
        early = _fit_model(model, x[:cut], y[:cut])
        full = _fit_model(model, x, y)
        if early is None or full is None:
            continue
        err = float(np.sqrt(np.mean((early(x[cut:]) - y[cut:]) ** 2))) if cut < x.size else full.rmse
        full.holdout_rmse = err
        members.append(full)
        errors.append(max(err, 1e-9))
    if not members:
        return None, "no model could be fitted"
    inverse = 1.0 / np.array(errors) ** 2
    weights = (inverse / inverse.sum()).tolist()
    blend = Blend(members, weights, float(np.dot(weights, errors)))
    blend.rmse = float(np.sqrt(np.mean((np.asarray(blend(x)) - y) ** 2)))
    return blend, None


def bootstrap(curve: Blend, x: np.ndarray, y: np.ndarray, targets: np.ndarray, seed: int = 0) -> np.ndarray:
    """Residual-bootstrap predictions at ``targets`` plus the plateau and the 95 % step: (draws, len(targets) + 2)."""
    rng = np.random.default_rng(seed)
    fitted = np.asarray(curve(x))
    resid = y - fitted
    out = []
    for _ in range(_BOOTSTRAP):
        refit = curve.refit(x, fitted + rng.choice(resid, size=resid.size, replace=True))
        out.append(np.concatenate((np.asarray(refit(targets)), [refit.plateau, refit.gain_step(0.95)])))
    return np.array(out)
