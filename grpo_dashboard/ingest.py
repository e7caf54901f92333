"""Incremental, idempotent ingestion of the job line protocol (metrics.jsonl) into the store.

The byte offset of each complete line is its identity: it is stored with the run in the same transaction as the
rows it produced, so a crash at any point re-reads at most what was not committed, and primary keys make a re-read
a no-op. A half-written last line is left for the next read. Invalid lines are skipped and counted.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .series_store import append_points, encode
from .store import RunStatus, Store

try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson comes with gradio; stdlib json is the fallback
    _loads = json.loads

MARKER = "@@GRPO_DASHBOARD@@ "
_MARKER_BYTES = MARKER.strip().encode()
CHUNK_BYTES = 16 * 1024 * 1024
_PLAIN = {float, int}


@dataclass
class IngestResult:
    """What one ingestion pass did."""

    records: int = 0
    events: int = 0
    skipped: int = 0
    bytes_read: int = 0

    def __iadd__(self, other: IngestResult) -> IngestResult:
        self.records += other.records
        self.events += other.events
        self.skipped += other.skipped
        self.bytes_read += other.bytes_read
        return self


def parse_line(raw: bytes | str) -> dict[str, Any] | None:
    """Decode one protocol line (with or without the stdout marker); None if it is not a valid record."""
    data = raw.encode("utf-8", errors="surrogateescape") if isinstance(raw, str) else raw
    if not data.startswith(b"{"):
        data = data.strip()
        if data.startswith(_MARKER_BYTES):
            data = data[len(_MARKER_BYTES):].strip()
        if not data.startswith(b"{"):
            return None
    try:
        obj = _loads(data)
    except ValueError:
        try:
            obj = json.loads(data.decode("utf-8"))  # NaN / Infinity: valid for Python's json, not for orjson
        except ValueError:  # also UnicodeDecodeError
            return None
    if not isinstance(obj, dict) or obj.get("type") not in ("log", "event"):
        return None
    if obj["type"] == "log":
        step = obj.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0 or not isinstance(obj.get("metrics"), dict):
            return None
    elif not isinstance(obj.get("event"), str):
        return None
    return obj


def apply_records(conn: sqlite3.Connection, run_id: str, items: list[tuple[int, dict[str, Any]]]) -> IngestResult:
    """Write parsed records (with their sequence numbers) into the store inside the caller's transaction."""
    result = IngestResult()
    groups: dict[tuple[str, tuple[str, ...]], tuple[list[int], list[list[Any]], list[float]]] = {}
    slow: dict[tuple[str, str], tuple[list[int], list[float], list[float]]] = {}
    last_step: int | None = None
    max_steps: int | None = None
    last_time: float | None = None
    attempted = 0
    for seq, rec in items:
        if rec["type"] == "event":
            payload = {k: v for k, v in rec.items() if k not in ("v", "type", "event", "time")}
            cur = conn.execute("INSERT OR IGNORE INTO events (run_id, seq, time, event, payload) "
                               "VALUES (?, ?, ?, ?, ?)",
                               (run_id, seq, _num(rec.get("time")), rec["event"], json.dumps(payload, default=str)))
            if cur.rowcount:
                result.events += 1
                _apply_event(conn, run_id, rec)
            continue
        step, split = rec["step"], "eval" if rec.get("split") == "eval" else "train"
        t = _num(rec.get("time"))
        tf = math.nan if t is None else t
        metrics = rec["metrics"]
        if set(map(type, metrics.values())) <= _PLAIN:
            # The common case (every value a plain number): rows of values, converted to columns in bulk below.
            group = groups.get((split, tuple(metrics)))
            if group is None:
                group = groups[(split, tuple(metrics))] = ([], [], [])
            group[0].append(step)
            group[1].append(list(metrics.values()))
            group[2].append(tf)
        else:
            for key, value in metrics.items():
                encoded = encode(value)
                if encoded is None:
                    result.skipped += 1
                    continue
                slot = slow.get((split, key))
                if slot is None:
                    slot = slow[(split, key)] = ([], [], [])
                slot[0].append(step)
                slot[1].append(encoded)
                slot[2].append(tf)
        attempted += 1
        last_step = step if last_step is None else max(last_step, step)
        if isinstance(rec.get("max_steps"), int) and rec["max_steps"] > 0:
            max_steps = rec["max_steps"]
        last_time = t if t is not None else last_time
    columns: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for (split, keys), (steps, rows, times) in groups.items():
        matrix = np.array(rows, dtype=np.float64).reshape(len(rows), len(keys))
        s_arr, t_arr = np.array(steps, dtype=np.int64), np.array(times, dtype=np.float64)
        for j, key in enumerate(keys):
            columns.setdefault((split, key), []).append((s_arr, matrix[:, j], t_arr))
    for (split, key), (steps, vals, times) in slow.items():
        columns.setdefault((split, key), []).append(
            (np.array(steps, dtype=np.int64), np.array(vals, dtype=np.float64), np.array(times, dtype=np.float64)))
    for (split, key), parts in columns.items():
        steps_a = np.concatenate([p[0] for p in parts])
        vals_a = np.concatenate([p[1] for p in parts])
        times_a = np.concatenate([p[2] for p in parts])
        result.skipped += append_points(conn, run_id, split, key, steps_a, vals_a, times_a)
    result.records = attempted
    if attempted:
        conn.execute(
            "UPDATE runs SET n_records = n_records + ?, last_step = MAX(COALESCE(last_step, -1), ?), "
            "max_steps = COALESCE(?, max_steps), last_time = COALESCE(?, last_time), "
            "status = CASE WHEN status = ? THEN ? ELSE status END WHERE id = ?",
            (attempted, last_step, max_steps, last_time, RunStatus.QUEUED.value, RunStatus.RUNNING.value, run_id))
    return result


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _apply_event(conn: sqlite3.Connection, run_id: str, rec: dict[str, Any]) -> None:
    event, t = rec["event"], _num(rec.get("time"))
    active = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)
    if event in ("starting", "started"):
        ms = rec.get("max_steps")
        conn.execute("UPDATE runs SET status = ?, started_at = COALESCE(started_at, ?), "
                     "max_steps = COALESCE(?, max_steps) WHERE id = ? AND status IN (?, ?)",
                     (RunStatus.RUNNING.value, t, ms if isinstance(ms, int) and ms > 0 else None, run_id, *active))
        return
    terminal = {"finished": RunStatus.COMPLETED, "failed": RunStatus.FAILED, "canceled": RunStatus.CANCELED}.get(event)
    if terminal is None:
        return
    error = None
    if terminal is RunStatus.FAILED:
        error = f"{rec.get('error_type') or 'Error'}: {rec.get('message') or '(no message)'}"
    elif terminal is RunStatus.CANCELED:
        error = rec.get("reason") or None
    conn.execute("UPDATE runs SET status = ?, error = COALESCE(?, error), ended_at = COALESCE(ended_at, ?) "
                 "WHERE id = ? AND status IN (?, ?)", (terminal.value, error, t, run_id, *active))


def ingest_file(store: Store, run_id: str, path: str | Path) -> IngestResult:
    """Read new complete lines of `path` from the run's stored offset and commit them with the new offset."""
    total = IngestResult()
    path = Path(path)
    while True:
        with store.transaction() as conn:
            row = conn.execute("SELECT ingest_offset FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return total
            offset = row[0]
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read(CHUNK_BYTES)
            except FileNotFoundError:
                return total
            if not chunk:
                return total
            end = chunk.rfind(b"\n")
            if end < 0:
                if len(chunk) < CHUNK_BYTES:
                    return total  # a half-written last line: wait for its newline
                skipped = _skip_giant_line(path, offset)
                if skipped is None:
                    return total
                conn.execute("UPDATE runs SET ingest_offset = ?, n_skipped = n_skipped + 1 WHERE id = ?",
                             (offset + skipped, run_id))
                total += IngestResult(skipped=1, bytes_read=skipped)
                continue
            items: list[tuple[int, dict[str, Any]]] = []
            bad = 0
            pos = 0
            body = chunk[: end + 1]
            for line in body.split(b"\n")[:-1]:
                seq = offset + pos
                pos += len(line) + 1
                if not line.strip():
                    continue
                rec = parse_line(line)
                if rec is None:
                    bad += 1
                else:
                    items.append((seq, rec))
            result = apply_records(conn, run_id, items)
            result.skipped += bad
            result.bytes_read = len(body)
            conn.execute("UPDATE runs SET ingest_offset = ?, n_skipped = n_skipped + ? WHERE id = ?",
                         (offset + len(body), result.skipped, run_id))
        total += result
        if len(chunk) < CHUNK_BYTES:
            return total


def _skip_giant_line(path: Path, offset: int) -> int | None:
    """Length (with newline) of an over-long line starting at offset, or None if it has no newline yet."""
    with open(path, "rb") as f:
        f.seek(offset)
        length = 0
        while True:
            block = f.read(CHUNK_BYTES)
            if not block:
                return None
            nl = block.find(b"\n")
            if nl >= 0:
                return length + nl + 1
            length += len(block)
