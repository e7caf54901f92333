"""Run orchestration: validate and launch a spec, follow runs (ingest + liveness), cancel them, survive restarts.

Used identically by the CLI and the web app. Failed runs are states in the store, never exceptions.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_dashboard.checks.training_checks import normalise_training
from grpo_dashboard.checks.validation import ValidationReport
from grpo_dashboard.checks.validation import validate as validate_generic
from grpo_dashboard.errors import BackendError
from grpo_dashboard.health.ship import ship as ship_health
from grpo_dashboard.launch.backends import Backends, checks_for, shared
from grpo_dashboard.launch.local.job import metrics_path  # noqa: F401 - re-exported for callers and tests
from grpo_dashboard.launch.logs import log_path  # noqa: F401 - re-exported for callers and tests
from grpo_dashboard.spec import agent_spec
from grpo_dashboard.spec.run_spec import RunSpec, load_spec
from grpo_dashboard.store import external, remote_ingest
from grpo_dashboard.store.db import ACTIVE, TERMINAL, Run, RunStatus, Store, data_dir
from grpo_dashboard.store.external import EXTERNAL
from grpo_dashboard.store.importers import IMPORTED


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
        d.eval_data_files = (
            absolute(d.eval_data_files)
            if isinstance(d.eval_data_files, str)
            else [absolute(f) for f in d.eval_data_files]
        )
    for r in s.rewards:
        if r.function and ":" in r.function and r.function.rsplit(":", 1)[0].endswith(".py"):
            target, attr = r.function.rsplit(":", 1)
            r.function = f"{absolute(target)}:{attr}"
    agent_spec.map_files(s.agent, absolute)
    b = s.backend
    if b.accelerate_config and (base / b.accelerate_config).is_file():
        b.accelerate_config = absolute(b.accelerate_config)
    s.output_dir = absolute(s.output_dir) if s.output_dir else str(run_dir / "output")
    return s


def prepare(spec: RunSpec, base: Path) -> tuple[RunSpec, ValidationReport]:
    """What a launch does to a spec before it writes the job: validated (typed training values) and its paths
    made absolute against `base` (the output under `base/output`); with the validation report."""
    checked, report = check(spec, base)
    return resolve_paths(checked, base, base / "output"), report


def check(
    source: str | Path | dict[str, Any] | RunSpec, base_dir: str | Path | None = None
) -> tuple[RunSpec, ValidationReport]:
    """Parse and validate; raises SpecError for structural problems, returns the report otherwise.

    The returned spec holds its training values as TRL types them ("1e-6" as 1e-06), which is what a job gets.
    """
    spec = load_spec(source)
    report = validate(spec, base_dir)
    normalise_training(spec)
    return spec, report


def validate(spec: RunSpec, base_dir: str | Path | None = None) -> ValidationReport:
    """Every check of a parsed spec: the generic ones and its backend's (`CHECKS` of its class in the table);
    `spec` is not changed (`check` also types its training values)."""
    return validate_generic(spec, base_dir, checks_for(spec.backend.kind))


def launch(
    source: str | Path | dict[str, Any] | RunSpec,
    store: Store | None = None,
    base_dir: str | Path | None = None,
    owner: str | None = None,
    token: str | None = None,
    backends: Backends | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Run:
    """Validate the spec and start it on its backend; raises SpecError (and writes nothing) if invalid.

    `token`: the launching user's Hugging Face token (default: the saved login, never on a Space). An hf_jobs run
    gets it as the job's secret (BackendError, nothing written, when there is none); a local job as its HF_TOKEN,
    the only token it gets (its environment is allow-listed: `local.job_environment`). Never stored. A refused
    submission is a failed run. `backends`: the app's (default: the process's, `backends.shared()`). `on_warning`
    gets each warning of the validation (the CLI prints them), before anything starts.
    """
    spec, report = check(source, base_dir)
    report.raise_if_errors()
    if on_warning is not None:
        for w in report.warnings:
            on_warning(str(w))
    backend = (backends or shared()).get(spec.backend.kind)
    token = backend.launch_token(token)
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
    tmp.write_text(resolved.to_job_yaml(), encoding="utf-8")  # every resolved value the job reads
    tmp.replace(config_path)
    if spec.health.in_job:
        ship_health(run_dir)  # the job imports it as grpo_health from beside run.yaml (guard, alerts)
    run = Run(
        id=run_id,
        name=spec.name,
        spec_yaml=resolved.to_yaml(),
        backend=spec.backend.kind,
        status=RunStatus.QUEUED.value,
        created_at=time.time(),
        run_dir=str(run_dir),
        output_dir=resolved.output_dir,
        owner=owner,
    )
    store.insert_run(run)
    return backend.submit(store, run, resolved, token, base)


def refresh(store: Store, run: Run, backends: Backends | None = None) -> Run:
    """Ingest new records of an active run and settle its status if its job has ended."""
    if run.backend == IMPORTED:
        return run  # a run made elsewhere (store/importers.py): nothing runs it
    if run.backend == EXTERNAL:
        return external.refresh(store, run)  # a user's own script with the dashboard's callback
    return (backends or shared()).get(run.backend).refresh(store, run)


def refresh_active(store: Store, backends: Backends | None = None) -> list[Run]:
    """Refresh every queued or running run; returns them after the refresh."""
    backends = backends or shared()
    for backend in backends:
        backend.reap(store)
    external.discover(store)
    # A run of a backend this dashboard does not know (made by another version) is left as it is.
    return [
        refresh(store, r, backends)
        for r in store.list_runs(status=list(ACTIVE))
        if r.backend in backends or r.backend == EXTERNAL
    ]


def cancel(
    store: Store,
    run: Run,
    wait: bool = False,
    grace_s: float | None = None,
    token: str | None = None,
    backends: Backends | None = None,
) -> Run:
    """Ask a run to stop on its backend: locally SIGTERM to its process group, SIGKILL after the grace period; on
    Hugging Face Jobs the job is canceled, with `token` (the user's own) when given; on Slurm `scancel`.

    With `wait`, return once the run is settled or `grace_s` (default: the backend's) has passed.
    """
    if run.status in TERMINAL:
        return run
    if run.backend == EXTERNAL and (external.read_marker(Path(run.run_dir)) or {}).get("transport") == "http":
        remote_ingest.request_stop(run)  # the callback's next batch is answered `stop`: the trainer stops cleanly
        return store.get_run(run.id)
    if run.backend in (EXTERNAL, IMPORTED):
        raise BackendError(
            f"Run {run.id} runs in a script of its own (recorded through a directory): the dashboard cannot stop "
            "it. Stop the script where it runs."
        )
    return (backends or shared()).get(run.backend).cancel(store, run, wait=wait, token=token, grace_s=grace_s)


def can_cancel(run: Run) -> bool:
    """Whether the dashboard can stop the run: not an imported or followed one, nor a callback's run written
    through a directory (only its HTTP transport hears a Cancel)."""
    if run.backend == IMPORTED:
        return False
    if run.backend == EXTERNAL:
        return (external.read_marker(Path(run.run_dir)) or {}).get("transport") == "http"
    return True


def why_not_resumable(run: Run) -> str | None:
    """Why the dashboard cannot resume the run from a checkpoint (an imported or followed run: it started no job of
    it), or None when its backend decides (`launch/resume.py`)."""
    if run.backend == IMPORTED:
        return (
            f"Run {run.id} was imported from another tool's logs: the dashboard started no job of it, so it cannot "
            "resume it. Resume the training where it ran (TRL: `resume_from_checkpoint`)."
        )
    if run.backend == EXTERNAL:
        return (
            f"Run {run.id} is reported by a script of its own: the dashboard started no job of it, so it cannot "
            "resume it. Resume it in that script (TRL: `resume_from_checkpoint`)."
        )
    return None


def resume(store: Store, run: Run, token: str | None, backends: Backends | None = None) -> bool:
    """After a restart: follow an active run again with the user's `token`; True when following started now."""
    if run.backend in (EXTERNAL, IMPORTED):
        return False
    return (backends or shared()).get(run.backend).resume(store, run, token)


def reattach(
    store: Store,
    token: str | None = None,
    namespace: str | None = None,
    owner: str | None = None,
    backends: Backends | None = None,
) -> list[Run]:
    """After a dashboard restart: find this dashboard's runs on every backend and follow them again.

    Local runs need nothing (refresh finds their processes again); Hugging Face Jobs are listed in `namespace`;
    Slurm jobs are found by their run label (`squeue --me`).
    Raises BackendError when not logged in.
    """
    return [
        run
        for backend in (backends or shared())
        for run in backend.reattach(store, token=token, namespace=namespace, owner=owner)
    ]


def delete(store: Store, run: Run) -> list[str]:
    """Remove an ended run: its rows in the store, and its run directory when that lies inside the data directory
    (a directory elsewhere is left alone and named in the returned notes). An active run must be canceled first."""
    import shutil

    current = store.get_run(run.id)
    if current.is_active:
        raise BackendError(f"Run {run.id} is {current.status}: cancel it first, then delete it.")
    notes = []
    run_dir = Path(current.run_dir).resolve()
    roots = {store.path.parent.resolve(), data_dir().resolve()}
    inside = any(root in run_dir.parents for root in roots)
    store.delete_run_rows(run.id)
    if inside and run_dir.is_dir():
        shutil.rmtree(run_dir, ignore_errors=True)
    elif run_dir.exists():
        notes.append(f"{run_dir} is outside the data directory and was left in place.")
    return notes


def job_summary(run: Run, backends: Backends | None = None) -> str | None:
    """One line saying where the run's job went (job URL, hardware, timeout), or None when there is nothing to say."""
    if run.backend == IMPORTED:
        return None
    if run.backend == EXTERNAL:
        return "recorded by DashboardCallback in a script of its own (read-only here)"
    return (backends or shared()).get(run.backend).job_summary(run)


def wait(store: Store, run: Run, poll_s: float = 0.5, on_update: Any = None, backends: Backends | None = None) -> Run:
    """Follow a run until it ends, ingesting as it goes."""
    last: tuple[Any, ...] = ()
    while True:
        run = refresh(store, store.get_run(run.id), backends)
        token = store.change_token(run.id)
        if on_update is not None and token != last:
            on_update(run)
            last = token
        if run.status in TERMINAL:
            if run.backend == EXTERNAL:
                return run
            return (backends or shared()).get(run.backend).await_exit(store, run)
        time.sleep(poll_s)


class Monitor:
    """A background thread that keeps every active run ingested and its status settled.

    `on_end(store, run)` is called for each run the thread sees ended (the app saves the run's health badge there,
    so the runs table of a fresh dashboard reads it instead of diagnosing the run again).
    """

    def __init__(
        self,
        store: Store,
        interval_s: float = 0.5,
        on_end: Callable[[Store, Run], object] | None = None,
        backends: Backends | None = None,
    ) -> None:
        self.store = store
        self.backends = backends or shared()
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
                for run in refresh_active(self.store, self.backends):
                    if run.status in TERMINAL and self.on_end is not None:
                        self.on_end(self.store, run)
                self.last_error = None
            except Exception as exc:  # keep monitoring; the UI shows last_error
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.passes += 1
            self._stop.wait(self.interval_s)
