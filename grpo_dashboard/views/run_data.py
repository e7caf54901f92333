"""What the views read from a stored run besides its rows: its parsed spec and the doctor's MetricFrame of it.

Shared by the run overview (`overview.py`) and the forecast (`forecast.py`), which each build on them.
"""

from __future__ import annotations

import functools
from typing import Any

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.series import SYSTEM_SPLIT


@functools.lru_cache(maxsize=128)
def _parsed_spec(spec_yaml: str) -> RunSpec | None:
    try:
        return RunSpec.from_yaml(spec_yaml)
    except Exception:  # an unreadable stored spec only loses what is derived from it
        return None


def run_spec(run: Run) -> RunSpec | None:
    """The run's stored spec, parsed once per distinct text (pages re-read it on every tick and parsing is not cheap);
    None when it no longer parses. Shared between callers: read it, do not modify it."""
    return _parsed_spec(run.spec_yaml)


def metric_frame(store: Store, run_id: str) -> Any:
    """The doctor's MetricFrame of a run straight from the store's columns (no dict per logged step, which
    `MetricFrame.from_records(store.records(run_id))` would build: slow on long runs)."""
    from grpo_dashboard.health.series import MetricFrame

    by_split: dict[str, dict[str, Any]] = {}
    for (split, key), a in store.arrays_all(run_id).items():
        if split != SYSTEM_SPLIT:  # stepped by wall time: the doctor reads training steps
            by_split.setdefault(split, {})[key] = (a.steps, a.values)
    return MetricFrame.from_splits([by_split[s] for s in sorted(by_split, key=lambda s: s != "train")])
