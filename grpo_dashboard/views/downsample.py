"""The display reduction of metric series in numpy: resumable EMA smoothing and spike-keeping downsampling.

`SeriesSummary` keeps, for one growing series, the points a chart needs and nothing else: the first and the latest
point, and buckets of a power-of-two width in index space, each holding its lowest and highest finite point and its
first non-finite one (a visible gap). New points only touch the last bucket and the ones after it; when the buckets
outgrow the point budget, neighbours merge pairwise (width doubles). So a chart of a 100,000-step run costs about
a hundred kilobytes of state per series, and a refresh with 100 new records costs work on those 100 records only.

Smoothing is TensorBoard's debiased EMA, where non-finite values pass through without updating the average; it is
computed over every point (not the kept ones) and carried across refreshes. `ema` and `SeriesSummary` are the only
smoothing and downsampling of the dashboard: every chart line goes through them (see `display.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grpo_dashboard.store.series import SeriesArrays

_MAX_SCALE_LOG = 200.0  # keep w**-i within ~1e87 inside one EMA block (float64 holds 1e308)


@dataclass
class EmaState:
    """Where a resumable EMA stands: the biased average and how many finite values it has seen."""

    last: float = 0.0
    count: int = 0


def ema(values: np.ndarray, weight: float, state: EmaState | None = None) -> tuple[np.ndarray, EmaState]:
    """Debiased EMA of `values` continuing from `state` (a fresh start when None); returns (smoothed, new state).

    With weight 0 (or nothing finite) the input array itself comes back: do not modify it in place.

    Equals the loop `last = last * w + (1 - w) * v; count += 1; out = last / (1 - w ** count)` over finite values,
    with non-finite values copied through untouched. `weight` is capped at 0.999 like TensorBoard's slider.
    """
    x = np.asarray(values, dtype=np.float64)
    state = EmaState(state.last, state.count) if state is not None else EmaState()
    if weight <= 0 or x.size == 0:
        return x, state
    w = min(float(weight), 0.999)
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    xf = x if all_finite else x[finite]
    if xf.size == 0:
        return x, state
    smoothed = _ema_biased(xf, w, state.last)
    last = float(smoothed[-1])
    # Debiasing divides by 1 - w**count, which is 1.0 in float64 once w**count < 2**-54.
    n_debias = min(xf.size, max(0, int(math.ceil(-54 * math.log(2) / math.log(w))) + 1 - state.count))
    if n_debias:
        counts = state.count + np.arange(1, n_debias + 1, dtype=np.float64)
        smoothed[:n_debias] /= -np.expm1(counts * math.log(w))
    if all_finite:
        return smoothed, EmaState(last, state.count + int(xf.size))
    out = x.copy()
    out[finite] = smoothed
    return out, EmaState(last, state.count + int(xf.size))


def _ema_biased(x: np.ndarray, w: float, init: float) -> np.ndarray:
    """y[k] = w * y[k-1] + (1 - w) * x[k] with y[-1] = init, vectorised in blocks short enough not to overflow."""
    block = max(1, min(x.size, int(_MAX_SCALE_LOG / -math.log(w))))
    n_blocks = -(-x.size // block)
    if n_blocks * block == x.size:
        m = x.reshape(n_blocks, block)
    else:
        m = np.zeros((n_blocks, block))
        m.reshape(-1)[: x.size] = x
    powers = w ** np.arange(block, dtype=np.float64)  # w**j
    # Within a block, from zero: y_j = (1-w) * sum_i w**(j-i) x_i = (1-w) * w**j * cumsum(x_i / w**i)
    local = np.cumsum(m * (1.0 / powers), axis=1)
    local *= (1 - w) * powers
    if n_blocks > 1 or init:
        carry = np.empty(n_blocks)  # y just before each block
        prev = init
        end_factor = w**block
        ends = local[:, -1].tolist()
        for k in range(n_blocks):
            carry[k] = prev
            prev = end_factor * prev + ends[k]
        local += carry[:, None] * (powers * w)[None, :]
    return local.reshape(-1)[: x.size].copy() if n_blocks * block != x.size else local.reshape(-1)


def minmax_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Ascending indices to keep so at most `max_points` remain: the first and last, per bucket the lowest and
    highest finite value (so spikes survive) and, in a bucket holding non-finite values, the first of them (a gap).

    Series no longer than `max_points` are kept whole.
    """
    summary = SeriesSummary(max_points)
    x = np.asarray(values, dtype=np.float64)
    summary.extend(np.arange(x.size, dtype=np.int64), x, np.zeros(x.size))
    return summary.indices()


# A summary is one float64 array of shape (3 roles, 7 fields, n buckets): per bucket its lowest and highest finite
# point and its first non-finite one, each as (index or -1, step, raw value, time, smoothed value, is None, aux).
LO, HI, GAP = 0, 1, 2
F_IDX, F_STEP, F_VALUE, F_TIME, F_SMOOTH, F_NONE, F_AUX = range(7)
N_FIELDS = 7


def _empty(n_buckets: int) -> np.ndarray:
    out = np.full((3, N_FIELDS, n_buckets), np.nan)
    out[:, F_IDX] = -1
    return out


def _combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bucket-wise merge of two summaries (a before b in index order), all roles at once."""
    a_ok, b_ok = a[:, F_IDX] >= 0, b[:, F_IDX] >= 0
    better = np.zeros(a_ok.shape, dtype=bool)  # GAP row stays False: the first gap wins
    with np.errstate(invalid="ignore"):
        np.less(b[LO, F_VALUE], a[LO, F_VALUE], out=better[LO])
        np.greater(b[HI, F_VALUE], a[HI, F_VALUE], out=better[HI])
    take_b = b_ok & (~a_ok | better)
    return np.where(take_b[:, None, :], b, a)


class SeriesSummary:
    """The display points of one growing series, updated incrementally (see the module docstring).

    Args:
        max_points: the most points `points()` returns (at least 5).
        smoothing: EMA weight for the `smooth` values (0: none).
    """

    def __init__(self, max_points: int, smoothing: float = 0.0) -> None:
        if max_points < 5:
            raise ValueError(f"max_points must be at least 5 (first, last, and a bucket's 3), got {max_points}")
        self.max_points = max_points
        self.smoothing = smoothing
        self.n = 0
        self.last_step: int | None = None
        self.width = 1
        self.has_gap = False
        self.ema = EmaState()
        self.buckets = _empty(0)
        self.ends = _empty(2)[0]  # (fields, 2): the first and the latest point, always kept
        # Where the companion series stands (see `add`): its EMA, points and last step consumed.
        self.aux_ema = EmaState()
        self.aux_n = 0
        self.aux_last_step: int | None = None

    def add(self, series: SeriesArrays, companion: SeriesArrays | None = None) -> None:
        """Append a series' new points (see `extend`) with, as their band, the EMA of `companion` (its points after
        the last ones added, same weight, carried across calls) at their steps; NaN where it has no value there."""
        aux = None
        if companion is not None:
            smooth_aux, self.aux_ema = ema(companion.values, self.smoothing, self.aux_ema)
            pos = np.searchsorted(companion.steps, series.steps)
            hit = pos < len(companion)
            hit[hit] = companion.steps[pos[hit]] == series.steps[hit]
            aux = np.full(len(series), np.nan)
            aux[hit] = smooth_aux[pos[hit]]
            self.aux_n += len(companion)
            if len(companion):
                self.aux_last_step = int(companion.steps[-1])
        self.extend(series.steps, series.values, series.times, series.is_none, aux)

    def extend(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        times: np.ndarray,
        is_none: np.ndarray | None = None,
        aux: np.ndarray | None = None,
    ) -> None:
        """Append points (steps ascending and after every step seen so far); `aux` rides along with each point."""
        steps = np.asarray(steps, dtype=np.int64)
        if steps.size == 0:
            return
        values = np.asarray(values, dtype=np.float64)
        smooth, self.ema = ema(values, self.smoothing, self.ema)
        finite = np.isfinite(values)
        all_finite = bool(finite.all())
        first = self.n
        self.n += steps.size
        self.last_step = int(steps[-1])
        self.has_gap = self.has_gap or not all_finite
        while self._bound(self.width) > self.max_points:
            self._merge_pairs()
        w = self.width
        start = first // w
        new = self._summarise(first - start * w, steps, values, finite, all_finite)
        gather = new[:, F_IDX].astype(np.int64)
        ok = new[:, F_IDX] >= 0
        new[:, F_IDX] = np.where(ok, first + gather, -1)
        new[:, F_STEP] = steps[gather]
        new[:, F_VALUE] = values[gather]
        new[:, F_TIME] = np.asarray(times, dtype=np.float64)[gather]
        new[:, F_SMOOTH] = smooth[gather]
        new[:, F_NONE] = False if is_none is None else np.asarray(is_none, dtype=bool)[gather]
        new[:, F_AUX] = np.nan if aux is None else np.asarray(aux, dtype=np.float64)[gather]
        for col, pos in ((0, 0), (1, steps.size - 1)):
            if col == 0 and first:
                continue
            self.ends[:, col] = (
                first + pos,
                steps[pos],
                values[pos],
                times[pos],
                smooth[pos],
                False if is_none is None else bool(is_none[pos]),
                np.nan if aux is None else float(aux[pos]),
            )
        if first % w:  # the old last bucket was partial: fold it into the first new one
            new[:, :, :1] = _combine(self.buckets[:, :, start : start + 1], new[:, :, :1])
        self.buckets = np.concatenate((self.buckets[:, :, :start], new), axis=2)

    def _bound(self, w: int) -> int:
        """Most points kept with buckets of width w: every point while a bucket holds no more than its slots."""
        per_bucket = 3 if self.has_gap else 2
        if w <= per_bucket:
            return self.n
        return -(-self.n // w) * per_bucket + 2

    def _merge_pairs(self) -> None:
        """Double the bucket width: buckets 2k and 2k+1 become one."""
        b = self.buckets
        if b.shape[2] % 2:
            b = np.concatenate((b, _empty(1)), axis=2)
        self.buckets = _combine(b[:, :, 0::2], b[:, :, 1::2])
        self.width *= 2

    def _summarise(
        self, lead: int, steps: np.ndarray, values: np.ndarray, finite: np.ndarray, all_finite: bool
    ) -> np.ndarray:
        """Buckets over `lead` empty slots then the new points; F_IDX holds positions in the new arrays (or -1)."""
        w, n = self.width, steps.size
        nb = -(-(lead + n) // w)
        out = _empty(nb)
        # Bucket k covers new positions [k*w - lead, (k+1)*w - lead). Whole buckets are a reshaped view (no copy);
        # a partial first or last bucket is padded with values that never win (+inf for min, -inf for max).
        head = min(w - lead, n) if lead else 0  # new points that fall in the (already started) first bucket
        n_whole = (n - head) // w
        body = slice(head, head + n_whole * w)

        def reduce(src: np.ndarray, fill: float, fn: object) -> np.ndarray:
            parts = []
            if head:
                m = np.full(w, fill)
                m[lead : lead + head] = src[:head]
                parts.append(np.asarray([fn(m) - lead]))  # type: ignore[operator]
            if n_whole:
                parts.append(fn(src[body].reshape(n_whole, w), axis=1) + head + w * np.arange(n_whole))  # type: ignore[operator]
            rest = n - head - n_whole * w
            if rest > 0:
                m = np.full(w, fill)
                m[:rest] = src[n - rest :]
                parts.append(np.asarray([fn(m) + n - rest]))  # type: ignore[operator]
            return np.concatenate(parts) if len(parts) > 1 else parts[0]

        if all_finite:
            out[LO, F_IDX] = reduce(values, np.inf, np.argmin)
            out[HI, F_IDX] = reduce(values, -np.inf, np.argmax)
            return out
        lo = reduce(np.where(finite, values, np.inf), np.inf, np.argmin)
        hi = reduce(np.where(finite, values, -np.inf), -np.inf, np.argmax)
        has_point = finite[np.clip(lo, 0, n - 1)]  # the argmin of a bucket without finite values is not finite
        gap_src = (~finite).astype(np.float64)
        gap = reduce(gap_src, 0.0, np.argmax)
        has_gap = gap_src[np.clip(gap, 0, n - 1)] > 0
        out[LO, F_IDX] = np.where(has_point, lo, -1)
        out[HI, F_IDX] = np.where(has_point, hi, -1)
        out[GAP, F_IDX] = np.where(has_gap, gap, -1)
        return out

    def indices(self) -> np.ndarray:
        """Global indices of the kept points, ascending."""
        idx = np.concatenate((self.buckets[:, F_IDX].reshape(-1), self.ends[F_IDX]))
        return np.unique(idx[idx >= 0]).astype(np.int64)

    def points(self) -> SeriesArrays:
        """The kept points in step order, with `smooth`, `band` (the companion's EMA; NaN without one) and `total`."""
        flat = np.concatenate((self.buckets.transpose(1, 0, 2).reshape(N_FIELDS, -1), self.ends), axis=1)
        flat = flat[:, flat[F_IDX] >= 0]
        _, first = np.unique(flat[F_IDX], return_index=True)
        kept = flat[:, first]
        return SeriesArrays(
            kept[F_STEP].astype(np.int64),
            kept[F_VALUE],
            kept[F_NONE].astype(bool),
            kept[F_TIME],
            smooth=kept[F_SMOOTH],
            band=kept[F_AUX],
            total=self.n,
        )
