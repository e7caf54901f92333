"""Ingestion of the line protocol: incremental, idempotent, tolerant of partial lines and odd values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.store.db import Store
from grpo_dashboard.store.ingest import MARKER, ingest_file, parse_line

from .store_helpers import new_run


def log_line(step: int, split: str = "train", **metrics: Any) -> str:
    return (
        json.dumps(
            {
                "v": 1,
                "type": "log",
                "split": split,
                "step": step,
                "time": 1000.0 + step,
                "max_steps": 10,
                "metrics": metrics,
            }
        )
        + "\n"
    )


def test_partial_last_line_is_read_once_complete(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    full = log_line(1, reward=0.5) + log_line(2, reward=0.6)
    head, tail = full[: len(full) - 10], full[len(full) - 10 :]
    path.write_text(head)
    res = ingest_file(store, "r1", path)
    assert res.records == 1 and res.skipped == 0
    assert store.get_run("r1").ingest_offset == len(log_line(1, reward=0.5))
    with open(path, "a") as f:
        f.write(tail)
    res = ingest_file(store, "r1", path)
    assert res.records == 1
    assert [s for s, _, _ in store.series("r1", "reward")] == [1, 2]
    assert store.get_run("r1").last_step == 2 and store.get_run("r1").max_steps == 10


def test_nan_none_and_infinities_are_stored_as_such(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    path.write_text(
        log_line(1, loss=float("nan"), grad_norm=float("inf"), kl=float("-inf"), entropy=None, reward=0.25)
    )
    ingest_file(store, "r1", path)
    latest = store.latest_metrics("r1")
    assert math.isnan(latest["loss"])
    assert latest["grad_norm"] == math.inf and latest["kl"] == -math.inf
    assert latest["entropy"] is None and "entropy" in latest
    assert latest["reward"] == 0.25
    assert store.records("r1") == [
        {
            "step": 1,
            "loss": pytest.approx(math.nan, nan_ok=True),
            "grad_norm": math.inf,
            "kl": -math.inf,
            "entropy": None,
            "reward": 0.25,
        }
    ]


def test_rereading_never_duplicates(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    path.write_text("".join(log_line(i, reward=i / 10) for i in range(1, 6)))
    ingest_file(store, "r1", path)
    store.update_run("r1", ingest_offset=0)  # as if a crash lost the offset: the primary key protects us
    res = ingest_file(store, "r1", path)
    assert res.skipped == 0
    assert store.count_metric_values("r1") == 5
    assert len(store.series("r1", "reward")) == 5


def test_invalid_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    with open(path, "wb") as f:
        f.write(log_line(1, reward=0.1).encode())
        f.write(b"not json at all\n")
        f.write(b'{"v": 1, "type": "log", "step": "two", "metrics": {}}\n')
        f.write(b"\xff\xfe garbage bytes\n")
        f.write(log_line(2, reward="high", loss=0.0).encode())
        f.write(log_line(3, reward=0.3).encode())
    res = ingest_file(store, "r1", path)
    assert res.records == 3
    assert res.skipped == 4  # three bad lines and one string value
    assert store.get_run("r1").n_skipped == 4
    assert [s for s, _, _ in store.series("r1", "reward")] == [1, 3]
    assert [s for s, _, _ in store.series("r1", "loss")] == [2]


def test_repeated_step_keeps_the_first_value_and_counts_conflicts(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    path.write_text(
        log_line(1, reward=0.1, epoch=0.5) + log_line(1, epoch=0.5, train_loss=0.2) + log_line(1, reward=0.9)
    )
    res = ingest_file(store, "r1", path)
    assert res.skipped == 1  # epoch repeated with the same value is not a conflict; reward 0.9 is
    assert store.latest_metrics("r1") == {"reward": 0.1, "epoch": 0.5, "train_loss": 0.2}


def test_out_of_order_and_eval_records(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    path.write_text(log_line(3, reward=0.3) + log_line(1, reward=0.1) + log_line(2, "eval", eval_reward=0.2))
    ingest_file(store, "r1", path)
    assert [s for s, _, _ in store.series("r1", "reward")] == [1, 3]
    assert store.series("r1", "eval_reward", split="eval") == [(2, 0.2, 1002.0)]
    assert store.get_run("r1").last_step == 3


def test_events_set_status_and_error(tmp_path: Path) -> None:
    store = Store()
    path = new_run(store, tmp_path)
    store.update_run("r1", status="queued")
    ev = {"v": 1, "type": "event", "event": "started", "time": 5.0, "max_steps": 7}
    path.write_text(json.dumps(ev) + "\n")
    ingest_file(store, "r1", path)
    run = store.get_run("r1")
    assert run.status == "running" and run.started_at == 5.0 and run.max_steps == 7
    fail = {
        "v": 1,
        "type": "event",
        "event": "failed",
        "time": 6.0,
        "error_type": "ZeroDivisionError",
        "message": "division by zero",
    }
    with open(path, "a") as f:
        f.write(json.dumps(fail) + "\n")
    ingest_file(store, "r1", path)
    run = store.get_run("r1")
    assert run.status == "failed" and run.error == "ZeroDivisionError: division by zero"
    assert [e["event"] for e in store.events("r1")] == ["started", "failed"]


def test_giant_line_is_skipped_without_stopping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpo_dashboard.store.ingest as ingest

    monkeypatch.setattr(ingest, "CHUNK_BYTES", 1024)
    store = Store()
    path = new_run(store, tmp_path)
    giant = json.dumps({"v": 1, "type": "log", "step": 2, "metrics": {"x": "y" * 5000}}) + "\n"
    path.write_text(log_line(1, reward=0.1) + giant + log_line(3, reward=0.3))
    ingest_file(store, "r1", path)
    assert [s for s, _, _ in store.series("r1", "reward")] == [1, 3]
    assert store.get_run("r1").n_skipped == 1
    assert store.get_run("r1").ingest_offset == path.stat().st_size


def test_parse_line_accepts_the_stdout_marker() -> None:
    rec = parse_line(MARKER + log_line(4, reward=1.0))
    assert rec is not None and rec["step"] == 4
    assert parse_line("plain training output") is None
    assert parse_line('{"v": 1, "type": "log", "step": -1, "metrics": {}}') is None
