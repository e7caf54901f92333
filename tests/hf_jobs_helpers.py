"""Helpers shared by the Hugging Face Jobs tests (test_hf_jobs.py, test_hub_faults.py): the fake user's token, what a
job prints, and following a run to its end. The fake Hub itself is the `hub` fixture of conftest.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from grpo_dashboard.launch import backends
from grpo_dashboard.launch.runs import refresh
from grpo_dashboard.store.db import TERMINAL, Store

from .conftest import SMOKE_DATA, smoke_dict, store_records, wait_for, write_spec

TOKEN = "hf_FakeUserToken0123456789abcdef"
MARK = "@@GRPO_DASHBOARD@@ "


def protocol_lines(steps: int, end: str = "finished", noise: bool = True) -> list[str]:
    """What a job prints: protocol records (with NaN, ±Infinity and null values) between ordinary log lines."""
    t = 1_700_000_000.0
    recs: list[dict[str, Any]] = [
        {"v": 1, "type": "event", "event": "starting", "time": t, "pid": 7},
        {"v": 1, "type": "event", "event": "started", "time": t + 1, "max_steps": steps},
    ]
    lines = ["Installed 87 packages in 2.1s", "Downloading model: 100%|##########| 1/1"] if noise else []
    lines += [MARK + json.dumps(r) for r in recs]
    for s in range(1, steps + 1):
        metrics = {
            "loss": 0.01 * s,
            "reward": s / steps,
            "kl": math.nan if s == 3 else 0.001 * s,
            "grad_norm": math.inf if s == 4 else 1.0 / s,
            "entropy": None if s == 5 else 2.0 - s / 100,
            "learning_rate": 1e-6,
            "completions/mean_length": 12.5,
        }
        rec = {
            "v": 1,
            "type": "log",
            "split": "train",
            "step": s,
            "time": t + 1 + s,
            "max_steps": steps,
            "metrics": metrics,
        }
        if noise and s % 4 == 0:
            lines.append(f" {s}/{steps} [00:0{s % 10}<00:10, 1.52it/s]")
        lines.append(MARK + json.dumps(rec))
    if noise:
        lines.append(MARK + '{"v": 1, "type": "log", "broken')  # a garbled record: skipped and counted
    if end == "finished":
        lines.append(MARK + json.dumps({"v": 1, "type": "event", "event": "finished", "time": t + 99, "step": steps}))
    elif end == "failed":
        lines += ["Traceback (most recent call last):", '  File "grpo_job.py", line 1', "ValueError: boom"]
        lines.append(
            MARK
            + json.dumps(
                {
                    "v": 1,
                    "type": "event",
                    "event": "failed",
                    "time": t + 99,
                    "error_type": "ValueError",
                    "message": "boom",
                    "traceback": "...",
                }
            )
        )
    return lines


def printed_records(lines: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """The metric records in what the job printed, as {(split, step): {key: value}}."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in lines:
        if MARK.strip() not in line:
            continue
        try:
            rec = json.loads(line[line.index(MARK.strip()) + len(MARK) :])
        except ValueError:
            continue
        if rec.get("type") == "log":
            slot = out.setdefault((rec.get("split", "train"), rec["step"]), {})
            for k, v in rec["metrics"].items():
                slot.setdefault(k, v)
    return out


SAMPLED = ("system/cpu/", "system/memory/", "system/gpu")  # series the dashboard samples from the Jobs metrics


def logged_records(store: Store, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """What the store holds from the job's log (`store_records` without the dashboard's own samples of the Jobs
    metrics stream, which the fake Hub serves while a job runs and no log line carries)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for ident, metrics in store_records(store, run_id).items():
        kept = {k: v for k, v in metrics.items() if not (ident[0] == "system" and k.startswith(SAMPLED))}
        if kept:
            out[ident] = kept
    return out


def hf_spec(tmp_path: Path, **backend: Any) -> Path:
    spec = smoke_dict(tmp_path / "tiny-not-built")
    spec["model"] = {"name_or_path": ".cache/tiny-qwen2-char", "build_tiny": True, "dtype": "float32"}
    spec["dataset"]["data_files"] = str(SMOKE_DATA)
    spec["training"]["max_steps"] = 4
    spec["backend"] = {"kind": "hf_jobs", "flavor": "cpu-basic", "namespace": "alice", "timeout": "30m", **backend}
    return write_spec(tmp_path / "hf.yaml", spec)


def follow_until_done(store: Store, run_id: str, timeout: float = 60.0) -> Any:
    """What the Monitor does (refresh every tick) until the run ends and its follower has finished."""

    def done() -> bool:
        run = refresh(store, store.get_run(run_id))
        return run.status in TERMINAL and backends.shared().hf_jobs.follower(run_id) is None

    wait_for(done, timeout=timeout, interval=0.1)
    return store.get_run(run_id)
