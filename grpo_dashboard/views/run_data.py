"""What the views read from a stored run besides its rows: its parsed spec and the doctor's MetricFrame of it.

Shared by the run overview (`overview.py`) and the forecast (`forecast.py`), which each build on them.
"""

from __future__ import annotations

import functools
from typing import Any

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.views.memo import LruCache

# Sized above the runs a table shows: an LRU smaller than the table is emptied by every load (each spec parsed again).
SPEC_CACHE = 4096
FRAME_CACHE = 8  # MetricFrames kept (a 10,000-step run is a few MB): the runs table and a run page ask for one twice


@functools.lru_cache(maxsize=SPEC_CACHE)
def _parsed_spec(spec_yaml: str) -> RunSpec | None:
    try:
        return RunSpec.from_yaml(spec_yaml)
    except Exception:  # an unreadable stored spec only loses what is derived from it
        return None


def run_spec(run: Run) -> RunSpec | None:
    """The run's stored spec, parsed once per distinct text (pages re-read it on every tick and parsing is not cheap);
    None when it no longer parses. Shared between callers: read it, do not modify it."""
    return _parsed_spec(run.spec_yaml)


_FRAMES: LruCache[tuple[str, str], tuple[tuple[Any, ...], Any]] = LruCache(FRAME_CACHE)


def metric_frame(store: Store, run_id: str, token: tuple[Any, ...] | None = None) -> Any:
    """The doctor's MetricFrame of a run straight from the store's columns (no dict per logged step, which
    `MetricFrame.from_records(store.records(run_id))` would build: slow on long runs). Kept for the run's change
    token (`token`: `store.change_token(run_id)` when the caller has it), so the health badge, the forecast and the
    charts of one load read the columns once. Shared between callers: read it, do not modify it."""
    token = store.change_token(run_id) if token is None else token
    key = (str(store.path), run_id)
    cached = _FRAMES.get(key)
    if cached is not None and cached[0] == token:
        return cached[1]
    frame = _read_frame(store, run_id)
    _FRAMES.put(key, (token, frame))
    return frame


def _read_frame(store: Store, run_id: str) -> Any:
    from grpo_dashboard.health.series import MetricFrame

    by_split: dict[str, dict[str, Any]] = {}
    for (split, key), pair in store.columns(run_id).items():  # system samples, stepped by wall time, left out
        by_split.setdefault(split, {})[key] = pair
    return MetricFrame.from_splits([by_split[s] for s in sorted(by_split, key=lambda s: s != "train")])
