"""A run's stored metrics out again, as the dashboard holds them: one row per (step, split) with every key.

`.csv`, `.jsonl` (None as null, NaN/±Infinity as JSON's NaN/Infinity) or `.parquet`; a logged None and NaN stay
distinct in JSONL, and both are empty/NaN in CSV and Parquet.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.store.db import Store

FORMATS = (".csv", ".jsonl", ".parquet")


def metric_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Every stored metric of a run as rows {step, split, time, key: value, ...}, by step then split."""
    by_split: dict[str, dict[int, dict[str, Any]]] = {}
    for (split, key), a in sorted(store.arrays_all(run_id).items()):
        rows = by_split.setdefault(split, {})
        values: list[Any] = a.values.tolist()
        for i in np.flatnonzero(a.is_none).tolist():
            values[i] = None
        for step, value, t in zip(a.steps.tolist(), values, a.times.tolist(), strict=True):
            row = rows.setdefault(step, {"step": step, "split": split, "time": None if math.isnan(t) else t})
            row[key] = value
    out = [row for rows in by_split.values() for row in rows.values()]
    out.sort(key=lambda r: (r["step"], r["split"] != "train", r["split"]))
    return out


def export_metrics(store: Store, run_id: str, path: str | Path) -> int:
    """Write the run's metrics to `path` (format from its suffix); returns the number of rows written."""
    p = Path(path)
    if p.suffix not in FORMATS:
        raise ValueError(f"{p}: the file must end in {', '.join(FORMATS)} (the format is chosen by the suffix).")
    rows = metric_rows(store, run_id)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".jsonl":
        with open(p, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        return len(rows)
    import pandas as pd

    frame = pd.DataFrame(rows)
    if p.suffix == ".csv":
        frame.to_csv(p, index=False)
    else:
        frame.to_parquet(p, index=False)
    return len(rows)


def export_metrics_main(argv: list[str]) -> int:
    """export-metrics RUN -o FILE: a run's stored metrics to .csv, .jsonl or .parquet."""
    p = argparse.ArgumentParser(
        prog="export-metrics",
        description="Write a run's stored metrics (one row per step and split) to .csv, .jsonl or .parquet.",
    )
    p.add_argument("run", help="Run id, unique id prefix, or name.")
    p.add_argument("-o", "--output", required=True, help="Output file (.csv, .jsonl or .parquet).")
    args = p.parse_args(argv)
    store = Store()
    try:
        run = store.find_run(args.run)
        n = export_metrics(store, run.id, args.output)
    except RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return 3
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"wrote {n} rows of {run.id} to {args.output}")
    return 0
