"""Sample completions of a run, without gradio: the job's `samples.jsonl` (one JSON object per completion:
step, prompt, completion, rewards {name: value}, advantage), else TRL's `log_completions` parquet files.

`samples.jsonl` grows during training; it is indexed incrementally (byte offsets per step) so browsing one step of a
long run reads only that step's lines.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_dashboard.views.memo import LruCache

SORTS = ("total reward", "advantage", "completion length", "original order")
_PARQUET = re.compile(r"^completions_(\d+)\.parquet$")


@dataclass
class _Index:
    offset: int = 0
    steps: dict[int, list[int]] = field(default_factory=dict)


class SampleIndexes:
    """Step -> line offset indexes of samples files, each brought up to date with what was appended since; at most
    `size` files are indexed (the least recently read is dropped and rebuilt when read again)."""

    def __init__(self, size: int = 256) -> None:
        self.files: LruCache[str, _Index] = LruCache(size)
        self._lock = threading.Lock()

    def index(self, path: Path) -> _Index:
        """The index of one samples file, up to date."""
        with self._lock:
            idx = self.files.get(str(path))
            try:
                size = path.stat().st_size
            except OSError:
                return _Index()
            if idx is None or size < idx.offset:  # new, or rewritten: start over
                idx = _Index()
                self.files.put(str(path), idx)
            if size == idx.offset:
                return idx
            with open(path, "rb") as f:
                f.seek(idx.offset)
                pos = idx.offset
                for line in f:
                    if not line.endswith(b"\n"):
                        break  # a line still being written
                    step = _step_of(line)
                    if step is not None:
                        idx.steps.setdefault(step, []).append(pos)
                    pos += len(line)
                idx.offset = pos
            return idx


INDEXES = SampleIndexes()


def samples_path(run_dir: str | Path) -> Path:
    """Where the job writes sample completions."""
    return Path(run_dir) / "samples.jsonl"


def _index(path: Path) -> _Index:
    """The step -> line offsets index of a samples file, brought up to date with what was appended since."""
    return INDEXES.index(path)


def _step_of(line: bytes) -> int | None:
    m = re.match(rb'\s*\{\s*"step"\s*:\s*(-?\d+)', line)
    if m:
        return int(m.group(1))
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def _parquet_files(output_dir: str | Path | None) -> dict[int, Path]:
    if not output_dir:
        return {}
    folder = Path(output_dir) / "completions"
    if not folder.is_dir():
        return {}
    out = {}
    for p in folder.iterdir():
        m = _PARQUET.match(p.name)
        if m:
            out[int(m.group(1))] = p
    return out


def sample_steps(run_dir: str | Path, output_dir: str | Path | None = None) -> list[int]:
    """Steps with sample completions, ascending."""
    path = samples_path(run_dir)
    if path.is_file():
        return sorted(_index(path).steps)
    return sorted(_parquet_files(output_dir))


def nearest_step(steps: list[int], wanted: Any) -> int | None:
    """The sampled step to show for `wanted`: the latest when it is empty, else the nearest at or before it (the
    first one when it is before them all); None without samples."""
    if not steps:
        return None
    try:
        target = int(float(wanted))
    except (TypeError, ValueError):
        return steps[-1]
    import bisect

    i = bisect.bisect_right(steps, target)
    return steps[max(0, i - 1)]


SCORE_DIGITS = 4  # significant digits of the scores shown (rewards, totals, advantages)


def _shown(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.{SCORE_DIGITS}g}")


def read_step(run_dir: str | Path, step: int, output_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The sample rows of one step: dicts with prompt, completion, rewards (name -> value) and advantage."""
    path = samples_path(run_dir)
    if path.is_file():
        rows = []
        with open(path, "rb") as f:
            for offset in _index(path).steps.get(step, []):
                f.seek(offset)
                try:
                    rows.append(json.loads(f.readline()))
                except ValueError:
                    continue
        return rows
    pq = _parquet_files(output_dir).get(step)
    return _parquet_rows(pq) if pq else []


def _plain(value: Any) -> Any:
    """A parquet cell as JSON-like Python: a list column (a conversation) reads back as numpy arrays of dicts."""
    if isinstance(value, np.ndarray) and value.ndim:
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    """TRL's completions table (`log_completions`): its reward columns (numbers) as rewards, its `log_extra` columns
    (environment, task, ...) as extras, and the job's record of result-less tool calls as `tool_outcomes`."""
    from grpo_dashboard.spec.jobfiles import agents_module

    outcomes = agents_module().grpo_tool_calls.OUTCOMES_COLUMN
    frame = pd.read_parquet(path)
    fixed = {"step", "prompt", "completion", "advantage", outcomes}

    def numeric(column: str) -> bool:
        dtype = frame[column].dtype
        return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)

    reward_cols = [c for c in frame.columns if c not in fixed and numeric(c)]
    extra_cols = [c for c in frame.columns if c not in fixed and not numeric(c)]
    return [
        {
            "step": int(r.get("step", 0)),
            "prompt": _plain(r.get("prompt")),
            "completion": _plain(r.get("completion")),
            "rewards": {c: r.get(c) for c in reward_cols},
            "advantage": r.get("advantage"),
            **({"extra": {c: _plain(r.get(c)) for c in extra_cols}} if extra_cols else {}),
            **({"tool_outcomes": r.get(outcomes)} if outcomes in frame.columns else {}),
        }
        for r in frame.to_dict("records")
    ]


def text_of(value: Any) -> str:
    """Display text of a prompt or completion: plain strings as they are, message lists as `role: content` lines."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return f"{value.get('role', '?')}: {value.get('content', '')}"
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else value
        return "\n".join(text_of(m) for m in items)
    return str(value)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def samples_frame(
    rows: list[dict[str, Any]],
    weights: dict[str, float] | None = None,
    sort_by: str = SORTS[0],
    descending: bool = True,
) -> pd.DataFrame:
    """A table of one step's samples: prompt, completion, one column per reward, weighted total, advantage (scores
    rounded to SCORE_DIGITS significant digits; the total is summed before rounding).

    Args:
        rows: rows from `read_step`.
        weights: reward name -> weight for the total (missing names weigh 1.0; None rewards are skipped, as TRL's
            nansum does).
        sort_by: a value of SORTS or a reward name.
        descending: sort order (ties keep the original order).
    """
    names: list[str] = []
    for r in rows:
        for n in r.get("rewards") or {}:
            if n not in names:
                names.append(n)
    weights = weights or {}
    records = []
    for i, r in enumerate(rows):
        rewards = r.get("rewards") or {}
        values = {n: _num(rewards.get(n)) for n in names}
        present = [weights.get(n, 1.0) * v for n, v in values.items() if v is not None]
        completion = text_of(r.get("completion"))
        records.append(
            {
                "#": i,
                "prompt": text_of(r.get("prompt")),
                "completion": completion,
                **{n: _shown(v) for n, v in values.items()},
                "total reward": _shown(sum(present)) if present else None,
                "advantage": _shown(_num(r.get("advantage"))),
                "completion length": len(completion),
            }
        )
    columns = ["#", "prompt", "completion", *names, "total reward", "advantage", "completion length"]
    frame = pd.DataFrame(records, columns=columns)
    key = sort_by if sort_by in frame.columns and sort_by != "original order" else None
    if key is not None:
        frame = frame.sort_values(key, ascending=not descending, kind="stable", na_position="last")
    elif not descending:
        frame = frame.iloc[::-1]
    return frame.reset_index(drop=True)


def recent_samples(
    run_dir: str | Path, n_steps: int = 3, output_dir: str | Path | None = None
) -> list[dict[str, Any]]:
    """Rows of the last `n_steps` sampled steps (for the health doctor's duplicate-completions rule)."""
    steps = sample_steps(run_dir, output_dir)[-n_steps:]
    return [row for s in steps for row in read_step(run_dir, s, output_dir)]
