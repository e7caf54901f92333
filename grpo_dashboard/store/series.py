"""Columnar metric storage: each (run, split, key) series is a sequence of chunks of packed numpy arrays.

A chunk row holds up to CHUNK_POINTS points as three BLOBs (int64 steps, float64 values, float64 wall times).
Values keep their nature: finite and ±Inf as themselves, NaN as the canonical NaN, and a logged `None` as a NaN with
a reserved payload (NONE_BITS), so one float64 array carries all four. Steps are unique and ascending across a
series' chunks; appends go to the last chunk, and the rare out-of-order point is merged into the chunk covering it.
A chunk whose steps are evenly spaced (the usual `logging_steps` cadence) stores them as 16 bytes (first, stride);
any other steps blob is the raw int64 array, which is exactly 8 bytes per point, so the two never look alike.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

CHUNK_POINTS = 1024
# System samples (CPU, memory, GPUs): stepped by their wall time in ms, not by training step, so they are left out of
# everything that reads training steps (the doctor, records, the run's last step, a resume's truncation).
SYSTEM_SPLIT = "system"
NONE_BITS = np.uint64(0x7FF8_DEAD_0000_0001)
_NONE_FLOAT = np.array([NONE_BITS], dtype=np.uint64).view(np.float64)[0]

# The tables (series: one row per series with its latest value; chunks) are made by `migrations.py`.
KIND_VALUE, KIND_NONE, KIND_NAN = 0, 1, 2


@dataclass(eq=False)
class SeriesArrays:
    """One metric series as arrays, the one container of the store's reads and the charts.

    steps (int64, ascending), values (float64; None and NaN both NaN here), an is_none mask and wall times. A series
    reduced for display (`views.display`) also has `smooth` (the EMA of the full series at these points), `band` (a
    companion series' EMA at these points, NaN where it has none: a reward's std) and `total`, the number of points of
    the full series these were kept from.
    """

    steps: np.ndarray
    values: np.ndarray
    is_none: np.ndarray
    times: np.ndarray
    smooth: np.ndarray | None = None
    band: np.ndarray | None = None
    total: int | None = None

    def __len__(self) -> int:
        return len(self.steps)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, float | None, float | None]]) -> SeriesArrays:
        """A series from (step, value, time) rows in any order (None and NaN become NaN), sorted by step."""
        data = list(rows)
        steps = np.array([r[0] for r in data], dtype=np.int64)
        is_none = np.array([r[1] is None for r in data], dtype=bool)
        values = np.array([math.nan if r[1] is None else r[1] for r in data], dtype=np.float64)
        times = np.array([math.nan if r[2] is None else r[2] for r in data], dtype=np.float64)
        order = np.argsort(steps, kind="stable")
        return cls(steps[order], values[order], is_none[order], times[order])


def encode(value: Any) -> float | None:
    """A logged value as the float stored for it; None (the Python object) if it is not a number at all."""
    if value is None:
        return float(_NONE_FLOAT)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        f = float(value)
        return math.nan if math.isnan(f) else f
    return None


def decode_scalar(value: float | None, kind: int) -> float | None:
    """The Python value for a stored scalar."""
    if kind == KIND_NONE:
        return None
    if kind == KIND_NAN:
        return math.nan
    return value


def _scalar_kind(v: float) -> int:
    if not math.isnan(v):
        return KIND_VALUE
    return KIND_NONE if np.float64(v).view(np.uint64) == NONE_BITS else KIND_NAN


def encode_steps(steps: np.ndarray) -> bytes:
    """A chunk's steps blob: (first, stride) for three or more evenly spaced steps, else the raw int64 array."""
    if len(steps) >= 3:
        stride = int(steps[1] - steps[0])
        if (
            stride > 0
            and int(steps[-1]) == int(steps[0]) + stride * (len(steps) - 1)
            and bool(np.all(np.diff(steps) == stride))
        ):
            return np.array([steps[0], stride], dtype=np.int64).tobytes()
    return np.ascontiguousarray(steps, dtype=np.int64).tobytes()


def decode_steps(blob: bytes, n: int) -> np.ndarray:
    """The int64 steps of a chunk of `n` points from its blob (see `encode_steps`)."""
    if len(blob) == 8 * n:
        return np.frombuffer(blob, dtype=np.int64)
    first, stride = np.frombuffer(blob, dtype=np.int64)
    return first + stride * np.arange(n, dtype=np.int64)


def append_points(
    conn: sqlite3.Connection, run_id: str, split: str, key: str, steps: Any, vals: Any, times: Any
) -> int:
    """Add points (any order, possibly repeated) to a series; returns how many conflicted with a stored value.

    A repeated step keeps its first value; a repeat with the same value (bit for bit) is not a conflict.
    """
    if len(steps) == 0:
        return 0
    s = np.asarray(steps, dtype=np.int64)
    v = np.asarray(vals, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    conflicts = 0
    if len(s) > 1 and not bool(np.all(s[1:] > s[:-1])):
        order = np.argsort(s, kind="stable")
        s, v, t = s[order], v[order], t[order]
        dup = np.concatenate(([False], s[1:] == s[:-1]))
        if dup.any():
            first_idx = np.searchsorted(s, s[dup])
            conflicts += int(np.sum(v[dup].view(np.uint64) != v[first_idx].view(np.uint64)))
            s, v, t = s[~dup], v[~dup], t[~dup]
    head = conn.execute(
        "SELECT n, last_step FROM series WHERE run_id = ? AND split = ? AND key = ?", (run_id, split, key)
    ).fetchone()
    n_old, last_step = (head[0], head[1]) if head else (0, None)
    merged = False
    if last_step is not None and s[0] <= last_step:
        old = s <= last_step
        conflicts += _merge_old(conn, run_id, split, key, s[old], v[old], t[old])
        s, v, t = s[~old], v[~old], t[~old]
        merged = True
    if len(s):
        _append_new(conn, run_id, split, key, s, v, t)
    if merged:
        _update_head(conn, run_id, split, key)
    else:  # a pure append: the new head is known without reading anything back
        last = float(v[-1])
        kind = _scalar_kind(last)
        conn.execute(
            "INSERT OR REPLACE INTO series (run_id, split, key, n, last_step, last_value, last_kind) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, split, key, n_old + len(s), int(s[-1]), last if kind == KIND_VALUE else None, kind),
        )
    return conflicts


def _append_new(
    conn: sqlite3.Connection, run_id: str, split: str, key: str, s: np.ndarray, v: np.ndarray, t: np.ndarray
) -> None:
    row = conn.execute(
        "SELECT chunk, n FROM chunks WHERE run_id = ? AND split = ? AND key = ? ORDER BY chunk DESC LIMIT 1",
        (run_id, split, key),
    ).fetchone()
    chunk_no = 0
    if row is not None:
        chunk_no = row[0]
        if row[1] < CHUNK_POINTS:
            old = conn.execute(
                "SELECT steps, vals, times FROM chunks WHERE run_id = ? AND split = ? AND key = ? AND chunk = ?",
                (run_id, split, key, chunk_no),
            ).fetchone()
            s = np.concatenate((decode_steps(old[0], row[1]), s))
            v = np.concatenate((np.frombuffer(old[1], dtype=np.float64), v))
            t = np.concatenate((np.frombuffer(old[2], dtype=np.float64), t))
        else:
            chunk_no += 1
    rows = []
    for start in range(0, len(s), CHUNK_POINTS):
        cs, cv, ct = s[start : start + CHUNK_POINTS], v[start : start + CHUNK_POINTS], t[start : start + CHUNK_POINTS]
        rows.append(
            (
                run_id,
                split,
                key,
                chunk_no,
                int(cs[0]),
                int(cs[-1]),
                len(cs),
                encode_steps(cs),
                cv.tobytes(),
                ct.tobytes(),
            )
        )
        chunk_no += 1
    conn.executemany(
        "INSERT OR REPLACE INTO chunks (run_id, split, key, chunk, first_step, last_step, n, steps, "
        "vals, times) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def _merge_old(
    conn: sqlite3.Connection, run_id: str, split: str, key: str, s: np.ndarray, v: np.ndarray, t: np.ndarray
) -> int:
    """Points at or before the series' last step: duplicates are dropped, gaps are filled in step order."""
    conflicts = 0
    for step, value, tm in zip(s.tolist(), v.tolist(), t.tolist(), strict=True):
        row = conn.execute(
            "SELECT chunk, n, steps, vals, times FROM chunks WHERE run_id = ? AND split = ? AND "
            "key = ? AND last_step >= ? ORDER BY chunk LIMIT 1",
            (run_id, split, key, step),
        ).fetchone()
        cs = decode_steps(row[2], row[1])
        cv = np.frombuffer(row[3], dtype=np.float64)
        ct = np.frombuffer(row[4], dtype=np.float64)
        i = int(np.searchsorted(cs, step))
        if i < len(cs) and cs[i] == step:
            if np.float64(value).view(np.uint64) != cv[i : i + 1].view(np.uint64)[0]:
                conflicts += 1
            continue
        cs, cv, ct = np.insert(cs, i, step), np.insert(cv, i, value), np.insert(ct, i, tm)
        conn.execute(
            "UPDATE chunks SET first_step = ?, n = ?, steps = ?, vals = ?, times = ? WHERE run_id = ? AND "
            "split = ? AND key = ? AND chunk = ?",
            (int(cs[0]), len(cs), encode_steps(cs), cv.tobytes(), ct.tobytes(), run_id, split, key, row[0]),
        )
    return conflicts


def _update_head(conn: sqlite3.Connection, run_id: str, split: str, key: str) -> None:
    row = conn.execute(
        "SELECT vals, last_step FROM chunks WHERE run_id = ? AND split = ? AND key = ? ORDER BY chunk DESC LIMIT 1",
        (run_id, split, key),
    ).fetchone()
    total = conn.execute(
        "SELECT SUM(n) FROM chunks WHERE run_id = ? AND split = ? AND key = ?", (run_id, split, key)
    ).fetchone()[0]
    last = float(np.frombuffer(row[0], dtype=np.float64)[-1])
    kind = _scalar_kind(last)
    conn.execute(
        "INSERT OR REPLACE INTO series (run_id, split, key, n, last_step, last_value, last_kind) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, split, key, total, row[1], last if kind == KIND_VALUE else None, kind),
    )


def truncate_after(conn: sqlite3.Connection, run_id: str, step: int) -> int:
    """Drop every point after `step` of a run's series (a resume from the checkpoint at `step` logs them again);
    returns how many were dropped. A series left without points is removed. System samples stay (they are stepped
    by wall time and are not logged again)."""
    dropped = 0
    for split, key in conn.execute(
        "SELECT split, key FROM series WHERE run_id = ? AND last_step > ? AND split != ?", (run_id, step, SYSTEM_SPLIT)
    ).fetchall():
        a = read_arrays(conn, run_id, key, split)
        keep = a.steps <= step
        dropped += int((~keep).sum())
        conn.execute("DELETE FROM chunks WHERE run_id = ? AND split = ? AND key = ?", (run_id, split, key))
        conn.execute("DELETE FROM series WHERE run_id = ? AND split = ? AND key = ?", (run_id, split, key))
        values = a.values.copy()
        values[a.is_none] = _NONE_FLOAT
        append_points(conn, run_id, split, key, a.steps[keep], values[keep], a.times[keep])
    return dropped


def heads(conn: sqlite3.Connection, run_id: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(points, last step) of every series of a run, keyed by (split, key): to compare with what was read."""
    return {
        (split, key): (n, last)
        for split, key, n, last in conn.execute(
            "SELECT split, key, n, last_step FROM series WHERE run_id = ?", (run_id,)
        )
    }


def read_arrays(
    conn: sqlite3.Connection, run_id: str, key: str, split: str = "train", since_step: int | None = None
) -> SeriesArrays:
    """One series as arrays (all chunks, or only the points after since_step)."""
    if since_step is not None:
        rows = [r[1:] for r in _chunks_after(conn, run_id, split, key, since_step)]
    else:
        rows = conn.execute(
            "SELECT n, steps, vals, times FROM chunks WHERE run_id = ? AND split = ? AND key = ? ORDER BY chunk",
            (run_id, split, key),
        ).fetchall()
    return _assemble(rows, since_step)


def _chunks_after(conn: sqlite3.Connection, run_id: str, split: str, key: str, after: int) -> list[Any]:
    """(last_step, n, steps, vals, times) of the chunks holding steps after `after`, in chunk order.

    Walks back from the newest chunk and stops at the first one that ends at or before `after`: a live refresh
    reads one or two chunks, never the whole series (last_step is not indexed, the chunk number is).
    """
    rows = []
    for row in conn.execute(
        "SELECT last_step, n, steps, vals, times FROM chunks WHERE run_id = ? AND split = ? AND "
        "key = ? ORDER BY chunk DESC",
        (run_id, split, key),
    ):
        if row[0] <= after:
            break
        rows.append(row)
    rows.reverse()
    return rows


def read_run(
    conn: sqlite3.Connection, run_id: str, since: dict[tuple[str, str], int | None] | None = None
) -> dict[tuple[str, str], SeriesArrays]:
    """Series of a run keyed by (split, key): all of them in one query, or with `since` only those it names, each
    with the points after the given step (None: all). A series with nothing to return is left out.
    """
    if since is None:
        rows = conn.execute(
            "SELECT split, key, last_step, n, steps, vals, times FROM chunks WHERE run_id = ? "
            "ORDER BY split, key, chunk",
            (run_id,),
        ).fetchall()
    else:
        rows = []
        for (split, key), after in since.items():
            if after is None:
                rows.extend(
                    conn.execute(
                        "SELECT split, key, last_step, n, steps, vals, times FROM chunks WHERE "
                        "run_id = ? AND split = ? AND key = ? ORDER BY chunk",
                        (run_id, split, key),
                    )
                )
            else:
                rows.extend((split, key, *r) for r in _chunks_after(conn, run_id, split, key, after))
    out: dict[tuple[str, str], SeriesArrays] = {}
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][0] != rows[start][0] or rows[i][1] != rows[start][1]:
            ident = (rows[start][0], rows[start][1])
            arrays = _assemble([r[3:] for r in rows[start:i]], since.get(ident) if since else None)
            if len(arrays):
                out[ident] = arrays
            start = i
    return out


def read_columns(conn: sqlite3.Connection, run_id: str) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(steps, values) of every training-step series of a run (system samples left out), keyed by (split, key), in
    one query: what the doctor reads. `read_run`'s steps and values bit for bit, without the wall times (a third of
    the bytes, never read here) or the None mask (None is still the NaN with the NONE_BITS payload).

    Series whose chunks carry the same steps (the usual case: every key of every record) share one read-only steps
    array; each values array is the series' own and writable.
    """
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: sqlite3.Row's indexing is most of the per-chunk cost here
    rows = cursor.execute(
        "SELECT split, key, n, steps, vals FROM chunks WHERE run_id = ? AND split != ? ORDER BY split, key, chunk",
        (run_id, SYSTEM_SPLIT),
    ).fetchall()
    out: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    shared: dict[tuple[tuple[int, ...], bytes], np.ndarray] = {}
    start, total = 0, len(rows)
    while start < total:
        split, key = rows[start][0], rows[start][1]
        end = start + 1
        while end < total and rows[end][1] == key and rows[end][0] == split:
            end += 1
        group = rows[start:end]
        ident = (tuple(r[2] for r in group), b"".join([r[3] for r in group]))
        steps = shared.get(ident)
        if steps is None:
            steps = np.concatenate([decode_steps(r[3], r[2]) for r in group])
            steps.flags.writeable = False
            shared[ident] = steps
        values = np.frombuffer(bytearray().join([r[4] for r in group]), dtype=np.float64)
        if len(values):
            out[(split, key)] = (steps, values)
        start = end
    return out


def _assemble(rows: list[Any], since_step: int | None) -> SeriesArrays:
    """Arrays from chunk rows (n, steps, vals, times) in chunk order, keeping only steps after since_step."""
    if not rows:
        empty = np.empty(0)
        return SeriesArrays(empty.astype(np.int64), empty, empty.astype(bool), empty)
    # concatenate copies even a single chunk: callers get writable arrays that do not pin the row buffers
    steps = np.concatenate([decode_steps(r[1], r[0]) for r in rows])
    vals = np.concatenate([np.frombuffer(r[2], dtype=np.float64) for r in rows])
    times = np.concatenate([np.frombuffer(r[3], dtype=np.float64) for r in rows])
    if since_step is not None and len(steps) and steps[0] <= since_step:
        keep = steps > since_step
        steps, vals, times = steps[keep], vals[keep], times[keep]
    return SeriesArrays(steps, vals, vals.view(np.uint64) == NONE_BITS, times)
