"""Shared pieces of the benchmarks: the synthetic GRPO log, timing helpers, machine details and the trackio peer.

Every benchmark measures ours and the peer (trackio 0.43, when importable) side by side in the same process and
prints ratios, because absolute timings on a shared machine are noisy. Nothing here is imported by the package.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The keys TRL 1.16 logs for a GRPO run with two reward functions (27 in all).
GRPO_KEYS = (
    "loss",
    "grad_norm",
    "learning_rate",
    "num_tokens",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
    "rewards/accuracy/mean",
    "rewards/accuracy/std",
    "rewards/format/mean",
    "rewards/format/std",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "kl",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_mean",
    "clip_ratio/high_max",
    "clip_ratio/region_mean",
    "step_time",
    "epoch",
)
assert len(GRPO_KEYS) == 27
T0 = 1_764_000_000.0


def grpo_metrics(step: int, n_steps: int) -> dict[str, float]:
    """A plausible, deterministic GRPO log record (a grad_norm spike every 997 steps: something to keep)."""
    frac = step / n_steps
    wobble = math.sin(step * 0.37)
    spike = 25.0 if step % 997 == 0 else 0.0
    reward = 0.1 + 0.6 * frac + 0.05 * wobble
    values = {
        "loss": 0.01 * wobble,
        "grad_norm": 0.4 + 0.1 * abs(wobble) + spike,
        "learning_rate": 1e-6 * (1 - frac),
        "num_tokens": 2048.0 * step,
        "completions/mean_length": 180 + 40 * wobble,
        "completions/min_length": 20.0,
        "completions/max_length": 512.0,
        "completions/clipped_ratio": 0.05 + 0.02 * wobble,
        "completions/mean_terminated_length": 170 + 30 * wobble,
        "completions/min_terminated_length": 20.0,
        "completions/max_terminated_length": 498.0,
        "rewards/accuracy/mean": reward,
        "rewards/accuracy/std": 0.3 + 0.05 * wobble,
        "rewards/format/mean": 0.9,
        "rewards/format/std": 0.1,
        "reward": reward + 0.9,
        "reward_std": 0.35,
        "frac_reward_zero_std": 0.1 + 0.05 * wobble,
        "kl": 0.001 * step / 100 + 0.002 * abs(wobble),
        "entropy": 1.2 - 0.5 * frac + 0.03 * wobble,
        "clip_ratio/low_mean": 0.001,
        "clip_ratio/low_min": 0.0,
        "clip_ratio/high_mean": 0.002,
        "clip_ratio/high_max": 0.01,
        "clip_ratio/region_mean": 0.003,
        "step_time": 9.5 + wobble,
        "epoch": step / 1000,
    }
    return {k: round(v, 9) for k, v in values.items()}


def protocol_line(step: int, n_steps: int) -> str:
    """The job's line-protocol record for one step (what jobs/grpo_job.py writes to metrics.jsonl)."""
    return (
        json.dumps(
            {
                "v": 1,
                "type": "log",
                "split": "train",
                "step": step,
                "time": T0 + 10.0 * step,
                "elapsed": 10.0 * step,
                "max_steps": n_steps,
                "metrics": grpo_metrics(step, n_steps),
            }
        )
        + "\n"
    )


def write_metrics_jsonl(path: Path, n_steps: int, first: int = 1) -> Path:
    """metrics.jsonl with a `started` event and steps first..n_steps."""
    with path.open("w", encoding="utf-8") as f:
        if first == 1:
            f.write(json.dumps({"v": 1, "type": "event", "event": "started", "time": T0, "max_steps": n_steps}) + "\n")
        f.writelines(protocol_line(s, n_steps) for s in range(first, n_steps + 1))
    return path


def iso(ts: float) -> str:
    """A unix time as the ISO string trackio stores."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


@contextmanager
def trackio_dir() -> Iterator[Path]:
    """A temporary TRACKIO_DIR for the peer (set before trackio is imported anywhere)."""
    with tempfile.TemporaryDirectory(prefix="bench-trackio-") as d:
        old = os.environ.get("TRACKIO_DIR")
        os.environ["TRACKIO_DIR"] = d
        try:
            yield Path(d)
        finally:
            if old is None:
                os.environ.pop("TRACKIO_DIR", None)
            else:
                os.environ["TRACKIO_DIR"] = old


def trackio_storage() -> Any | None:
    """trackio's SQLiteStorage class, or None when trackio is not installed (the script then says so)."""
    try:
        from trackio.sqlite_storage import SQLiteStorage
    except ImportError:
        return None
    return SQLiteStorage


def trackio_version() -> str | None:
    """The installed trackio version."""
    try:
        import trackio
    except ImportError:
        return None
    return str(trackio.__version__)


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """(fastest wall seconds over `repeat` calls, last result): the least noisy figure on a shared machine."""
    best, result = math.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def median_of(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall seconds over `repeat` calls."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (from /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def machine() -> dict[str, Any]:
    """What the figures were measured on: cores, CPU model, load, Python and library versions."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")
            )
        )
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory": f"{mem_kb / 2**20:.0f} GiB",
        "load_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for mod in ("numpy", "torch", "trl", "transformers", "gradio", "trackio"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # a missing or broken optional import is only reported
            info[mod] = None
    try:
        import sqlite3

        info["sqlite"] = sqlite3.sqlite_version
    except ImportError:
        pass
    return info


def print_machine() -> None:
    """One line of machine details."""
    print("machine: " + ", ".join(f"{k}={v}" for k, v in machine().items()))


def git_rev() -> str:
    """The commit the benchmark ran on (with '+dirty' when the tree has changes)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except OSError:
        return "?"
    return rev or "?"


def ratio(peer: float, ours: float) -> str:
    """`peer / ours` as text (how many times faster we are)."""
    if not ours or math.isnan(ours) or math.isnan(peer):
        return "n/a"
    return f"{peer / ours:.1f}x"


def row(figure: str, ours: str, peer: str, ratio_text: str, target: str, met: bool | None) -> str:
    """One line of the results table, as printed and as pasted into RESULTS.md."""
    verdict = {True: "yes", False: "NO", None: "-"}[met]
    return f"| {figure} | {ours} | {peer} | {ratio_text} | {target} | {verdict} |"


TABLE_HEAD = "| figure | ours | peer (trackio) | ratio | target | met |\n|---|---|---|---|---|---|"


RUN_ID = "bench-100k"
PROJECT = "bench"


def new_store(data: Path, run_id: str = RUN_ID, run_dir: Path | None = None) -> Any:
    """A fresh Store under `data` with one running run row (run_dir defaults to `data`)."""
    from grpo_dashboard.store.db import Run, Store

    store = Store(data / "dashboard.db")
    store.insert_run(
        Run(
            id=run_id,
            name=run_id,
            spec_yaml="name: bench\n",
            backend="local",
            status="running",
            created_at=T0,
            run_dir=str(run_dir or data),
        )
    )
    return store


def log_records(path: Path) -> tuple[list[dict[str, float]], list[int], list[str]]:
    """The log records of a metrics.jsonl as trackio's bulk_log takes them: metric dicts, steps, ISO timestamps."""
    import orjson

    metrics, steps, stamps = [], [], []
    with path.open("rb") as f:
        for line in f:
            rec = orjson.loads(line)
            if rec.get("type") == "log":
                metrics.append(rec["metrics"])
                steps.append(rec["step"])
                stamps.append(iso(rec["time"]))
    return metrics, steps, stamps


def db_bytes(path: Path) -> int:
    """Size of a SQLite database with its WAL folded in (checkpointed first)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def count_values(path: Path) -> int:
    """Metric values in the log records of a metrics.jsonl."""
    import orjson

    with path.open("rb") as f:
        return sum(len(rec["metrics"]) for rec in map(orjson.loads, f) if rec.get("type") == "log")
