"""`import-run PATH --follow`: a source that is still being written (a trackio project, a TensorBoard directory, an
offline W&B run directory, a growing trainer_state.json or TRL JSONL log) followed as a live run.

The source is read again whenever its files change, with the importers' own readers (importers.detect), and the
records not yet written are appended to the run's metrics.jsonl and ingested, so the run is live in the dashboard
(Runs, Run detail, alerts) while it trains. A step is written once the source holds a later step of the same split
(a logger writes one step's values in several calls; the last step waits), and everything left when the source has
not changed for `idle_s`, followed by `finished`. The run is an external run (store/external.py) whose writer is
this process: if the follower dies, the dashboard ends the run as failed rather than live forever. After the end it
holds what `import-run PATH` would have imported.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_dashboard.spec.paths import user_path
from grpo_dashboard.store import external
from grpo_dashboard.store.db import Run, RunStatus, Store, data_dir
from grpo_dashboard.store.import_common import Row, Source
from grpo_dashboard.store.import_guard import ImportRunError
from grpo_dashboard.store.import_spec import spec_from_config
from grpo_dashboard.store.importers import IMPORTED, detect, import_run_main
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.store.series import SYSTEM_SPLIT

FOLLOWED = "followed"  # the tag of a followed run
log = logging.getLogger(__name__)


def signature(p: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when the source grows: each of its files' size and mtime (a database with its -wal)."""
    if p.is_dir():
        files = [f for f in p.rglob("*") if f.is_file()]
    else:
        # a database's -wal grows with it; its -shm changes when anyone reads it (this follower too)
        files = [f for f in p.parent.glob(p.name + "*") if f.is_file() and not f.name.endswith("-shm")]
    out = []
    for f in sorted(files):
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _read(p: Path, run_name: str | None) -> Source | None:
    try:
        source = detect(p, run_name)
    except ImportRunError:
        return None  # not there yet, or no metrics yet
    return source if source.records else None


def follow(
    path: str | Path,
    store: Store | None = None,
    name: str | None = None,
    tags: list[str] | None = None,
    run_name: str | None = None,
    *,
    owner: str | None = None,
    poll_s: float = 1.0,
    idle_s: float = 30.0,
    wait_s: float = 300.0,
    on_update: Callable[[Run], object] | None = None,
) -> Run:
    """Follow the source at `path` until it has not changed for `idle_s` (waiting up to `wait_s` for its first
    records); returns the ended run. ImportRunError when the source never yields records."""
    p = user_path(path)
    store = store or Store()
    deadline = time.monotonic() + wait_s
    source = _read(p, run_name)
    while source is None:
        if time.monotonic() > deadline:
            detect(p, run_name)  # raises the reader's own message
            raise ImportRunError(f"{p}: no metrics appeared within {wait_s:g} s. Nothing was written.")
        time.sleep(poll_s)
        source = _read(p, run_name)
    run = _create(store, source, name, tags, owner)
    run_dir = Path(run.run_dir)
    written: dict[tuple[str, int], set[str]] = {}
    last_sig, changed = signature(p), time.monotonic()
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as out:
        while True:
            final = time.monotonic() - changed > idle_s
            _append(out, source.records, written, final)
            ingest_file(store, run.id, run_dir / "metrics.jsonl")
            if on_update is not None:
                on_update(store.get_run(run.id))
            if final:
                break
            time.sleep(poll_s)
            sig = signature(p)
            if sig != last_sig:
                last_sig, changed = sig, time.monotonic()
                source = _read(p, run_name) or source
        _write(out, {"v": 1, "type": "event", "event": "finished", "time": time.time()})
    ingest_file(store, run.id, run_dir / "metrics.jsonl")
    return store.get_run(run.id)


def _append(out: Any, records: list[Row], written: dict[tuple[str, int], set[str]], final: bool) -> None:
    """Write what is new: whole steps below each split's latest (all of them when `final`), new keys of steps
    already written (a value once written is kept, as the store keeps a step's first value)."""
    latest: dict[str, int] = {}
    for split, step, _, _ in records:
        if split != SYSTEM_SPLIT:
            latest[split] = max(latest.get(split, step), step)
    for split, step, stamp, metrics in records:
        if not final and split != SYSTEM_SPLIT and step >= latest[split]:
            continue
        done = written.setdefault((split, step), set())
        new = {k: v for k, v in metrics.items() if k not in done}
        if not new:
            continue
        done.update(new)
        _write(out, {"v": 1, "type": "log", "split": split, "step": step, "time": stamp, "metrics": new})


def _write(out: Any, record: dict[str, Any]) -> None:
    out.write(json.dumps(record, default=str) + "\n")
    out.flush()


def _create(store: Store, source: Source, name: str | None, tags: list[str] | None, owner: str | None) -> Run:
    title = name or source.name
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "run"
    run_id = f"followed-{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    run_dir = (data_dir() / "runs" / run_id).resolve()
    run_dir.mkdir(parents=True)
    spec = spec_from_config(
        source.config,
        name=title,
        tags=[*(tags or []), IMPORTED, FOLLOWED, source.kind],
        description=f"followed from {source.path} ({source.kind})",
    )
    (run_dir / "run.yaml").write_text(spec.to_yaml(), encoding="utf-8")
    max_steps = source.config.get("max_steps")
    started = {
        "v": 1,
        "type": "event",
        "event": "started",
        "time": source.records[0][2] or time.time(),
        "config": source.config,
        **({"max_steps": max_steps} if isinstance(max_steps, int) and max_steps > 0 else {}),
    }
    (run_dir / "metrics.jsonl").write_text(json.dumps(started) + "\n", encoding="utf-8")
    marker = {
        "v": 1,
        "transport": "follow",
        "pid": os.getpid(),
        "started_ticks": external.process_ticks(os.getpid()),
        "host": socket.gethostname(),
        "created_at": time.time(),
        "source": str(source.path),
    }
    (run_dir / external.MARKER_FILE).write_text(json.dumps(marker), encoding="utf-8")
    store.insert_run(
        Run(
            id=run_id,
            name=title,
            spec_yaml=spec.to_yaml(),
            backend=external.EXTERNAL,
            status=RunStatus.QUEUED.value,
            created_at=time.time(),
            run_dir=str(run_dir),
            output_dir=str(source.path),
            owner=owner,
        )
    )
    return store.get_run(run_id)


def follow_in_background(
    path: str | Path,
    store: Store,
    *,
    owner: str | None = None,
    idle_s: float = 30.0,
    wait_s: float = 300.0,
    first_s: float = 15.0,
) -> Run | None:
    """The UI's followed import: `follow` in a daemon thread of this process (the run ends as failed if the
    dashboard stops before the source does). Returns the run once it exists (within `first_s`), None while the
    source has no records yet (it is made when they come, within `wait_s`); ImportRunError when the path is missing
    or its source cannot be read."""
    p = user_path(path)
    if not str(path).strip() or not p.exists():
        raise ImportRunError(
            f"path = {str(path)!r}: no such file or directory. Give the path of a trainer_state.json, TRL JSONL log, "
            "trackio project .db, TensorBoard directory or offline W&B run directory on this machine."
        )
    first: queue.Queue[Run | BaseException] = queue.Queue()
    told = threading.Event()

    def update(run: Run) -> None:
        if not told.is_set():
            told.set()
            first.put(run)

    def work() -> None:
        try:
            follow(p, Store(store.path), owner=owner, idle_s=idle_s, wait_s=wait_s, on_update=update)
        except BaseException as exc:  # told to the caller while it waits, logged after
            log.warning("following %s stopped: %s", p, exc)
            if not told.is_set():
                told.set()
                first.put(exc)

    threading.Thread(target=work, name=f"grpo-follow-{p.name}", daemon=True).start()
    try:
        got = first.get(timeout=first_s)
    except queue.Empty:
        return None
    if isinstance(got, BaseException):
        raise got
    return got


def main(argv: list[str]) -> int:
    """import-run PATH [...] [--follow [--idle S]]: import a run, or follow one still being written."""
    return import_run_main(argv, follower=follow)
