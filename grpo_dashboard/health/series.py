"""Columnar metric storage for the health rules, plus the small numeric helpers they share.

Records are turned into one ``(steps, values)`` pair of numpy arrays per metric key, once. A key absent from a
record is simply not in that metric's arrays (TRL logs are sparse); a logged ``None``, NaN or Inf is kept as a
non-finite value so the ``nan`` rule can see it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_META_KEYS = frozenset({"step", "global_step", "_step", "_timestamp", "_runtime", "time", "max_steps", "samples"})
_CHUNK = 4096


# verl's names for what TRL logs (its GRPO updates the actor over several mini-batches per rollout, so its clip
# fraction is the off-policy clip ratio). actor/ppo_kl is the old-to-new policy KL, not the reference KL: not mapped.
VERL_KEYS = {
    "critic/score/mean": "reward",
    "actor/entropy": "entropy",
    "actor/entropy_loss": "entropy",  # older verl: the mean entropy itself, logged under the loss term's name
    "actor/kl_loss": "kl",
    "actor/pg_clipfrac": "clip_ratio/region_mean",
    "actor/grad_norm": "grad_norm",
    "actor/pg_loss": "loss",
    "actor/lr": "learning_rate",
    "response_length/mean": "completions/mean_length",
    "response_length/max": "completions/max_length",
    "response_length/min": "completions/min_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    # verl-agent: the environment's own episode return, apart from the step-level penalties in critic/score
    "episode/reward/mean": "rewards/episode_reward/mean",
}
# Validation scores per data source: newer verl's core metric (mean@N over N samples) and older verl's test score.
_VERL_VAL = re.compile(r"^val-core/(.+)/[^/]+/mean@\d+$|^val/test_score/(.+)$")


def normalize_key(key: str) -> str:
    """Map tracker and framework spellings onto TRL's: ``train/reward`` -> ``reward``, ``eval/reward`` ->
    ``eval_reward``; verl's ``critic/score/mean`` -> ``reward``, ``actor/pg_clipfrac`` -> ``clip_ratio/region_mean``,
    its validation ``val-core/<source>/acc/mean@4`` -> ``eval_rewards/<source>/mean`` (``VERL_KEYS``)."""
    if key.startswith("train/"):
        return key[6:]
    if key.startswith("eval/"):
        return "eval_" + key[5:]
    mapped = VERL_KEYS.get(key)
    if mapped is not None:
        return mapped
    if key.startswith("val"):
        m = _VERL_VAL.match(key)
        if m is not None:
            return f"eval_rewards/{m.group(1) or m.group(2)}/mean"
    return key


@dataclass(frozen=True)
class Series:
    """One metric: sorted unique steps and their values (NaN where the log held None/NaN)."""

    key: str
    steps: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.steps.size)

    def finite(self) -> Series:
        """The same series without its non-finite points."""
        mask = np.isfinite(self.values)
        if mask.all():
            return self
        return Series(self.key, self.steps[mask], self.values[mask])


class ColumnBuilder:
    """Accumulates log dicts into per-key float arrays without keeping the dicts.

    Records with the same key order (nearly all TRL records of one kind) are buffered as value tuples and converted
    to a numpy block every few thousand rows, which keeps both the Python overhead and the memory low.
    """

    def __init__(self) -> None:
        self._rows: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        self._row_steps: dict[tuple[str, ...], list[int]] = {}
        self._parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.n_records = 0
        self._earlier: list[MetricFrame] = []  # finished runs of the same file (the steps restarted after each)
        self._resumes: list[tuple[int, int]] = []  # (step the log went back to, last step before it)
        self._first: int | None = None  # first and last step of the segment being built
        self._last: int | None = None
        self._seg_records = 0

    def add(self, record: Mapping[str, Any], step: int) -> None:
        """Add one log dict (its own ``step`` key, if any, is ignored in favour of ``step``).

        A step lower than the one before is a discontinuity: back to (or before) the first step of the current
        segment, a new run appended to the same log starts (the finished one is kept apart, see
        ``MetricFrame.earlier``); back into the segment's range, a resume from a checkpoint (its records overwrite
        the steps logged again, see ``MetricFrame.resumes``)."""
        if self._last is not None and step < self._last:
            assert self._first is not None
            if step <= self._first:
                self._earlier.append(self._finish(self._seg_records))
                self._resumes, self._first, self._seg_records = [], None, 0
            else:
                self._resumes.append((int(step), int(self._last)))
        if self._first is None:
            self._first = int(step)
        self._last = int(step)
        self._seg_records += 1
        signature = tuple(record)
        rows = self._rows.get(signature)
        if rows is None:
            rows = self._rows[signature] = []
            self._row_steps[signature] = []
        rows.append(tuple(record.values()))
        self._row_steps[signature].append(step)
        self.n_records += 1
        if len(rows) >= _CHUNK:
            self._flush(signature)

    def _flush(self, signature: tuple[str, ...]) -> None:
        rows = self._rows.pop(signature)
        steps = np.asarray(self._row_steps.pop(signature), dtype=np.int64)
        if not rows:
            return
        block = _to_float_array(rows, ndim=2)
        for j, key in enumerate(signature):
            if key in _META_KEYS:
                continue
            values: np.ndarray | None
            if block is not None:
                values, present = block[:, j], None
            else:
                column = [row[j] for row in rows]
                values, present = _to_float_array(column, ndim=1), None
                if values is None:
                    values, present = _column_to_float(column)
                    if not present.any():
                        continue
            col_steps = steps if present is None else steps[present]
            col_values = values if present is None else values[present]
            self._parts.setdefault(normalize_key(key), []).append((col_steps, col_values))

    def build(self) -> MetricFrame:
        """Finish: one sorted, de-duplicated (last write wins, as after a resume) series per key, for the last run
        in the log; the runs before a step restart are the frame's ``earlier`` frames."""
        frame = self._finish(self._seg_records)
        frame.earlier, frame.resumes = tuple(self._earlier), tuple(self._resumes)
        return frame

    def _finish(self, n_records: int) -> MetricFrame:
        for signature in list(self._rows):
            self._flush(signature)
        columns: dict[str, Series] = {}
        for key, parts in self._parts.items():
            steps = np.concatenate([p[0] for p in parts])
            values = np.concatenate([p[1] for p in parts])
            order = np.argsort(steps, kind="stable")
            steps, values = steps[order], values[order]
            keep = np.ones(steps.size, dtype=bool)
            keep[:-1] = steps[1:] != steps[:-1]
            columns[key] = Series(key, steps[keep], values[keep])
        self._parts = {}
        return MetricFrame(columns, n_records)


def _to_float_array(rows: list[Any], ndim: int) -> np.ndarray | None:
    try:
        array = np.array(rows, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array if array.ndim == ndim else None


def _column_to_float(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    out = np.full(len(values), np.nan)
    present = np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values):
        if v is None:
            present[i] = True
        elif isinstance(v, bool):
            continue
        elif isinstance(v, (int, float)):
            out[i], present[i] = float(v), True
        elif isinstance(v, str):
            try:
                out[i], present[i] = float(v), True
            except ValueError:
                continue
    return out, present


def record_step(record: Mapping[str, Any], index: int) -> int:
    """The step of a log record: ``step``, else ``global_step``, else its 1-based position."""
    for key in ("step", "global_step", "_step"):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return int(value)
    return index + 1


class MetricFrame:
    """All metrics of one run, keyed by TRL metric name (eval ones keep their ``eval_`` prefix)."""

    def __init__(
        self,
        columns: dict[str, Series],
        n_records: int,
        earlier: Sequence[MetricFrame] = (),
        resumes: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.columns = columns
        self.n_records = n_records
        # Runs logged before this one in the same file (the steps restarted after each), oldest first.
        self.earlier: tuple[MetricFrame, ...] = tuple(earlier)
        # Resumes within this run: (step the log went back to, the last step logged before it).
        self.resumes: tuple[tuple[int, int], ...] = tuple(resumes)

    @property
    def segments(self) -> tuple[MetricFrame, ...]:
        """Every run in the log, oldest first (this one last)."""
        return (*self.earlier, self)

    def segment_upto(self, segment: int, step: int) -> MetricFrame:
        """The log as it was when ``step`` of run ``segment`` (0-based, see ``segments``) was the last one logged."""
        if segment >= len(self.earlier):
            return self.upto(step)
        cut = self.earlier[segment].upto(step)
        cut.earlier = self.earlier[:segment]
        return cut

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> MetricFrame:
        """Build from flat TRL log dicts in log order."""
        builder = ColumnBuilder()
        for i, record in enumerate(records):
            builder.add(record, record_step(record, i))
        return builder.build()

    @classmethod
    def from_splits(cls, splits: Sequence[Mapping[str, tuple[np.ndarray, np.ndarray]]]) -> MetricFrame:
        """Build from stored columns: one mapping per split (key -> (sorted steps, values)), later splits winning
        where the same metric name has a value at the same step (train before eval, as they are logged). What
        ``from_records`` makes of the same records, without a dict per step."""
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for split in splits:
            for key, pair in split.items():
                if key not in _META_KEYS:
                    parts.setdefault(normalize_key(key), []).append(pair)
        columns = {}
        for key, pieces in parts.items():
            steps, values = pieces[0]
            if len(pieces) > 1:
                steps = np.concatenate([p[0] for p in pieces])
                values = np.concatenate([p[1] for p in pieces])
                order = np.argsort(steps, kind="stable")
                steps, values = steps[order], values[order]
                keep = np.ones(steps.size, dtype=bool)
                keep[:-1] = steps[1:] != steps[:-1]  # of equal steps the last (the later split's) is kept
                steps, values = steps[keep], values[keep]
            columns[key] = Series(key, steps, values)
        return cls(columns, sum(_distinct_steps([p[0] for p in split.values()]) for split in splits if split))

    def upto(self, step: int) -> MetricFrame:
        """The frame as it was when ``step`` was the last logged step (every series cut after it)."""
        columns = {}
        for key, series in self.columns.items():
            end = int(np.searchsorted(series.steps, step, side="right"))
            if end:
                columns[key] = Series(key, series.steps[:end], series.values[:end])
        steps = [s.steps for s in columns.values()]
        resumes = [r for r in self.resumes if r[0] <= step]
        return MetricFrame(columns, _distinct_steps(steps) if steps else 0, self.earlier, resumes)

    def get(self, *keys: str) -> Series | None:
        """The first of ``keys`` that was logged at least once (aliases across TRL versions)."""
        for key in keys:
            series = self.columns.get(key)
            if series is not None and len(series):
                return series
        return None

    def first_step(self) -> int | None:
        """Smallest step seen in any metric."""
        firsts = [int(s.steps[0]) for s in self.columns.values() if len(s)]
        return min(firsts) if firsts else None

    def last_step(self) -> int | None:
        """Largest step seen in any metric."""
        lasts = [int(s.steps[-1]) for s in self.columns.values() if len(s)]
        return max(lasts) if lasts else None

    def reward_functions(self, prefix: str = "") -> dict[str, tuple[str, str | None]]:
        """Reward functions as ``{name: (mean_key, std_key or None)}``, for both key generations.

        Current TRL logs ``rewards/<f>/mean`` and ``rewards/<f>/std``; releases before 0.17 logged ``rewards/<f>``.
        """
        found: dict[str, tuple[str, str | None]] = {}
        pattern = re.compile(rf"^{re.escape(prefix)}rewards/(.+?)(/mean|/std)?$")
        for key in self.columns:
            match = pattern.match(key)
            if not match:
                continue
            name, suffix = match.group(1), match.group(2)
            if suffix == "/std":
                continue
            if suffix == "/mean" or name not in found:
                std_key = f"{prefix}rewards/{name}/std"
                found[name] = (key, std_key if std_key in self.columns else None)
        return found


# ---- numeric helpers ---------------------------------------------------------------------------------------------


def reward_range(values: np.ndarray) -> tuple[float, float]:
    """The range a reward lives in: [0, 1] unless the run logged values outside it."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = min(0.0, float(finite.min())), max(1.0, float(finite.max()))
    return lo, hi


def unit_position(values: np.ndarray, recent: int) -> float | None:
    """Where the mean of the last ``recent`` values sits in the reward's range, when that range is known: values
    within [lo, 1] (the usual 0-1 reward, ceiling 1) or all <= 0 (a penalty, ceiling 0); None for larger scales, whose
    maximum a log does not show, and for a function that never varied."""
    lo, top = min(0.0, float(values.min())), float(values.max())
    hi = 0.0 if top <= 0 else (1.0 if top <= 1.0 else None)
    if hi is None or hi - lo <= 0:
        return None
    return (float(np.mean(values[-recent:])) - lo) / (hi - lo)


def reward_ceiling_position(frame: MetricFrame, recent: int) -> float | None:
    """How close the recent reward is to its ceiling (1.0 = at it), judged per reward function when they are logged
    (the lowest of them: every function must be near its own ceiling), else on the total; None when unknown."""
    positions = []
    for mean_key, _ in frame.reward_functions().values():
        values = frame.columns[mean_key].finite().values
        if values.size == 0 or np.all(values == values[0]):
            continue  # a constant function (often a penalty that never fires) says nothing about the ceiling
        position = unit_position(values, recent)
        if position is None:
            return None
        positions.append(position)
    if positions:
        return min(positions)
    reward = frame.get("reward")
    values = reward.finite().values if reward is not None else np.empty(0)
    return unit_position(values, recent) if values.size else None


def baseline_count(n: int, window: int, fraction: float) -> int:
    """How many leading points form the warm-up baseline of an ``n``-point series."""
    return max(1, min(int(window), int(n * fraction)))


def lattice_count(values: np.ndarray, largest: int = 64, min_logs: int = 8) -> int | None:
    """The smallest ``k`` such that every value is a multiple of ``1/k``: how many groups a logged fraction such as
    ``frac_reward_zero_std`` was averaged over. None when too few values say (fewer than ``min_logs``, or a share
    that never left 0 or 1 often enough to tell one group from several that always agreed)."""
    finite = values[np.isfinite(values)]
    if finite.size < min_logs or np.any((finite < 0) | (finite > 1)):
        return None
    inner = finite[(finite > 0) & (finite < 1)]
    if inner.size == 0:
        # Only 0 and 1: one group per log, unless every group always agreed; both ends seen twice or more.
        return 1 if min(int(np.sum(finite == 0)), int(np.sum(finite == 1))) >= 2 else None
    for k in range(2, largest + 1):
        scaled = inner * k
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-4 * k):
            return k
    return None


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` points at each index (fewer at the start); never looks ahead."""
    window = max(1, int(window))
    csum = np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))
    idx = np.arange(values.size)
    lo = np.maximum(0, idx + 1 - window)
    return (csum[idx + 1] - csum[lo]) / (idx + 1 - lo)


def trailing_streak(mask: np.ndarray) -> int:
    """Number of consecutive True values at the end of ``mask``."""
    if mask.size == 0 or not mask[-1]:
        return 0
    false_idx = np.flatnonzero(~mask)
    return int(mask.size - (false_idx[-1] + 1 if false_idx.size else 0))


def short_required(n_available: int, persist: int) -> int:
    """Persistence demanded of an unmistakable condition: ``persist`` logs, fewer when the log is short."""
    return max(1, min(int(persist), n_available // 2))


def mostly(mask: np.ndarray, share: float, min_count: int = 3) -> bool:
    """A state on a short log: at least ``share`` of the logs (and ``min_count`` of them) meet ``mask``, and so does
    one of the latest two, so a single log without it neither hides the state nor ends it."""
    count = int(np.count_nonzero(mask))
    return mask.size > 0 and count >= min_count and count >= share * mask.size and bool(mask[-2:].any())


def trailing_median(values: np.ndarray, window: int) -> np.ndarray:
    """Median of the last ``window`` points at each index (fewer at the start); never looks ahead."""
    n, window = values.size, max(1, int(window))
    out = np.empty(n)
    for i in range(min(window - 1, n)):
        out[i] = np.median(values[: i + 1])
    if n >= window:
        out[window - 1 :] = window_medians(np.lib.stride_tricks.sliding_window_view(values, window))
    return out


def window_medians(windows: np.ndarray) -> np.ndarray:
    """``np.median(windows, axis=1)``, the same values: rows sorted whole, which for short rows is several times
    faster than the partition np.median does per row (NaN sorts last, so a row holding one gives NaN, as there)."""
    if windows.shape[1] == 0:
        return np.median(windows, axis=1)
    ordered = np.sort(windows, axis=1)
    mid = ordered.shape[1] // 2
    middle = ordered[:, mid] if ordered.shape[1] % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2.0
    return np.where(np.isnan(ordered[:, -1]), np.nan, middle)


def extend_onset(raw_mask: np.ndarray, start: int, lookback: int) -> int:
    """Move an onset found on a smoothed series back to where the raw condition began (within the window)."""
    limit = max(0, start - lookback + 1)
    while start > limit and raw_mask[start - 1]:
        start -= 1
    return start


def trailing_median_ref(values: np.ndarray, history: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each index: median, count and zero-share of the ``history`` points before it (exclusive)."""
    n = values.size
    history = max(1, int(history))
    med = np.full(n, np.nan)
    count, zero_share = trailing_count_zero_share(values, history)
    if n < 2:
        return med, count, zero_share
    for i in range(1, min(history, n)):
        med[i] = np.median(values[:i])
    if n > history:
        windows = np.lib.stride_tricks.sliding_window_view(values[:-1], history)
        med[history:] = window_medians(windows)
    return med, count, zero_share


def trailing_count_zero_share(values: np.ndarray, history: int) -> tuple[np.ndarray, np.ndarray]:
    """For each index: how many of the ``history`` points before it exist, and the share of them exactly 0
    (``trailing_median_ref`` without the median)."""
    n = values.size
    history = max(1, int(history))
    count = np.minimum(np.arange(n), history)
    zero_share = np.zeros(n)
    if n < 2:
        return count, zero_share
    zeros = np.concatenate(([0], np.cumsum(values == 0.0)))
    idx = np.arange(n)
    zero_share[1:] = (zeros[idx[1:]] - zeros[idx[1:] - count[1:]]) / count[1:]
    return count, zero_share


def linear_fit(y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope per point index of ``y`` and its t-statistic (0 when undefined)."""
    n = y.size
    if n < 3:
        return 0.0, 0.0
    x = np.arange(n, dtype=np.float64)
    x -= x.mean()
    sxx = float(np.dot(x, x))
    slope = float(np.dot(x, y - y.mean()) / sxx)
    resid = y - y.mean() - slope * x
    dof = n - 2
    se = math.sqrt(float(np.dot(resid, resid)) / dof / sxx) if dof > 0 else 0.0
    if se == 0.0:
        return slope, (math.inf if slope > 0 else -math.inf if slope < 0 else 0.0)
    return slope, slope / se


def corr(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation, 0 when either side is constant."""
    if a.size < 3:
        return 0.0
    sa, sb = float(a.std()), float(b.std())
    # Constant up to rounding (a std of 1e-17 from summing equal floats) is constant: no correlation to speak of.
    if sa <= 1e-9 * max(1.0, abs(float(a.mean()))) or sb <= 1e-9 * max(1.0, abs(float(b.mean()))):
        return 0.0
    return float(np.mean((a - a.mean()) * (b - b.mean())) / (sa * sb))


def aligned(a: Series, b: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps both finite series share, with each one's values there."""
    steps, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def fmt(x: float | None) -> str:
    """A compact human number: 0.0123, 4.31, 1.2e-05, 2.5e+03."""
    if x is None:
        return "n/a"
    if not math.isfinite(x):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax < 1e-3 or ax >= 1e4):
        return f"{x:.2g}"
    return f"{x:.3g}"


def _distinct_steps(arrays: list[np.ndarray]) -> int:
    """How many distinct steps sorted step arrays hold together; most metrics share one step array, so identical
    ones are dropped before the (sorting) union."""
    distinct: list[np.ndarray] = []
    for a in sorted(arrays, key=len, reverse=True):
        if not any(a.size == d.size and np.array_equal(a, d) for d in distinct):
            distinct.append(a)
    return int(distinct[0].size) if len(distinct) == 1 else int(np.unique(np.concatenate(distinct)).size)
