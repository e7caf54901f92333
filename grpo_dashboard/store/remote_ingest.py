"""The dashboard's side of the callback's HTTP transport: one POSTed batch of a run's lines, accepted exactly once.

A batch is `{"v": 1, "run": id, "stream": "metrics"|"samples", "offset": int, "lines": [str, ...], "spec": yaml?}`:
complete lines of the callback's spooled `metrics.jsonl` / `samples.jsonl` from byte `offset` of its file. The
dashboard keeps how many bytes of each stream it has (`received`); a batch that starts there is appended, one that
starts before it (a retry after a lost answer) is acknowledged without writing, one past it is refused with the
offset to resend from (409). The answer always carries `received`, so the callback resumes from there: every line
lands once, whatever was lost or retried, a crash of the dashboard while it appends included (see `_append`;
the one count a crash there can miss is that batch's rejected lines in the run's skipped records). The first batch
of a run carries its spec (run.yaml) and creates the run, owned by the token's user; a run of another user is
answered as a missing one (404).

A batch that is not this shape is refused whole with the reason (400) and nothing is written. A metrics line that
is not a protocol record is kept in `rejected.jsonl` with the reason and counted in the run's skipped records.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from grpo_dashboard.store import external
from grpo_dashboard.store.db import Run, RunNotFound, RunStatus, Store, data_dir
from grpo_dashboard.store.ingest import ingest_file, parse_line

MAX_BATCH_BYTES = 4 * 1024 * 1024  # one POST's body
MAX_LINES = 5000
MAX_LINE_BYTES = 1024 * 1024
MAX_SPEC_BYTES = 256 * 1024
MAX_RUNS_PER_USER = 200  # external runs one user may create (each costs disk)
STREAMS = {"metrics": "metrics.jsonl", "samples": "samples.jsonl"}
RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,80}$")
STATE_FILE = "received.json"
CANCEL_FILE = "cancel_requested"
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class BatchError(ValueError):
    """The batch is refused whole: `status` is the HTTP status, the message says why and what to do."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.extra = status, extra


def _lock(run_id: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(run_id, threading.Lock())


def parse_batch(body: bytes) -> dict[str, Any]:
    """The batch as a dict, checked field by field; BatchError(400) naming the first wrong field."""
    if len(body) > MAX_BATCH_BYTES:
        raise BatchError(413, f"the batch is {len(body):,} bytes, over {MAX_BATCH_BYTES:,}: send smaller batches.")
    try:
        batch = json.loads(body)
    except ValueError as exc:
        raise BatchError(400, f"the batch is not JSON ({exc}); send one JSON object per request.") from None
    if not isinstance(batch, dict) or batch.get("v") != 1:
        raise BatchError(400, 'the batch must be a JSON object with "v": 1 (this dashboard\'s ingest protocol).')
    run_id = batch.get("run")
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise BatchError(400, f"run = {run_id!r}: a run id is 3-81 lowercase letters, digits and '-'.")
    if batch.get("stream") not in STREAMS:
        raise BatchError(400, f"stream = {batch.get('stream')!r}: allowed are {sorted(STREAMS)}.")
    offset = batch.get("offset")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise BatchError(400, f"offset = {offset!r}: the byte offset of the first line, an integer >= 0.")
    lines = batch.get("lines")
    if not isinstance(lines, list) or len(lines) > MAX_LINES or not all(isinstance(x, str) for x in lines):
        raise BatchError(400, f"lines: a list of at most {MAX_LINES} strings (one JSON line each).")
    for i, line in enumerate(lines):
        if "\n" in line or len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
            raise BatchError(400, f"lines[{i}]: one line without a newline, at most {MAX_LINE_BYTES:,} bytes.")
    spec = batch.get("spec")
    if spec is not None and (not isinstance(spec, str) or len(spec) > MAX_SPEC_BYTES):
        raise BatchError(400, f"spec: the run's run.yaml text, at most {MAX_SPEC_BYTES:,} characters.")
    return batch


def accept(store: Store, owner: str | None, body: bytes) -> dict[str, Any]:
    """Accept one batch for `owner` (None: a local dashboard without users); the answer's JSON. BatchError when the
    batch is refused (400 malformed, 404 not the caller's run, 409 a gap, 413 too large, 429 too many runs)."""
    batch = parse_batch(body)
    run_id, stream = batch["run"], batch["stream"]
    with _lock(run_id):
        run = _run_for(store, owner, run_id, batch.get("spec"))
        run_dir = Path(run.run_dir)
        external.beat(run_dir)  # any batch of the run, an empty one too, says its script is alive
        state = _state(run_dir)
        received = state.get(stream, 0)
        data = "".join(line + "\n" for line in batch["lines"]).encode("utf-8", "surrogatepass")
        offset = batch["offset"]
        if offset > received:
            raise BatchError(409, f"offset {offset} is past the {received} bytes received: resend from there.",
                             received=received)  # fmt: skip
        rejected = 0
        if offset + len(data) > received:
            new = data[received - offset :]  # a retry that overlaps what was received: only the new tail is written
            rejected = _append(run_dir, state, stream, new, offset + len(data))
        if rejected:
            with store.transaction() as conn:
                conn.execute("UPDATE runs SET n_skipped = n_skipped + ? WHERE id = ?", (rejected, run_id))
        if stream == "metrics":
            ingest_file(store, run_id, run_dir / "metrics.jsonl")
        state = _state(run_dir)
        return {
            "run": run_id,
            "received": state.get(stream, 0),
            "rejected": rejected,
            "stop": (run_dir / CANCEL_FILE).exists(),
        }


def _append(run_dir: Path, state: dict[str, Any], stream: str, new: bytes, received: int) -> int:
    """Append `new` to the stream's file (its unreadable metrics lines to rejected.jsonl) and record `received`;
    the number of lines rejected.

    An intent saved first names both files' sizes before and after, so a crash anywhere in between is settled by
    `_state` on the next batch (the append finished: it counts; it did not: both files are cut back), and a resent
    batch is never written twice."""
    target, bad_file = run_dir / STREAMS[stream], run_dir / "rejected.jsonl"
    kept, bad = _keep_readable(new) if stream == "metrics" else (new, b"")
    rejected = bad.count(b"\n")
    before, bad_before = _size(target), _size(bad_file)
    pending = {"stream": stream, "received": received, "size": [before, before + len(kept)]}
    pending["rejected_size"] = [bad_before, bad_before + len(bad)]
    _save_state(run_dir, {**state, "pending": pending})
    for path, chunk in ((bad_file, bad), (target, kept)):
        if chunk:
            with open(path, "ab") as f:
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
    state[stream] = received
    _save_state(run_dir, state)
    return rejected


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _keep_readable(data: bytes) -> tuple[bytes, bytes]:
    """(the protocol records of `data`, rejected.jsonl lines for the rest with the reason)."""
    kept, bad = [], []
    for line in data.split(b"\n")[:-1]:
        if parse_line(line) is not None:
            kept.append(line + b"\n")
        else:
            reason = "not a protocol record (a JSON object with type log/event, an integer step >= 0, metrics)"
            text = line[:4096].decode("utf-8", "replace")
            bad.append(json.dumps({"time": time.time(), "reason": reason, "line": text}).encode("utf-8") + b"\n")
    return b"".join(kept), b"".join(bad)


def _run_for(store: Store, owner: str | None, run_id: str, spec_yaml: str | None) -> Run:
    try:
        run = store.get_run(run_id)
    except RunNotFound:
        run = None
    if run is not None:
        if run.backend != external.EXTERNAL or run.owner != owner or external.read_marker(Path(run.run_dir)) is None:
            raise BatchError(404, f"no run {run_id!r} of yours: pick a new run id (the callback does).")
        return run
    if spec_yaml is None:
        raise BatchError(404, f"no run {run_id!r} yet: its first batch carries its spec (run.yaml).", received=0)
    from grpo_dashboard.spec.run_spec import RunSpec

    try:
        spec = RunSpec.from_yaml(spec_yaml)
    except ValueError as exc:
        raise BatchError(400, f"spec: not a run spec ({str(exc)[:500]}).") from None
    if owner is not None and len(store.list_runs(owner=owner)) >= MAX_RUNS_PER_USER:
        raise BatchError(429, f"you have {MAX_RUNS_PER_USER} runs here already: delete some first.")
    run_dir = data_dir() / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    (run_dir / "run.yaml").write_text(spec.to_yaml(), encoding="utf-8")
    marker = {"v": 1, "transport": "http", "created_at": time.time(), "owner": owner}
    (run_dir / external.MARKER_FILE).write_text(json.dumps(marker), encoding="utf-8")
    store.insert_run(
        Run(
            id=run_id,
            name=spec.name or run_id,
            spec_yaml=spec.to_yaml(),
            backend=external.EXTERNAL,
            status=RunStatus.QUEUED.value,
            created_at=time.time(),
            run_dir=str(run_dir.resolve()),
            output_dir=None,
            owner=owner,
        )
    )
    return store.get_run(run_id)


def _state(run_dir: Path) -> dict[str, int]:
    """Bytes received per stream, after settling an append a crash interrupted (see `_append`)."""
    try:
        data = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    state = {k: v for k, v in data.items() if k in STREAMS and isinstance(v, int)}
    pending = data.get("pending")
    if isinstance(pending, dict) and pending.get("stream") in STREAMS:
        files = (
            (run_dir / STREAMS[pending["stream"]], pending["size"]),
            (run_dir / "rejected.jsonl", pending["rejected_size"]),
        )
        if all(_size(path) == after for path, (_, after) in files):
            state[pending["stream"]] = int(pending["received"])
        else:
            for path, (before, _) in files:
                if _size(path) > before:
                    with open(path, "r+b") as f:
                        f.truncate(before)
        _save_state(run_dir, state)
    return state


def _save_state(run_dir: Path, state: dict[str, Any]) -> None:
    tmp = run_dir / f".{STATE_FILE}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(state))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, run_dir / STATE_FILE)


def request_stop(run: Run) -> None:
    """Ask the run's callback to stop the trainer cleanly: its next batch's answer says `stop`."""
    (Path(run.run_dir) / CANCEL_FILE).touch()
