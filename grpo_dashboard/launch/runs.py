"""Run orchestration: validate and launch a spec, follow runs (ingest + liveness), cancel them, survive restarts.

Used identically by the CLI and the web app. Failed runs are states in the store, never exceptions.
"""

from __future__ import annotations

import copy
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.validation import ValidationReport, validate
from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.health.ship import ship as ship_health
from grpo_dashboard.launch import hf_jobs, local
from grpo_dashboard.launch.logs import last_error_line
from grpo_dashboard.spec.run_spec import BackendSpec, RunSpec, load_spec
from grpo_dashboard.store.db import TERMINAL, Run, RunStatus, Store, data_dir
from grpo_dashboard.store.ingest import ingest_file

CANCEL_GRACE_S = 10.0
STALLED = "stalled"
LINGER_S = 30.0  # a job that reported its end but has not exited by then is killed
_children: dict[str, Any] = {}
_children_lock = threading.Lock()
_stall_limits: dict[str, float | None] = {}
# Runs whose job this process saw alive (as the very process that was started) at its latest check: when such a
# job's leader has vanished, what is left of its process group is still the run's (`local.signal_group`).
_seen_alive: set[str] = set()


def make_run_id(name: str) -> str:
    """A unique, filesystem-safe id: slug of the name, UTC timestamp, random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "run"
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def resolve_paths(spec: RunSpec, base: Path, run_dir: Path) -> RunSpec:
    """A copy of the spec with every local path made absolute and output_dir filled in (written as run.yaml)."""
    s = copy.deepcopy(spec)

    def absolute(p: str) -> str:
        path = Path(p).expanduser()
        return str(path if path.is_absolute() else (base / path).resolve())

    m = s.model
    local_model = Path(m.name_or_path).expanduser()
    if m.build_tiny or (local_model if local_model.is_absolute() else base / local_model).exists():
        m.name_or_path = absolute(m.name_or_path)
    d = s.dataset
    if d.data_files:
        d.data_files = absolute(d.data_files) if isinstance(d.data_files, str) else [absolute(f) for f in d.data_files]
    if d.eval_data_files:
        d.eval_data_files = (absolute(d.eval_data_files) if isinstance(d.eval_data_files, str)
                             else [absolute(f) for f in d.eval_data_files])
    for r in s.rewards:
        if r.function and ":" in r.function and r.function.rsplit(":", 1)[0].endswith(".py"):
            target, attr = r.function.rsplit(":", 1)
            r.function = f"{absolute(target)}:{attr}"
    b = s.backend
    if b.accelerate_config and (base / b.accelerate_config).is_file():
        b.accelerate_config = absolute(b.accelerate_config)
    s.output_dir = absolute(s.output_dir) if s.output_dir else str(run_dir / "output")
    return s


def check(source: str | Path | dict[str, Any] | RunSpec, base_dir: str | Path | None = None
          ) -> tuple[RunSpec, ValidationReport]:
    """Parse and validate; raises SpecError for structural problems, returns the report otherwise."""
    spec = load_spec(source)
    return spec, validate(spec, base_dir)


def launch(source: str | Path | dict[str, Any] | RunSpec, store: Store | None = None,
           base_dir: str | Path | None = None, owner: str | None = None, token: str | None = None) -> Run:
    """Validate the spec and start it on its backend; raises SpecError (and writes nothing) if invalid.

    `token`: the launching user's Hugging Face token (default: the saved login, never on a Space). An hf_jobs run
    gets it as the job's secret (BackendError, nothing written, when there is none); a local job as its HF_TOKEN,
    the only token it gets (its environment is allow-listed: `local.job_environment`). Never stored. A refused
    submission is a failed run.
    """
    spec, report = check(source, base_dir)
    report.raise_if_errors()
    if spec.backend.kind == "hf_jobs":
        token = hf_jobs.require_token(token)
    else:
        token = token or hf_jobs.saved_token()
    store = store or Store()
    base = Path(base_dir) if base_dir else Path.cwd()
    run_id = make_run_id(spec.name)
    runs_root = (data_dir() / "runs").resolve()
    run_dir = (runs_root / run_id).resolve()
    if runs_root not in run_dir.parents:
        raise ValueError(f"run directory {run_dir} escapes {runs_root}")
    resolved = resolve_paths(spec, base, run_dir)
    run_dir.mkdir(parents=True, exist_ok=False)
    config_path = run_dir / "run.yaml"
    tmp = run_dir / ".run.yaml.tmp"
    tmp.write_text(resolved.to_yaml(), encoding="utf-8")
    tmp.replace(config_path)
    if spec.health.in_job:
        ship_health(run_dir)  # the job imports it as grpo_health from beside run.yaml (guard, alerts)
    metrics_path = run_dir / "metrics.jsonl"
    run = Run(id=run_id, name=spec.name, spec_yaml=resolved.to_yaml(), backend=spec.backend.kind,
              status=RunStatus.QUEUED.value, created_at=time.time(), run_dir=str(run_dir),
              output_dir=resolved.output_dir, owner=owner)
    store.insert_run(run)
    if spec.backend.kind == "hf_jobs":
        return hf_jobs.submit(store, run, resolved, str(token), base)
    try:
        proc = local.start(resolved, run_dir, config_path, metrics_path, token=token)
    except OSError as exc:
        store.finish_run(run_id, RunStatus.FAILED.value, error=f"could not start the job: {exc}")
        return store.get_run(run_id)
    with _children_lock:
        _children[run_id] = proc.popen
        _seen_alive.add(run_id)
    store.update_run(run_id, pid=proc.pid, pid_start=proc.start_time)
    return store.get_run(run_id)


def metrics_path(run: Run) -> Path:
    """Where the job of a local run writes its records."""
    return Path(run.run_dir) / "metrics.jsonl"


def log_path(run: Run) -> Path:
    """The job's combined stdout/stderr."""
    return Path(run.run_dir) / "job.log"


def refresh(store: Store, run: Run) -> Run:
    """Ingest new records of an active run and settle its status if its process has ended."""
    if run.backend == "hf_jobs":
        return hf_jobs.refresh(store, run)  # only makes sure its background follower runs
    if run.status in TERMINAL:
        return _reap(store, run)
    ingest_file(store, run.id, metrics_path(run))
    run = store.get_run(run.id)
    if run.status in TERMINAL:
        return _reap(store, run)
    exit_code, alive = _poll(run)
    if alive:
        if run.cancel_requested_at and time.time() - run.cancel_requested_at > CANCEL_GRACE_S and run.pid:
            local.signal_group(run.pid, run.pid_start, signal.SIGKILL)
        elif not run.cancel_requested_at:
            _kill_if_stalled(store, run)
        return run
    _kill_leftovers(run)  # leader gone, workers left: no orphans
    ingest_file(store, run.id, metrics_path(run))
    run = store.get_run(run.id)
    if run.status in TERMINAL:
        if exit_code is not None:
            store.update_run(run.id, exit_code=exit_code)
        return store.get_run(run.id)
    if run.cancel_requested_at and run.error and run.error.startswith(STALLED):
        store.finish_run(run.id, RunStatus.FAILED.value, exit_code=exit_code)
    elif run.cancel_requested_at:
        store.finish_run(run.id, RunStatus.CANCELED.value, error="canceled by user (process killed)",
                         exit_code=exit_code)
    elif run.pid is None:
        return run
    else:
        if exit_code is not None and exit_code < 0:
            reason = f"job was killed by {signal.Signals(-exit_code).name} (signal {-exit_code})"
        elif exit_code is not None:
            reason = f"job exited with code {exit_code}"
        else:
            reason = f"job process {run.pid} vanished"
        reason += " without reporting an end"
        if local.pid_reused(run.pid, run.pid_start):
            reason += f" (pid {run.pid} now belongs to another process, which was not signalled)"
        last = last_error_line(log_path(run))
        store.finish_run(run.id, RunStatus.FAILED.value, error=f"{reason}. Last log line: {last}" if last else reason,
                         exit_code=exit_code)
    return store.get_run(run.id)


def stall_timeout(run: Run) -> float | None:
    """The run's `backend.stall_timeout_s` (None: never), read once from its spec."""
    if run.id not in _stall_limits:
        try:
            _stall_limits[run.id] = RunSpec.from_yaml(run.spec_yaml).backend.stall_timeout_s
        except Exception:  # noqa: BLE001 - a run without a readable spec keeps the default
            _stall_limits[run.id] = BackendSpec().stall_timeout_s
    return _stall_limits[run.id]


def _kill_if_stalled(store: Store, run: Run) -> None:
    """A job silent (no log, no record) for longer than its stall timeout is hung: kill its group, mark it failed."""
    limit = stall_timeout(run)
    if not limit or not run.pid:
        return
    last = max([run.started_at or run.created_at] + [p.stat().st_mtime for p in (log_path(run), metrics_path(run))
                                                       if p.exists()])
    silent = time.time() - last
    if silent <= limit:
        return
    if not local.is_ours(run.pid, run.pid_start):
        return  # not provably the job (a reused pid is found vanished by the next refresh): never signalled
    reason = (f"{STALLED}: no output for {silent:.0f} s (backend.stall_timeout_s = {limit:g}); the job was killed. "
              f"Last log line: {last_error_line(log_path(run)) or '(none)'}")
    store.update_run(run.id, error=reason, cancel_requested_at=time.time())
    local.signal_group(run.pid, run.pid_start, signal.SIGKILL)


def _poll(run: Run) -> tuple[int | None, bool]:
    with _children_lock:
        popen = _children.get(run.id)
    if popen is not None:
        code = popen.poll()
        alive = code is None
    else:
        code, alive = None, local.is_alive(run.pid, run.pid_start)
    if alive:
        with _children_lock:
            _seen_alive.add(run.id)
    return code, alive


def _kill_leftovers(run: Run) -> None:
    """SIGKILL what is left of the group of a job whose leader has exited, if the group is provably still the run's.

    It is when this process saw the leader alive at its previous check (`_seen_alive`); a dashboard that finds the
    leader long gone leaves the group alone, as its pid may since belong to an unrelated process group.
    """
    with _children_lock:
        seen = run.id in _seen_alive
        _seen_alive.discard(run.id)
    if run.pid and local.group_alive(run.pid, run.pid_start):
        local.signal_group(run.pid, run.pid_start, signal.SIGKILL, leftovers=seen)


def _reap(store: Store, run: Run) -> Run:
    """After the job reported its end: record the exit code once the process is gone, never blocking."""
    with _children_lock:
        popen = _children.get(run.id)
    if popen is None:
        return run
    code = popen.poll()
    if code is None:
        with _children_lock:
            _seen_alive.add(run.id)
        if run.ended_at and time.time() - run.ended_at > LINGER_S and run.pid:
            local.signal_group(run.pid, run.pid_start, signal.SIGKILL)  # reported its end but hangs in teardown
        return run
    with _children_lock:
        _children.pop(run.id, None)
    _kill_leftovers(run)
    if run.exit_code is None:
        store.update_run(run.id, exit_code=code)
    return store.get_run(run.id)


def _settle_ended(store: Store) -> None:
    with _children_lock:
        ids = list(_children)
    for run_id in ids:
        try:
            run = store.get_run(run_id)
        except RunNotFound:  # a child launched against another store (another data dir) in this process
            continue
        if run.status in TERMINAL:
            _reap(store, run)


def refresh_active(store: Store) -> list[Run]:
    """Refresh every queued or running run; returns them after the refresh."""
    _settle_ended(store)
    return [refresh(store, r) for r in store.list_runs(status=[RunStatus.QUEUED.value, RunStatus.RUNNING.value])]


def cancel(store: Store, run: Run, wait: bool = False, grace_s: float = CANCEL_GRACE_S) -> Run:
    """Ask a run to stop (SIGTERM to its process group, SIGKILL after the grace period)."""
    if run.status in TERMINAL:
        return run
    if run.backend == "hf_jobs":
        return hf_jobs.cancel(store, run, wait=wait)
    store.update_run(run.id, cancel_requested_at=time.time())
    alive = local.is_alive(run.pid, run.pid_start)
    if not (alive and local.signal_group(run.pid, run.pid_start, signal.SIGTERM)):
        error = "canceled by user"
        if local.pid_reused(run.pid, run.pid_start):
            error += f" (its job had already ended; pid {run.pid} now belongs to another process, not signalled)"
        elif alive:
            error += f" (process {run.pid} could not be verified as the job's start, so it was not signalled)"
        store.finish_run(run.id, RunStatus.CANCELED.value, error=error)
        return store.get_run(run.id)
    if not wait:
        return store.get_run(run.id)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        run = refresh(store, store.get_run(run.id))
        if run.status in TERMINAL and not local.group_alive(run.pid or 0, run.pid_start):
            return _await_exit(store, run)
        time.sleep(0.2)
    local.signal_group(run.pid, run.pid_start, signal.SIGKILL, leftovers=True)
    for _ in range(50):
        run = refresh(store, store.get_run(run.id))
        if run.status in TERMINAL:
            break
        time.sleep(0.1)
    return run


def reattach(store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None
             ) -> list[Run]:
    """After a dashboard restart: find this dashboard's Hugging Face Jobs in `namespace` and follow them again.

    Local runs need nothing (refresh finds their processes again). Raises BackendError when not logged in.
    """
    return hf_jobs.reattach(store, token=token, namespace=namespace, owner=owner)


def wait(store: Store, run: Run, poll_s: float = 0.5, on_update: Any = None) -> Run:
    """Follow a run until it ends, ingesting as it goes."""
    last: tuple[Any, ...] = ()
    while True:
        run = refresh(store, store.get_run(run.id))
        token = store.change_token(run.id)
        if on_update is not None and token != last:
            on_update(run)
            last = token
        if run.status in TERMINAL:
            return _await_exit(store, run)
        time.sleep(poll_s)


def _await_exit(store: Store, run: Run) -> Run:
    """Give a job that reported its end a moment to exit, so its exit code is recorded."""
    deadline = time.monotonic() + LINGER_S + 5
    while time.monotonic() < deadline:
        with _children_lock:
            if run.id not in _children:
                return store.get_run(run.id)
        time.sleep(0.1)
        run = refresh(store, store.get_run(run.id))
    return run


class Monitor:
    """A background thread that keeps every active run ingested and its status settled.

    `on_end(store, run)` is called for each run the thread sees ended (the app saves the run's health badge there,
    so the runs table of a fresh dashboard reads it instead of diagnosing the run again).
    """

    def __init__(self, store: Store, interval_s: float = 0.5,
                 on_end: Callable[[Store, Run], object] | None = None) -> None:
        self.store = store
        self.on_end = on_end
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.passes = 0

    def start(self) -> Monitor:
        """Start the thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="grpo-monitor", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for run in refresh_active(self.store):
                    if run.status in TERMINAL and self.on_end is not None:
                        self.on_end(self.store, run)
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - keep monitoring; the UI shows last_error
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.passes += 1
            self._stop.wait(self.interval_s)
