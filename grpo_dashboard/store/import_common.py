"""What every importer shares: the record shape, TRL's key names back from a logger's prefixed ones, the step
axis of a logged row, and how rows of one step are merged into one record.

transformers' logging callbacks (TensorBoard, W&B, trackio) write TRL's log keys as `train/<key>` and
`eval/<key>` (`rewrite_logs`) with the trainer's step as `train/global_step` (W&B and trackio) or as the event
step (TensorBoard). A launched run records TRL's own names (`reward`, `eval_reward`) on the trainer's step, so every
source is mapped back the same way here: the curves, the doctor and Compare then read an import like a launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = tuple[str, int, float | None, dict[str, Any]]  # (split, step, unix time, metrics)
GLOBAL_STEP = "train/global_step"  # transformers' WandbCallback / TrackioCallback: the trainer's step
# TRL's ProfilingContext logs its timings straight to W&B / trackio, outside the trainer's logs (a launched run
# never records them, and W&B counts each as one more `_step`): they are not metrics of a step.
PROFILING = "profiling/"


@dataclass
class Source:
    """What was found at a path: its kind and the records it holds, in step order."""

    kind: str
    path: Path
    records: list[Row]
    config: dict[str, Any]
    name: str


def trl_key(tag: str) -> str:
    """A logger's key back to TRL's log key: `train/reward` -> `reward`, `eval/reward` -> `eval_reward`."""
    if tag.startswith("train/"):
        return tag[len("train/") :]
    if tag.startswith("eval/"):
        return "eval_" + tag[len("eval/") :]
    if tag.startswith("test/"):
        return "test_" + tag[len("test/") :]
    return tag


def split_of(metrics: dict[str, Any]) -> str:
    """`eval` for a record of evaluation metrics (TRL's `eval_` keys), else `train`."""
    return "eval" if any(k.startswith("eval_") or k.startswith("eval/") for k in metrics) else "train"


def flat(metrics: dict[str, Any]) -> dict[str, Any]:
    """The plain numbers (and nulls) of a metrics mapping; tables, media and text are dropped."""
    return {k: v for k, v in metrics.items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def trl_metrics(raw: dict[str, Any]) -> dict[str, Any]:
    """A logged row's numeric metrics under TRL's names, without the step counters and profiling timings."""
    out: dict[str, Any] = {}
    for key, value in flat(raw).items():
        if key.startswith("_") or key == GLOBAL_STEP or key.startswith(PROFILING):
            continue
        out[trl_key(key)] = value
    return out


def logged_step(raw: dict[str, Any], fallback: Any) -> Any:
    """The trainer's step of a logged row: `train/global_step` when the row carries it, else `fallback` (the
    logger's own counter, which counts calls, not steps)."""
    step = raw.get(GLOBAL_STEP)
    if isinstance(step, (int, float)) and not isinstance(step, bool):
        return int(step)
    return fallback


def merge_steps(rows: list[Row]) -> list[Row]:
    """One record per (split, step), in step order: a logger that writes one step in several calls (or a resumed
    run that logs a step twice) becomes what the job would have recorded; later values win, the first time stays."""
    merged: dict[tuple[str, int], Row] = {}
    for split, step, stamp, metrics in rows:
        old = merged.get((split, step))
        if old is None:
            merged[(split, step)] = (split, step, stamp, dict(metrics))
        else:
            old[3].update(metrics)
    return sorted(merged.values(), key=lambda r: (r[1], r[0] != "train"))
