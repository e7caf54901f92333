"""External runs: training started elsewhere (a user's own TRL script with `grpo_dashboard.integrations
.DashboardCallback`) that records into the data directory as a launched run does.

The callback writes only files in `runs/<id>/` (it may run on another node of a shared filesystem, where SQLite's
locks are not to be trusted): `run.yaml` (the spec built from the trainer's resolved config), `metrics.jsonl` (the
job line protocol), `samples.jsonl`, then `external.json` (who writes it: pid, host, transport), last and
atomically, so a run directory is complete when it is seen. The dashboard registers each new one (`discover`) and
follows it (`refresh`): ingested like a launched run, ended by its own `finished`/`failed`/`canceled` event, or
failed when its process is gone (same host) or, on another host, when neither a record nor a heartbeat came for a
while: the writer touches `alive` every `HEARTBEAT_S` while its process lives (the callback's thread; for the HTTP
transport, every batch, an empty one when there is nothing new), so a run that is slow to log (a long evaluation, a
CPU run without system samples) is not taken for a lost one, and a lost one is seen within `STALE_HEARTBEAT_S`.
Writers without a heartbeat are given `STALE_S`.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from grpo_dashboard.store.db import ACTIVE, Run, RunStatus, Store, data_dir
from grpo_dashboard.store.ingest import ingest_file

EXTERNAL = "external"  # the backend kind of a run recorded by the callback in a user's own script
MARKER_FILE = "external.json"
STALE_S = 1800.0  # a run on another host that wrote nothing for this long is taken as lost
HEARTBEAT_FILE = "alive"
HEARTBEAT_S = 60.0  # how often a living writer touches HEARTBEAT_FILE
STALE_HEARTBEAT_S = 5 * HEARTBEAT_S  # a writer with a heartbeat is lost after missing this many seconds of it
MAX_NEW_PER_PASS = 50


def run_dirs(root: Path | None = None) -> list[Path]:
    """The run directories under the data directory that an external writer marked as complete."""
    runs = (root or data_dir()) / "runs"
    try:
        return sorted(p.parent for p in runs.glob(f"*/{MARKER_FILE}"))
    except OSError:
        return []


def read_marker(run_dir: Path) -> dict[str, Any] | None:
    """The run's external.json, or None when it is missing or not a JSON object."""
    try:
        data = json.loads((run_dir / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def discover(store: Store) -> list[Run]:
    """Register every complete external run directory the store does not know yet; returns the new runs."""
    new: list[Run] = []
    known = {r.id for r in store.list_runs()}
    for run_dir in run_dirs():
        if run_dir.name in known or len(new) >= MAX_NEW_PER_PASS:
            continue
        marker = read_marker(run_dir)
        if marker is None or marker.get("transport") != "directory":
            continue
        try:
            spec_yaml = (run_dir / "run.yaml").read_text(encoding="utf-8")
        except OSError:
            continue
        from grpo_dashboard.spec.run_spec import RunSpec

        try:
            spec = RunSpec.from_yaml(spec_yaml)
        except ValueError:
            continue
        run = Run(
            id=run_dir.name,
            name=spec.name or run_dir.name,
            spec_yaml=spec_yaml,
            backend=EXTERNAL,
            status=RunStatus.QUEUED.value,
            created_at=float(marker.get("created_at") or time.time()),
            run_dir=str(run_dir.resolve()),
            output_dir=str(marker.get("output_dir") or "") or None,
            owner=None,
        )
        try:
            store.insert_run(run)
        except sqlite3.IntegrityError:  # another dashboard on the same data directory registered it first
            continue
        new.append(store.get_run(run.id))
    return new


def refresh(store: Store, run: Run) -> Run:
    """Ingest the run's new records; an active run whose writer is gone without an end event becomes failed."""
    run_dir = Path(run.run_dir)
    metrics = run_dir / "metrics.jsonl"
    ingest_file(store, run.id, metrics)
    run = store.get_run(run.id)
    if run.status not in ACTIVE:
        return run
    marker = read_marker(run_dir) or {}
    reason = _gone(marker, metrics)
    if reason:
        ingest_file(store, run.id, metrics)  # what it wrote just before it went
        with store.transaction() as conn:
            conn.execute(
                "UPDATE runs SET status = ?, error = ?, ended_at = COALESCE(ended_at, ?) WHERE id = ? AND status IN "
                "(?, ?)",
                (RunStatus.FAILED.value, reason, time.time(), run.id, *ACTIVE),
            )
        run = store.get_run(run.id)
    return run


def _gone(marker: dict[str, Any], metrics: Path) -> str | None:
    pid, host = marker.get("pid"), marker.get("host")
    if isinstance(pid, int) and host == socket.gethostname():
        if _alive(pid, marker.get("started_ticks")):
            return None
        return f"the training process (pid {pid} on {host}) ended without a finished event: see its own output"
    beat = _mtime(metrics.parent / HEARTBEAT_FILE)
    last = max(_mtime(metrics) or 0.0, beat or 0.0)
    if not last:
        return None
    idle = time.time() - last
    if beat is not None and idle > STALE_HEARTBEAT_S:
        return f"no record and no heartbeat for {idle / 60:.0f} minutes: the script on {host or 'its host'} is gone"
    if beat is None and idle > STALE_S:
        return f"nothing was recorded for {idle / 60:.0f} minutes (the script on {host or 'its host'} is gone?)"
    return None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def beat(run_dir: Path) -> None:
    """Touch the run's heartbeat file: its writer is alive."""
    try:
        (run_dir / HEARTBEAT_FILE).touch()
    except OSError:
        pass  # a full or read-only disk: the records' own times still count


class Heartbeat:
    """A daemon thread that beats for `run_dir` every `interval_s` (default `HEARTBEAT_S`, or
    `$GRPO_DASHBOARD_HEARTBEAT_S`) until stopped."""

    def __init__(self, run_dir: Path, interval_s: float | None = None) -> None:
        env = os.environ.get("GRPO_DASHBOARD_HEARTBEAT_S")
        self.run_dir, self.interval_s = run_dir, interval_s or (float(env) if env else HEARTBEAT_S)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grpo-dashboard-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        """Beat now, then on the interval."""
        beat(self.run_dir)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating (the file stays: its age says when the writer went)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            beat(self.run_dir)


def _alive(pid: int, ticks: Any) -> bool:
    """The process is running and is the one that wrote the marker (not a later process given the same pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if ticks is None:
        return True
    return process_ticks(pid) in (None, ticks)


def process_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux `/proc/<pid>/stat`), None where unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
