"""A trackio project (its local SQLite database) as records: one run of it, chosen by name or id.

transformers' TrackioCallback logs TRL's keys as `train/<key>` / `eval/<key>` with `train/global_step` and no
`step=`, so trackio's own step counts calls; the trainer's step is taken from `train/global_step` where a row has
it. A project can hold several runs of one name (a script run twice): each run has its own trackio `run_id`, and
`--run` takes either.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.store.import_common import Row, Source, flat, logged_step, merge_steps, split_of, trl_metrics
from grpo_dashboard.store.import_guard import Budget, ImportLimits, ImportRunError, open_sqlite, sqlite_problem
from grpo_dashboard.store.series import SYSTEM_SPLIT

TRACKIO_SCHEMAS = (1, 2)  # `PRAGMA user_version` of trackio project databases this importer reads
TRACKIO_TABLES = ("metrics", "configs", "system_metrics")
MAX_RUNS = 1000


@dataclass(frozen=True)
class TrackioRun:
    """One run of a trackio project: its id (trackio's `run_id`, or the name in projects without one)."""

    run_id: str
    name: str
    rows: int
    first: str  # the first row's timestamp


def read(p: Path, run: str | None, budget: Budget, immutable: bool = False) -> Source:
    """The run `run` (a name: its latest run of that name; or a trackio run id) of the project at `p`; the latest
    run by default."""
    with _connection(p, budget.label, budget.limits, immutable) as conn:
        try:
            return _read(conn, p, run, budget)
        except sqlite3.Error as exc:
            raise sqlite_problem(exc, budget.label, budget.limits) from None


def list_runs(p: Path, label: str, limits: ImportLimits, immutable: bool = False) -> list[TrackioRun]:
    """Every run of the trackio project at `p`, oldest first."""
    with _connection(p, label, limits, immutable) as conn:
        try:
            _check(conn, label)
            return _runs(conn)
        except sqlite3.Error as exc:
            raise sqlite_problem(exc, label, limits) from None


class _connection:
    def __init__(self, p: Path, label: str, limits: ImportLimits, immutable: bool) -> None:
        try:
            self.conn = open_sqlite(p, label, limits, immutable)
        except sqlite3.Error as exc:
            raise sqlite_problem(exc, label, limits) from None

    def __enter__(self) -> sqlite3.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def _check(conn: sqlite3.Connection, label: str) -> set[str]:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    kinds = dict(conn.execute("SELECT name, type FROM sqlite_master WHERE name IN (?, ?, ?)", TRACKIO_TABLES))
    tables = {name for name, kind in kinds.items() if kind == "table"}
    views = sorted(set(kinds) - tables)
    if views:  # trackio writes tables; a view's query (a recursive CTE...) would be run by reading it
        raise ImportRunError(
            f"{label}: {', '.join(f'`{v}`' for v in views)} is a {kinds[views[0]]}, not a table; "
            "a trackio project's metrics, configs and system_metrics are tables. Give the .db "
            "trackio wrote. Nothing was written."
        )
    if "metrics" not in tables or version not in TRACKIO_SCHEMAS:
        raise ImportRunError(
            f"{label} is a trackio database of schema version {version} (tables: "
            f"{sorted(tables)}); this importer reads trackio schema versions {TRACKIO_SCHEMAS}. Open "
            "it once with a trackio release that migrates it (trackio>=0.43), or export the run's "
            "metrics to CSV and import that. Nothing was written."
        )
    return tables


def _has_run_id(conn: sqlite3.Connection, table: str) -> bool:
    return any(col[1] == "run_id" for col in conn.execute(f"PRAGMA table_info({table})"))


def _runs(conn: sqlite3.Connection) -> list[TrackioRun]:
    ident = "run_id" if _has_run_id(conn, "metrics") else "run_name"
    query = (
        f"SELECT {ident}, MAX(run_name), COUNT(*), MIN(timestamp) FROM metrics GROUP BY {ident} "
        f"ORDER BY MIN(id) LIMIT {MAX_RUNS + 1}"
    )
    return [TrackioRun(str(i), str(n), int(c), str(t)) for i, n, c, t in conn.execute(query)]


def _pick(runs: list[TrackioRun], run: str | None, label: str) -> TrackioRun:
    if not runs:
        raise ImportRunError(f"{label}: the trackio project has no logged metrics.")
    if run is None:
        return runs[-1]
    by_id = [r for r in runs if r.run_id == run]
    by_name = [r for r in runs if r.name == run]
    if by_id or by_name:
        return (by_id or by_name)[-1]
    listed = ", ".join(f"{r.name} ({r.run_id})" for r in runs[:20])
    raise ImportRunError(
        f"{label} has no run named or with the id {run!r}; its runs are: {listed}. Give one of them (`--run` on "
        "the command line, where `import-run PATH --list-runs` lists them; *trackio run* in the app)."
    )


def _read(conn: sqlite3.Connection, p: Path, run: str | None, budget: Budget) -> Source:
    label = budget.label
    tables = _check(conn, label)
    chosen = _pick(_runs(conn), run, label)
    rows: list[Row] = []
    ident = "run_id" if _has_run_id(conn, "metrics") else "run_name"
    for step, stamp, blob in conn.execute(
        f"SELECT step, timestamp, metrics FROM metrics WHERE {ident} = ? ORDER BY id",
        (chosen.run_id,),
    ):
        raw = _json(blob)
        metrics = trl_metrics(raw)
        if not metrics:
            continue
        budget.add(metrics)
        rows.append((split_of(metrics), _int(logged_step(raw, step), label), _stamp(stamp), metrics))
    rows = merge_steps(rows)
    if "system_metrics" in tables:
        rows.extend(_system(conn, chosen, budget))
    config: dict[str, Any] = {}
    if "configs" in tables:
        cident = "run_id" if _has_run_id(conn, "configs") else "run_name"
        for (blob,) in conn.execute(
            f"SELECT config FROM configs WHERE {cident} = ? ORDER BY id DESC LIMIT 1",
            (chosen.run_id,),
        ):
            raw = _json(blob)
            config = {k: v for k, v in raw.items() if not k.startswith("_") and isinstance(v, (int, float, str, bool))}
    return Source("trackio", p, rows, config, f"{Path(label).stem}/{chosen.name}")


def _int(value: Any, label: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ImportRunError(f"{label} has a step {value!r} that is not a number. Nothing was written.") from None


_GIB_AS_GB = 1024**3 / 1e9
# trackio's system metric names (trackio/gpu.py, cpu.py) -> ours (jobs/grpo_job_setup.SystemSampler) and a factor.
_TRACKIO_SYSTEM = {
    "utilization": ("utilization", 1.0),
    "allocated_memory": ("memory_used_gb", _GIB_AS_GB),
    "total_memory": ("memory_total_gb", _GIB_AS_GB),
    "memory_usage": ("memory_pct", 100.0),
}
_TRACKIO_HOST = {
    "cpu/utilization": ("system/cpu/utilization", 1.0),
    "memory/used": ("system/memory/used_gb", _GIB_AS_GB),
    "memory/total": ("system/memory/total_gb", _GIB_AS_GB),
    "memory/percent": ("system/memory/pct", 1.0),
}


def _system(conn: sqlite3.Connection, run: TrackioRun, budget: Budget) -> list[Row]:
    """The run's trackio system metrics (`trackio.log_system`, its GPU/CPU monitor) as `system` records stepped by
    wall time in ms, as our jobs log them; names trackio and our System panel share are renamed, the rest kept
    under `system/`."""
    rows: list[Row] = []
    ident = "run_id" if _has_run_id(conn, "system_metrics") else "run_name"
    for stamp, blob in conn.execute(
        f"SELECT timestamp, metrics FROM system_metrics WHERE {ident} = ? ORDER BY timestamp, id",
        (run.run_id if ident == "run_id" else run.name,),
    ):
        t = _stamp(stamp)
        if t is None:
            continue
        metrics: dict[str, Any] = {}
        for key, value in flat(_json(blob)).items():
            gpu = re.fullmatch(r"gpu/(\d+)/(\w+)", key)
            if gpu:
                ours, factor = _TRACKIO_SYSTEM.get(gpu.group(2), (gpu.group(2), 1.0))
                ours = f"system/gpu{gpu.group(1)}/{ours}"
            else:
                ours, factor = _TRACKIO_HOST.get(key, (f"system/{key}", 1.0))
            metrics[ours] = None if value is None else value * factor
        budget.add(metrics)
        if metrics:
            rows.append((SYSTEM_SPLIT, int(t * 1000), t, metrics))
    return rows


def _json(blob: str | bytes) -> dict[str, Any]:
    """A JSON object column of trackio's database (text, or bytes in older projects); {} for anything else."""
    try:
        value = json.loads(blob.decode("utf-8") if isinstance(blob, bytes) else blob)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _stamp(text: Any) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None
