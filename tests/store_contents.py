"""Everything a store holds, read through the public `Store` API as canonical JSON-able data.

Used to prove a migrated store still holds what the old code wrote: `tests/fixtures/store/make_v0.py` saves this
view of the fixture (read by the code that wrote it) next to it, and the migration tests compare the view the
current code reads after migrating. Only API that today's main already had is used, so both sides read the same.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from grpo_dashboard.store.db import Store


def _value(v: float, is_none: bool) -> Any:
    if is_none:
        return None
    if math.isnan(v):
        return "nan"  # NaN != NaN: a tag compares equal, and JSON has no NaN
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def contents(store: Store) -> dict[str, Any]:
    """Runs (every column), every metric point with its nature, events, notes, badges, forecast cells, findings."""
    runs: dict[str, Any] = {}
    for run in store.list_runs():
        series = {}
        for (split, key), a in sorted(store.arrays_all(run.id).items()):
            values = [_value(v, bool(n)) for v, n in zip(a.values.tolist(), a.is_none.tolist(), strict=True)]
            times = [None if math.isnan(t) else t for t in np.asarray(a.times, dtype=float).tolist()]
            series[f"{split}/{key}"] = [list(p) for p in zip(a.steps.tolist(), values, times, strict=True)]
        runs[run.id] = {
            "row": dataclasses.asdict(run),
            "series": series,
            "events": store.events(run.id),
            "findings": store.findings(run.id),
            "metric_values": store.count_metric_values(run.id),
        }
    return {
        "runs": runs,
        "notes": store.notes(),
        "badges": {k: list(v) for k, v in store.health_badges().items()},
        "forecast_cells": {k: list(v) for k, v in store.forecast_cells().items()},
    }
