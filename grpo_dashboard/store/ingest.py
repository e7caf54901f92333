"""Incremental, idempotent ingestion of the job line protocol (metrics.jsonl) into the store.

The byte offset of each complete line is its identity: it is stored with the run in the same transaction as the
rows it produced, so a crash at any point re-reads at most what was not committed, and primary keys make a re-read
a no-op. A half-written last line is left for the next read. Invalid lines are skipped and counted.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, chain
from pathlib import Path
from typing import Any

import numpy as np

from grpo_dashboard.redaction import redact_deep
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.store.db import RunStatus, Store
from grpo_dashboard.store.series import SYSTEM_SPLIT, append_points, encode

try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson comes with gradio; stdlib json is the fallback
    _loads = json.loads  # type: ignore[assignment]

MARKER: str = job_module().MARKER  # the job's stdout prefix of protocol lines
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
            data = data[len(_MARKER_BYTES) :].strip()
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
    # Log records grouped by split and key order: one group is one float matrix, converted in bulk.
    groups: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
    logs: list[dict[str, Any]] = []  # training log records (system samples are series too, but not logged steps)
    system = 0
    for seq, rec in items:
        if rec["type"] == "event":
            rec = redact_deep(rec)  # a job's failure message may quote a token: none is kept
            payload = {k: v for k, v in rec.items() if k not in ("v", "type", "event", "time")}
            cur = conn.execute(
                "INSERT OR IGNORE INTO events (run_id, seq, time, event, payload) VALUES (?, ?, ?, ?, ?)",
                (run_id, seq, _num(rec.get("time")), rec["event"], json.dumps(payload, default=str)),
            )
            if cur.rowcount:
                result.events += 1
                _apply_event(conn, run_id, rec)
            continue
        split = rec.get("split")
        if split != SYSTEM_SPLIT:
            logs.append(rec)
        else:
            system += 1
        ident = (split if split in ("eval", SYSTEM_SPLIT) else "train", tuple(rec["metrics"]))
        group = groups.get(ident)
        if group is None:
            groups[ident] = [rec]
        else:
            group.append(rec)
    if not logs and not system:
        return result
    columns: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    last_step = -1
    for (split, keys), recs in groups.items():
        steps = np.fromiter((r["step"] for r in recs), dtype=np.int64, count=len(recs))
        if split != SYSTEM_SPLIT:
            last_step = max(last_step, int(steps.max()))
        times = _times(recs)
        block = _plain_block(recs, len(keys))
        if block is not None:
            for j, key in enumerate(keys):
                columns.setdefault((split, key), []).append((steps, block[:, j], times))
            continue
        for key, col in zip(keys, zip(*(r["metrics"].values() for r in recs), strict=True), strict=True):
            keep, vals = _column(col)
            if keep is None:
                columns.setdefault((split, key), []).append((steps, vals, times))
                continue
            result.skipped += len(recs) - int(keep.sum())
            if keep.any():
                columns.setdefault((split, key), []).append((steps[keep], vals, times[keep]))
    for (split, key), parts in columns.items():
        if len(parts) == 1:
            steps_a, vals_a, times_a = parts[0]
        else:
            steps_a = np.concatenate([p[0] for p in parts])
            vals_a = np.concatenate([p[1] for p in parts])
            times_a = np.concatenate([p[2] for p in parts])
        result.skipped += append_points(conn, run_id, split, key, steps_a, vals_a, times_a)
    result.records = len(logs)
    if not logs:
        return result
    max_steps = next(
        (r["max_steps"] for r in reversed(logs) if type(r.get("max_steps")) is int and r["max_steps"] > 0), None
    )
    last_time = next((t for t in map(_num, (r.get("time") for r in reversed(logs))) if t is not None), None)
    conn.execute(
        "UPDATE runs SET n_records = n_records + ?, last_step = MAX(COALESCE(last_step, -1), ?), "
        "max_steps = COALESCE(?, max_steps), last_time = COALESCE(?, last_time), "
        "status = CASE WHEN status = ? THEN ? ELSE status END WHERE id = ?",
        (len(logs), last_step, max_steps, last_time, RunStatus.QUEUED.value, RunStatus.RUNNING.value, run_id),
    )
    return result


def _times(recs: list[dict[str, Any]]) -> np.ndarray:
    """Each record's wall time as float64, NaN where it has none."""
    raw = [r.get("time") for r in recs]
    if set(map(type, raw)) <= _PLAIN:
        return np.array(raw, dtype=np.float64)
    return np.array([math.nan if (t := _num(x)) is None else t for x in raw], dtype=np.float64)


def _plain_block(recs: list[dict[str, Any]], width: int) -> np.ndarray | None:
    """The records' metric values as an (n, width) float64 matrix when every one is a plain int or float, else None.

    All records share one key order (they were grouped by it), so column j is key j.
    """
    if not set(map(type, chain.from_iterable(r["metrics"].values() for r in recs))) <= _PLAIN:
        return None
    try:
        flat = np.fromiter(
            chain.from_iterable(r["metrics"].values() for r in recs), dtype=np.float64, count=len(recs) * width
        )
    except OverflowError:  # an int beyond float range: the per-value path skips just that value
        return None
    return flat.reshape(len(recs), width)


def _column(col: tuple[Any, ...]) -> tuple[np.ndarray | None, np.ndarray]:
    """(None, values) for a column of plain numbers; else (mask of storable values, their encoded values)."""
    if set(map(type, col)) <= _PLAIN:
        try:
            return None, np.array(col, dtype=np.float64)
        except OverflowError:
            pass
    keep = np.zeros(len(col), dtype=bool)
    vals: list[float] = []
    for i, value in enumerate(col):
        try:
            encoded = encode(value)
        except OverflowError:  # an int beyond float range is not storable
            encoded = None
        if encoded is not None:
            keep[i] = True
            vals.append(encoded)
    return keep, np.array(vals, dtype=np.float64)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _apply_event(conn: sqlite3.Connection, run_id: str, rec: dict[str, Any]) -> None:
    event, t = rec["event"], _num(rec.get("time"))
    active = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)
    if event in ("starting", "started"):
        ms = rec.get("max_steps")
        conn.execute(
            "UPDATE runs SET status = ?, started_at = COALESCE(started_at, ?), "
            "max_steps = COALESCE(?, max_steps) WHERE id = ? AND status IN (?, ?)",
            (RunStatus.RUNNING.value, t, ms if isinstance(ms, int) and ms > 0 else None, run_id, *active),
        )
        return
    if event == "guard_stop":
        # The in-job health guard stopped training; the run then ends `completed`, with this reason as its error.
        conn.execute("UPDATE runs SET error = ? WHERE id = ?", (guard_stop_reason(rec), run_id))
        return
    terminal = {"finished": RunStatus.COMPLETED, "failed": RunStatus.FAILED, "canceled": RunStatus.CANCELED}.get(event)
    if terminal is None:
        return
    error = None
    if terminal is RunStatus.FAILED:
        error = f"{rec.get('error_type') or 'Error'}: {rec.get('message') or '(no message)'}"
    elif terminal is RunStatus.CANCELED:
        error = rec.get("reason") or None
    conn.execute(
        "UPDATE runs SET status = ?, error = COALESCE(?, error), ended_at = COALESCE(ended_at, ?) "
        "WHERE id = ? AND status IN (?, ?)",
        (terminal.value, error, t, run_id, *active),
    )


def guard_stop_reason(rec: dict[str, Any]) -> str:
    """The run error recorded for a `guard_stop` event: step, rule, message and where the checkpoint went."""
    text = f"stopped by the health guard at step {rec.get('step', '?')}: {rec.get('rule', '?')}"
    text += f": {rec['message']}" if rec.get("message") else "."
    if rec.get("checkpoint"):
        text += f" Checkpoint: {rec['checkpoint']}"
    return text


def ingest_file(store: Store, run_id: str, path: str | Path) -> IngestResult:
    """Read new complete lines of `path` from the run's stored offset and commit them with the new offset."""
    total = IngestResult()
    path = Path(path)
    # Nothing new (most monitor passes): decided from a stat and one read, without taking the write lock.
    offset = store.ingest_offset(run_id)
    try:
        if offset is None or path.stat().st_size <= offset:
            return total
    except FileNotFoundError:
        return total
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
                conn.execute(
                    "UPDATE runs SET ingest_offset = ?, n_skipped = n_skipped + 1 WHERE id = ?",
                    (offset + skipped, run_id),
                )
                total += IngestResult(skipped=1, bytes_read=skipped)
                continue
            body = chunk[: end + 1]
            with _gc_paused():
                items, bad = _parse_lines(body, offset)
                result = apply_records(conn, run_id, items)
                del items
            result.skipped += bad
            result.bytes_read = len(body)
            conn.execute(
                "UPDATE runs SET ingest_offset = ?, n_skipped = n_skipped + ? WHERE id = ?",
                (offset + len(body), result.skipped, run_id),
            )
        total += result
        if len(chunk) < CHUNK_BYTES:
            return total


def _parse_lines(body: bytes, offset: int) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """(records with their byte offsets, number of invalid lines) of complete lines read at `offset`.

    Every line is decoded in one pass and bare log records (nearly all lines) are checked in bulk; the rest (events,
    marker-prefixed or NaN-bearing lines, garbage) goes through parse_line one by one.
    """
    lines = body.split(b"\n")
    lines.pop()  # what follows the last newline: nothing
    starts = list(accumulate((len(line) + 1 for line in lines[:-1]), initial=offset))
    objs = [_loads_or_none(line) for line in lines]
    ok = [
        type(o) is dict
        and o.get("type") == "log"
        and type(o.get("step")) is int
        and o["step"] >= 0
        and type(o.get("metrics")) is dict
        for o in objs
    ]
    items: list[tuple[int, dict[str, Any]] | None] = list(zip(starts, objs, strict=True))
    bad = 0
    if not all(ok):
        for i in [i for i, good in enumerate(ok) if not good]:
            rec = parse_line(lines[i]) if lines[i].strip() else None
            bad += rec is None and bool(lines[i].strip())
            items[i] = (starts[i], rec) if rec is not None else None
        return [it for it in items if it is not None], bad
    return items, bad  # type: ignore[return-value]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a chunk's records are built: they are acyclic dicts and floats, and the
    collector would otherwise walk every object of the process many times over (~10-25% of bulk ingestion)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _loads_or_none(line: bytes) -> Any:
    try:
        return _loads(line)
    except ValueError:
        return None


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
