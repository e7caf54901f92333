"""Runs made elsewhere, into the store as read-only `imported` runs: a trainer_state.json or checkpoint/output
directory, a TRL JSONL log, a run's console output (TRL's printed log dicts or verl's step lines), a trackio
project (its local SQLite database), a TensorBoard event directory, or a W&B run's exported history (CSV or JSONL
with `_step`).

Each source is converted to the job line protocol (metrics.jsonl in the run's directory) and ingested like a live
run, so Runs, Compare, the doctor and export-metrics treat it as any other run. The source is only read; a source
that cannot be read (another trackio schema, no metrics) raises ImportError_ naming the path and what to do, and
nothing is written.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.store import import_trackio, import_wandb
from grpo_dashboard.store.db import Run, RunStatus, Store, data_dir
from grpo_dashboard.store.import_common import Row, Source, split_of, trl_key
from grpo_dashboard.store.import_guard import LIMITS, Budget, ImportLimits, ImportRunError, check_size, private_copy
from grpo_dashboard.store.import_spec import spec_from_config
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.store.series import SYSTEM_SPLIT

IMPORTED = "imported"  # the backend kind of an imported run: nothing runs it, nothing refreshes it
TRACKIO_SCHEMAS = import_trackio.TRACKIO_SCHEMAS


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
            "a TRL JSONL log, a console log (.log/.out/.txt), a trackio project .db, a TensorBoard log directory or a "
            "W&B history export (.csv/.jsonl)."
        )
    budget = Budget(label, limits)
    if p.is_file():
        check_size(p, label, limits)
    if p.is_file() and p.suffix == ".db":
        return import_trackio.read(p, run_name, budget, immutable)
    if import_wandb.is_offline_run(p):
        return import_wandb.read_offline(p, budget)
    if p.is_dir() and any(p.rglob("events.out.tfevents.*")):
        return _tensorboard(p, budget)
    if p.is_file() and p.name.startswith("events.out.tfevents."):
        return _tensorboard(p.parent, budget)
    if p.is_file() and p.suffix == ".csv":
        return import_wandb.read_csv(p, budget)
    if p.is_file() and p.suffix == ".jsonl" and _first_has(p, "_step"):
        return import_wandb.read_jsonl(p, budget)
    return _trl_log(p, budget)


def _trl_log(p: Path, budget: Budget) -> Source:
    from grpo_dashboard.health.loaders import load_log_records, resolve_log_path

    try:
        file, log_kind = resolve_log_path(p)
        check_size(file, budget.label, budget.limits)
        records, hints = load_log_records(p)
    except ValueError as exc:
        raise ImportRunError(f"{budget.label} cannot be imported: {_named(str(exc), p, budget.label)}.") from None
    kind = "trainer_state" if file.name == "trainer_state.json" else "console" if log_kind == "console" else "jsonl"
    rows: list[Row] = []
    for r in records:
        metrics = {k: v for k, v in r.items() if k != "step"}
        budget.add(metrics)
        rows.append((split_of(r), int(r["step"]), None, metrics))
    config = {k: v for k, v in hints.items() if isinstance(v, (int, float, str, bool)) and k != "source"}
    name = file.parent.parent.name if file.parent.name.startswith("checkpoint-") else file.parent.name
    return Source(kind, p, rows, config, name or file.stem)


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
                by_step.setdefault(e.step, {})[trl_key(tag)] = float(e.value)
                times[e.step] = e.wall_time
        for tag in acc.Tags().get("tensors", []):
            for e in acc.Tensors(tag):
                if e.tensor_proto.dtype in (1, 2) and not e.tensor_proto.tensor_shape.dim:  # float/double scalars
                    from tensorboard.util import tensor_util

                    by_step.setdefault(e.step, {})[trl_key(tag)] = float(tensor_util.make_ndarray(e.tensor_proto))
                    times[e.step] = e.wall_time
    if not by_step:
        raise ImportRunError(f"{budget.label}: the TensorBoard event files hold no scalar metrics.")
    rows: list[Row] = []
    for step in sorted(by_step):
        train = {k: v for k, v in by_step[step].items() if not k.startswith("eval_")}
        evals = {k: v for k, v in by_step[step].items() if k.startswith("eval_")}
        for split, m in (("train", train), ("eval", evals)):
            if m:
                budget.add(m)
                rows.append((split, step, times.get(step), m))
    return Source("tensorboard", d, rows, {}, d.name)


def _first_has(p: Path, key: str) -> bool:
    try:
        with p.open(encoding="utf-8") as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and key in first


def _named(text: str, path: Path, label: str) -> str:
    """A reader's message with the path it read named as the user named it."""
    return text.replace(str(path.resolve()), label).replace(str(path), label)


def import_upload(
    upload: str | Path,
    store: Store,
    owner: str | None = None,
    root: str | Path | None = None,
    limits: ImportLimits = LIMITS,
    run_name: str | None = None,
) -> Run:
    """Import an uploaded file: copied into a private folder under a fixed name first (its own name is never part
    of a path or URI that is opened), read within `limits`, the copy deleted after. With `root` (on a Space:
    gradio's upload folder) the upload must be a file inside it. Messages name it by its own file name.
    `run_name`: for a trackio project, which run (name or id; None: the latest)."""
    with private_copy(upload, root, limits) as (copy, label, stem):
        return import_run(
            copy, store, name=stem, run_name=run_name, owner=owner, label=label, limits=limits, immutable=True
        )


def other_trackio_runs(
    path: str | Path, chosen: str | None, upload: bool = False, root: str | Path | None = None
) -> list[import_trackio.TrackioRun]:
    """The runs of the trackio project at `path` (an upload when `upload`, read through its private copy) other than
    the one an import of `chosen` takes; [] for anything that is not a trackio project."""
    if Path(path).suffix.lower() != ".db":
        return []
    try:
        if upload:
            with private_copy(path, root, LIMITS) as (copy, label, _):
                runs = import_trackio.list_runs(copy, label, LIMITS)
        else:
            runs = trackio_runs(path)
    except ImportRunError:
        return []
    if not runs:
        return []
    taken = runs[-1] if chosen is None else next((r for r in runs if chosen in (r.run_id, r.name)), None)
    return [r for r in runs if r is not taken]


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
    spec = spec_from_config(
        source.config,
        name=title,
        tags=[*(tags or []), IMPORTED, source.kind],
        description=f"imported from {shown} ({source.kind})",
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


def trackio_runs(path: str | Path, limits: ImportLimits = LIMITS) -> list[import_trackio.TrackioRun]:
    """Every run of the trackio project at `path` (a `.db`), oldest first: what `--run` chooses from."""
    p = user_path(path)
    if not (p.is_file() and p.suffix == ".db"):
        raise ImportRunError(f"{p} is not a trackio project database (.db); --list-runs and --all-runs read one.")
    check_size(p, str(p), limits)
    return import_trackio.list_runs(p, str(p), limits)


def import_run_main(argv: list[str], follower: Callable[..., Run] | None = None) -> int:
    """import-run PATH [--name N] [--tag T]... [--run NAME|ID | --all-runs | --list-runs]: import a run made
    elsewhere, read-only."""
    p = argparse.ArgumentParser(
        prog="import-run",
        description="Import a run made elsewhere (read-only): "
        "trainer_state.json, checkpoint/output dir, TRL JSONL, trackio project .db, "
        "TensorBoard dir, W&B offline run dir or history .csv/.jsonl.",
    )
    p.add_argument("path")
    p.add_argument("--name", help="Run name (default: from the source).")
    p.add_argument("--tag", action="append", help="Tag the run (repeatable).")
    p.add_argument("--run", help="trackio: which run of the project, by name or trackio run id (default: the latest).")
    p.add_argument("--list-runs", action="store_true", help="trackio: list the project's runs and import nothing.")
    p.add_argument("--all-runs", action="store_true", help="trackio: import every run of the project.")
    p.add_argument(
        "--follow", action="store_true", help="keep reading a source still being written (live until it stops)"
    )
    p.add_argument("--idle", type=float, default=30.0, help="--follow: seconds without change that end the run")
    args = p.parse_args(argv)
    try:
        if args.follow and follower is not None:
            print(f"following {args.path} (ends {args.idle:g} s after it stops changing)", flush=True)
            run = follower(args.path, name=args.name, tags=args.tag, run_name=args.run, idle_s=args.idle)
            print(f"followed {run.id} ({run.n_records} records, steps up to {run.last_step}) from {args.path}")
            return 0
        if args.list_runs or args.all_runs:
            runs = trackio_runs(args.path)
            if args.list_runs:
                for r in runs:
                    print(f"{r.run_id}\t{r.name}\t{r.rows} rows\tfrom {r.first}")
                return 0
            for r in runs:
                title = args.name and f"{args.name}-{r.name}"
                run = import_run(args.path, name=title, tags=args.tag, run_name=r.run_id)
                print(f"imported {run.id} ({run.n_records} records, steps up to {run.last_step}) from {r.run_id}")
            return 0
        run = import_run(args.path, name=args.name, tags=args.tag, run_name=args.run)
    except ImportRunError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"imported {run.id} ({run.n_records} records, steps up to {run.last_step}) from {args.path}")
    return 0
