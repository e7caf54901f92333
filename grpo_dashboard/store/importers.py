"""Runs made elsewhere, into the store as read-only `imported` runs: a trainer_state.json or checkpoint/output
directory, a TRL JSONL log, a trackio project (its local SQLite database), a TensorBoard event directory, or a W&B
run's exported history (CSV or JSONL with `_step`).

Each source is converted to the job line protocol (metrics.jsonl in the run's directory) and ingested like a live
run, so Runs, Compare, the doctor and export-metrics treat it as any other run. The source is only read; a source
that cannot be read (another trackio schema, no metrics) raises ImportError_ naming the path and what to do, and
nothing is written.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import secrets
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, RunStatus, Store, data_dir
from grpo_dashboard.store.import_guard import (
    LIMITS,
    Budget,
    ImportLimits,
    ImportRunError,
    check_size,
    open_sqlite,
    private_copy,
    sqlite_problem,
)
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.store.series import SYSTEM_SPLIT

IMPORTED = "imported"  # the backend kind of an imported run: nothing runs it, nothing refreshes it
TRACKIO_SCHEMAS = (1, 2)  # `PRAGMA user_version` of trackio project databases this importer reads


@dataclass
class Source:
    """What was found at a path: its kind and the records it holds, in step order."""

    kind: str
    path: Path
    records: list[tuple[str, int, float | None, dict[str, Any]]]  # (split, step, time, metrics)
    config: dict[str, Any]
    name: str


def detect(
    path: str | Path,
    run_name: str | None = None,
    *,
    label: str | None = None,
    limits: ImportLimits = LIMITS,
    immutable: bool = False,
) -> Source:
    """Read a run from `path` (any supported source) within `limits`; ImportRunError when it cannot.

    `label`: how messages name the source (an upload by its own name; default: the path). `immutable`: the file
    is the dashboard's private copy, which nothing writes (SQLite then takes no locks).
    """
    p = user_path(path)
    label = label or str(p)
    if not p.exists():
        raise ImportRunError(
            f"{label} does not exist. Give a trainer_state.json, a checkpoint or output directory, "
            "a TRL JSONL log, a trackio project .db, a TensorBoard log directory or a W&B history "
            "export (.csv/.jsonl)."
        )
    budget = Budget(label, limits)
    if p.is_file():
        check_size(p, label, limits)
    if p.is_file() and p.suffix == ".db":
        return _trackio(p, run_name, budget, immutable)
    if p.is_dir() and any(p.rglob("events.out.tfevents.*")):
        return _tensorboard(p, budget)
    if p.is_file() and p.name.startswith("events.out.tfevents."):
        return _tensorboard(p.parent, budget)
    if p.is_file() and p.suffix == ".csv":
        return _wandb_csv(p, budget)
    if p.is_file() and p.suffix == ".jsonl" and _first_has(p, "_step"):
        return _wandb_jsonl(p, budget)
    return _trl_log(p, budget)


def _split(metrics: dict[str, Any]) -> str:
    return "eval" if any(k.startswith("eval_") or k.startswith("eval/") for k in metrics) else "train"


def _trl_log(p: Path, budget: Budget) -> Source:
    from grpo_dashboard.health.loaders import load_log_records, resolve_log_path

    try:
        file, _ = resolve_log_path(p)
        check_size(file, budget.label, budget.limits)
        records, hints = load_log_records(p)
    except ValueError as exc:
        raise ImportRunError(f"{budget.label} cannot be imported: {_named(str(exc), p, budget.label)}.") from None
    kind = "trainer_state" if file.name == "trainer_state.json" else "jsonl"
    rows: list[tuple[str, int, float | None, dict[str, Any]]] = []
    for r in records:
        metrics = {k: v for k, v in r.items() if k != "step"}
        budget.add(metrics)
        rows.append((_split(r), int(r["step"]), None, metrics))
    config = {k: v for k, v in hints.items() if isinstance(v, (int, float, str, bool)) and k != "source"}
    name = file.parent.parent.name if file.parent.name.startswith("checkpoint-") else file.parent.name
    return Source(kind, p, rows, config, name or file.stem)


def _trackio(p: Path, run_name: str | None, budget: Budget, immutable: bool = False) -> Source:
    label = budget.label
    try:
        conn = open_sqlite(p, label, budget.limits, immutable)
    except sqlite3.Error as exc:
        raise sqlite_problem(exc, label, budget.limits) from None
    try:
        return _trackio_read(conn, p, run_name, budget)
    except sqlite3.Error as exc:
        raise sqlite_problem(exc, label, budget.limits) from None
    finally:
        conn.close()


TRACKIO_TABLES = ("metrics", "configs", "system_metrics")


def _trackio_read(conn: sqlite3.Connection, p: Path, run_name: str | None, budget: Budget) -> Source:
    label = budget.label
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
    runs = [r[0] for r in conn.execute("SELECT run_name FROM metrics GROUP BY run_name ORDER BY MIN(id) LIMIT 1001")]
    if not runs:
        raise ImportRunError(f"{label}: the trackio project has no logged metrics.")
    name = run_name or runs[-1]
    if name not in runs:
        raise ImportRunError(f"{label} has no run named {name!r}; its runs are {runs[:20]}. Pass one with --run.")
    rows = []
    for step, stamp, blob in conn.execute(
        "SELECT step, timestamp, metrics FROM metrics WHERE run_name = ? ORDER BY step, id", (name,)
    ):
        metrics = _flat(_json(blob))
        budget.add(metrics)
        rows.append((_split(metrics), _int(step, label), _stamp(stamp), metrics))
    if "system_metrics" in tables:
        rows.extend(_trackio_system(conn, name, budget))
    config: dict[str, Any] = {}
    if "configs" in tables:
        for (blob,) in conn.execute("SELECT config FROM configs WHERE run_name = ? ORDER BY id DESC LIMIT 1", (name,)):
            raw = _json(blob)
            config = {k: v for k, v in raw.items() if not k.startswith("_") and isinstance(v, (int, float, str, bool))}
    return Source("trackio", p, rows, config, f"{Path(label).stem}/{name}")


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


def _trackio_system(
    conn: sqlite3.Connection, name: str, budget: Budget
) -> list[tuple[str, int, float | None, dict[str, Any]]]:
    """The run's trackio system metrics (`trackio.log_system`, its GPU/CPU monitor) as `system` records stepped by
    wall time in ms, as our jobs log them; names trackio and our System panel share are renamed, the rest kept
    under `system/`."""
    rows: list[tuple[str, int, float | None, dict[str, Any]]] = []
    for stamp, blob in conn.execute(
        "SELECT timestamp, metrics FROM system_metrics WHERE run_name = ? ORDER BY timestamp, id", (name,)
    ):
        t = _stamp(stamp)
        if t is None:
            continue
        metrics: dict[str, Any] = {}
        for key, value in _flat(_json(blob)).items():
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


def _flat(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def _tensorboard(d: Path, budget: Budget) -> Source:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise ImportRunError(
            f"{budget.label} holds TensorBoard event files; reading them needs the `tensorboard` "
            "package: `pip install tensorboard`, then import again."
        ) from None
    by_step: dict[int, dict[str, Any]] = {}
    times: dict[int, float] = {}
    files = sorted(d.rglob("events.out.tfevents.*"))
    if sum(f.stat().st_size for f in files) > budget.limits.max_bytes:
        raise ImportRunError(
            f"{budget.label}: its event files are over the import limit of "
            f"{budget.limits.max_bytes:,} bytes. Import a smaller log. Nothing was written."
        )
    for events in files:
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for e in acc.Scalars(tag):
                by_step.setdefault(e.step, {})[_tb_key(tag)] = float(e.value)
                times[e.step] = e.wall_time
        for tag in acc.Tags().get("tensors", []):
            for e in acc.Tensors(tag):
                if e.tensor_proto.dtype in (1, 2) and not e.tensor_proto.tensor_shape.dim:  # float/double scalars
                    from tensorboard.util import tensor_util

                    by_step.setdefault(e.step, {})[_tb_key(tag)] = float(tensor_util.make_ndarray(e.tensor_proto))
                    times[e.step] = e.wall_time
    if not by_step:
        raise ImportRunError(f"{budget.label}: the TensorBoard event files hold no scalar metrics.")
    rows: list[tuple[str, int, float | None, dict[str, Any]]] = []
    for step in sorted(by_step):
        train = {k: v for k, v in by_step[step].items() if not k.startswith("eval_")}
        evals = {k: v for k, v in by_step[step].items() if k.startswith("eval_")}
        for split, m in (("train", train), ("eval", evals)):
            if m:
                budget.add(m)
                rows.append((split, step, times.get(step), m))
    return Source("tensorboard", d, rows, {}, d.name)


def _tb_key(tag: str) -> str:
    """transformers' TensorBoardCallback writes `train/<key>` and `eval/<key>`: back to TRL's log keys."""
    if tag.startswith("train/"):
        return tag[len("train/") :]
    if tag.startswith("eval/"):
        return "eval_" + tag[len("eval/") :]
    return tag


def _first_has(p: Path, key: str) -> bool:
    try:
        with p.open(encoding="utf-8") as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and key in first


def _wandb_rows(
    items: Iterator[dict[str, Any]], budget: Budget
) -> list[tuple[str, int, float | None, dict[str, Any]]]:
    rows = []
    for row in items:
        step = row.get("_step", row.get("train/global_step"))
        if step is None:
            continue
        metrics = {_wandb_key(k): v for k, v in row.items() if not k.startswith("_") and k != "train/global_step"}
        metrics = {k: v for k, v in _flat(metrics).items() if v is not None}
        budget.add(metrics)
        if metrics:
            stamp = row.get("_timestamp")
            when = float(stamp) if stamp not in (None, "") else None
            rows.append((_split(metrics), _int(_number(step), budget.label), when, metrics))
    return rows


def _wandb_key(key: str) -> str:
    return _tb_key(key)  # transformers' WandbCallback uses the same train/ and eval/ prefixes


def _wandb_csv(p: Path, budget: Budget) -> Source:
    def items() -> Iterator[dict[str, Any]]:
        with p.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            budget.columns(len(reader.fieldnames or []))
            for row in reader:
                yield {k: _number(v) for k, v in row.items() if k is not None}

    try:
        rows = _wandb_rows(items(), budget)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ImportRunError(f"{budget.label} is not a readable CSV ({exc}). Export the W&B history again.") from None
    if not rows:
        raise ImportRunError(
            f"{budget.label}: no rows with a `_step` column and numeric metrics; export the W&B "
            "run's history with `run.history().to_csv(...)` (it has `_step`)."
        )
    return Source("wandb", p, rows, {}, p.stem)


def _number(text: Any) -> Any:
    if text in (None, ""):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() and "." not in str(text) and "e" not in str(text).lower() else value


def _wandb_jsonl(p: Path, budget: Budget) -> Source:
    def items() -> Iterator[dict[str, Any]]:
        with p.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    if isinstance(row, dict):
                        yield row

    try:
        rows = _wandb_rows(items(), budget)
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ImportRunError):
            raise
        raise ImportRunError(f"{budget.label} is not a readable JSONL file ({exc}). Nothing was written.") from None
    return Source("wandb", p, rows, {}, p.stem)


def _named(text: str, path: Path, label: str) -> str:
    """A reader's message with the path it read named as the user named it."""
    return text.replace(str(path.resolve()), label).replace(str(path), label)


def import_upload(
    upload: str | Path,
    store: Store,
    owner: str | None = None,
    root: str | Path | None = None,
    limits: ImportLimits = LIMITS,
) -> Run:
    """Import an uploaded file: copied into a private folder under a fixed name first (its own name is never part
    of a path or URI that is opened), read within `limits`, the copy deleted after. With `root` (on a Space:
    gradio's upload folder) the upload must be a file inside it. Messages name it by its own file name."""
    with private_copy(upload, root, limits) as (copy, label, stem):
        return import_run(copy, store, name=stem, owner=owner, label=label, limits=limits, immutable=True)


def import_run(
    path: str | Path,
    store: Store | None = None,
    name: str | None = None,
    tags: list[str] | None = None,
    run_name: str | None = None,
    owner: str | None = None,
    *,
    label: str | None = None,
    limits: ImportLimits = LIMITS,
    immutable: bool = False,
) -> Run:
    """Import the run at `path` as a read-only run (ImportRunError, nothing written, when it cannot be read).

    `label`: how messages and the run's description name the source (an upload: its own name, and the run keeps
    no path to it); `limits`: the import's budget; `immutable`: a private copy nothing writes.
    """
    source = detect(path, run_name, label=label, limits=limits, immutable=immutable)
    shown = label or str(source.path)
    if not source.records:
        raise ImportRunError(f"{shown}: no metrics to import.")
    store = store or Store()
    title = name or source.name
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "run"
    run_id = f"imported-{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    run_dir = (data_dir() / "runs" / run_id).resolve()
    spec = RunSpec(
        name=title, tags=[*(tags or []), IMPORTED, source.kind], description=f"imported from {shown} ({source.kind})"
    )
    lines = [
        {
            "v": 1,
            "type": "event",
            "event": "started",
            "time": source.records[0][2] or time.time(),
            "config": source.config,
            "max_steps": max((r[1] for r in source.records if r[0] != SYSTEM_SPLIT), default=0),
        }
    ]
    for split, step, stamp, metrics in source.records:
        lines.append({"v": 1, "type": "log", "split": split, "step": step, "time": stamp, "metrics": metrics})
    lines.append({"v": 1, "type": "event", "event": "finished", "time": source.records[-1][2] or time.time()})
    run_dir.mkdir(parents=True)
    inserted = False
    try:
        with open(run_dir / "metrics.jsonl", "w", encoding="utf-8") as f:
            for rec in lines:
                f.write(json.dumps(rec, default=_nan_safe) + "\n")
        (run_dir / "run.yaml").write_text(spec.to_yaml(), encoding="utf-8")
        store.insert_run(
            Run(
                id=run_id,
                name=title,
                spec_yaml=spec.to_yaml(),
                backend=IMPORTED,
                status=RunStatus.QUEUED.value,
                created_at=time.time(),
                run_dir=str(run_dir),
                output_dir=None if label else str(source.path),
                owner=owner,
            )
        )
        inserted = True
        ingest_file(store, run_id, run_dir / "metrics.jsonl")
    except BaseException:
        # a refused or failed import leaves nothing behind: no half-ingested run, no run directory
        if inserted:
            store.delete_run_rows(run_id)
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return store.get_run(run_id)


def _nan_safe(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


def import_run_main(argv: list[str]) -> int:
    """import-run PATH [--name N] [--tag T]... [--run NAME]: import a run made elsewhere, read-only."""
    p = argparse.ArgumentParser(
        prog="import-run",
        description="Import a run made elsewhere (read-only): "
        "trainer_state.json, checkpoint/output dir, TRL JSONL, trackio project .db, "
        "TensorBoard dir, W&B history .csv/.jsonl.",
    )
    p.add_argument("path")
    p.add_argument("--name", help="Run name (default: from the source).")
    p.add_argument("--tag", action="append", help="Tag the run (repeatable).")
    p.add_argument("--run", help="trackio: which run of the project (default: the latest).")
    args = p.parse_args(argv)
    try:
        run = import_run(args.path, name=args.name, tags=args.tag, run_name=args.run)
    except ImportRunError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"imported {run.id} ({run.n_records} records, steps up to {run.last_step}) from {args.path}")
    return 0
