"""The one display pipeline of metric series: every chart line, in Run detail and in Compare, is drawn from here.

A series for display is a `SeriesArrays` of at most `max_points` points (each bucket's lowest and highest value, so
spikes survive, its first non-finite one, so gaps stay visible, and the first and the latest point) with `smooth`, the
debiased EMA of the full series at those points, and `band`, a companion series' EMA at them (a reward's std around
its mean; NaN without one). Both the reduction and the EMA are `downsample.SeriesSummary`'s.

The store only hands out raw arrays; the summaries are kept here, per store, and brought up to date by reading only
the points logged since (`downsampled`), which is what makes a live page's refresh cost its new records only.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from grpo_dashboard.store.db import Store
from grpo_dashboard.store.series import SeriesArrays
from grpo_dashboard.views.downsample import SeriesSummary

MAX_POINTS = 2000
SUMMARY_CACHE_ENTRIES = 16  # (run, display options) summaries kept per store, least recently used dropped
REWARD_MEAN = re.compile(r"^rewards/(.+)/mean$")

Key = tuple[str, str]  # (split, metric key)
SeriesMap = dict[Key, SeriesArrays]


def bands_of(keys: Iterable[Key]) -> dict[Key, Key]:
    """The band of each series that has one: a train reward function's mean -> its std, when both are logged."""
    present = set(keys)
    out = {}
    for split, key in present:
        if split == "train" and REWARD_MEAN.match(key):
            std = ("train", key[: -len("mean")] + "std")
            if std in present:
                out[(split, key)] = std
    return out


def reduce(
    series: SeriesArrays, max_points: int = MAX_POINTS, smoothing: float = 0.0, companion: SeriesArrays | None = None
) -> SeriesArrays:
    """A whole series (steps ascending) for display, in one go: what `downsampled` keeps of it, without a store."""
    summary = SeriesSummary(max_points, smoothing)
    if len(series):
        summary.add(series, companion)
    return summary.points()


def reduce_all(series: Mapping[Key, SeriesArrays], max_points: int = MAX_POINTS, smoothing: float = 0.0) -> SeriesMap:
    """`reduce` of every series of a run, keyed by (split, key), reward means with their std as band."""
    bands = bands_of(series)
    return {k: reduce(s, max_points, smoothing, series[bands[k]] if k in bands else None) for k, s in series.items()}


def run_series(store: Store, run_id: str, smoothing: float = 0.0, max_points: int = MAX_POINTS) -> SeriesMap:
    """Every series of a run for display (reward means with their std band), keyed by (split, key)."""
    return downsampled(store, run_id, max_points, smoothing, companions=bands_of(store.metric_keys(run_id)))


def downsampled(
    store: Store,
    run_id: str,
    max_points: int = MAX_POINTS,
    smoothing: float = 0.0,
    keys: Iterable[Key] | None = None,
    companions: dict[Key, Key] | None = None,
) -> SeriesMap:
    """Every (or the given) (split, key) series of a run for display (see the module docstring); `companions` maps
    a series to the one whose EMA (same weight, over its full series) is its `band`.

    Summaries are cached per store and (run, max_points, smoothing, companions) and brought up to date by reading
    only the points logged since; a series that changed otherwise (a late out-of-order point) is summarised again.
    The returned arrays are shared between callers until the series grows: do not modify them.
    """
    companions = dict(companions or {})
    ident = (run_id, int(max_points), float(smoothing), tuple(sorted(companions.items())))
    with _CACHES_LOCK:
        cache = _CACHES.get(store)
        if cache is None:
            cache = _CACHES[store] = OrderedDict()
        entry = cache.pop(ident, None) or _SummaryEntry()
        cache[ident] = entry  # most recently used last
        while len(cache) > SUMMARY_CACHE_ENTRIES:
            cache.popitem(last=False)
    wanted = set(keys) if keys is not None else None
    with entry.lock:
        heads = store.series_heads(run_id)
        shown = [k for k in heads if wanted is None or k in wanted]
        for k in [k for k, s in entry.series.items() if k not in heads or heads[k][0] < s.n]:
            del entry.series[k]
            entry.points.pop(k, None)
        since: dict[Key, int | None] = {
            k: s.last_step for k, s in entry.series.items() if k in shown and heads[k] != (s.n, s.last_step)
        }
        since.update((k, None) for k in shown if k not in entry.series)
        if since:
            whole = len(since) == len(heads) and all(v is None for v in since.values())
            new = store.arrays_all(run_id, None if whole else since)
            for k in since:
                _refresh(
                    store, run_id, entry, k, heads, new.get(k), companions.get(k), int(max_points), float(smoothing)
                )
        out = {}
        for k in shown:
            if k not in entry.series:
                continue
            pts = entry.points.get(k)
            if pts is None:
                pts = entry.points[k] = entry.series[k].points()
            out[k] = pts
        return out


def _refresh(
    store: Store,
    run_id: str,
    entry: _SummaryEntry,
    k: Key,
    heads: dict[Key, tuple[int, int]],
    arrays: SeriesArrays | None,
    companion: Key | None,
    max_points: int,
    smoothing: float,
) -> None:
    """Bring one cached summary up to date with `arrays` (its points after the summary's last step)."""
    entry.points.pop(k, None)
    summary = entry.series.get(k)
    aux_new: SeriesArrays | None = None
    if summary is not None and companion is not None:
        aux_new = store.arrays(run_id, companion[1], companion[0], summary.aux_last_step)
        if summary.aux_n + len(aux_new) != heads.get(companion, (0, 0))[0]:
            summary = None  # the companion changed in place: start over
    if summary is not None and (arrays is None or summary.n + len(arrays) != heads[k][0]):
        summary = None  # changed in place (a late out-of-order point): start over
    if summary is None:
        if arrays is None or len(arrays) != heads[k][0]:
            arrays = store.arrays(run_id, k[1], k[0])
        summary = entry.series[k] = SeriesSummary(max_points, smoothing)
        aux_new = None if companion is None else store.arrays(run_id, companion[1], companion[0])
    if arrays is None or not len(arrays):
        return
    summary.add(arrays, aux_new)


class _SummaryEntry:
    """Cached display summaries of one run for one (max_points, smoothing, companions), guarded by its own lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.series: dict[Key, SeriesSummary] = {}
        self.points: dict[Key, SeriesArrays] = {}  # the last points() of each series, until it grows


# Per store (a fresh Store starts cold; a dropped one takes its summaries with it).
_CACHES: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[Any, ...], _SummaryEntry]] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()
