"""Helpers shared by the store, chart and live-viewer tests: a run row with its metrics.jsonl, log records appended
to it, and TensorBoard's smoothing loop as the reference for the EMA."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from grpo_dashboard.store.db import Run, Store


def new_run(store: Store, tmp_path: Path, run_id: str = "r1") -> Path:
    """Insert a running local run with its own directory under `tmp_path`; returns where its metrics.jsonl goes."""
    run_dir = tmp_path / run_id
    run_dir.mkdir()
    store.insert_run(
        Run(
            id=run_id,
            name=run_id,
            spec_yaml="name: x\n",
            backend="local",
            status="running",
            created_at=time.time(),
            run_dir=str(run_dir),
        )
    )
    return run_dir / "metrics.jsonl"


def append_log(path: Path, steps: range | list[int], **series: Any) -> None:
    """Append one log record per step; each keyword is a function step -> value (or a constant)."""
    with path.open("a") as f:
        for step in steps:
            metrics = {k: (v(step) if callable(v) else v) for k, v in series.items()}
            f.write(
                json.dumps(
                    {"v": 1, "type": "log", "split": "train", "step": step, "time": 1000.0 + step, "metrics": metrics}
                )
                + "\n"
            )


def reference_ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's loop, verbatim in spirit."""
    out, last, count = [], 0.0, 0
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        count += 1
        out.append(last / (1 - weight**count))
    return out
