"""The local backend: the job script as a subprocess (argument list, never a shell) in its own process group.

Several processes go through `accelerate launch --num_processes N`; GPUs are chosen with CUDA_VISIBLE_DEVICES.
A process is identified by pid plus its start time (`process`), so a reused pid is never mistaken for the run, and
never signalled. A job gets an allow-listed environment (`job.JOB_ENV_NAMES`), never the dashboard's secrets.
The jobs this backend started are kept (`_children`) to read their exit codes; any other process finds a job again
by its pid and start time, so nothing needs reattaching after a restart.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import ClassVar

from grpo_dashboard.checks.named import Check
from grpo_dashboard.errors import RunNotFound
from grpo_dashboard.launch.hub_client import saved_token
from grpo_dashboard.launch.interface import SpacePolicy
from grpo_dashboard.launch.local.checks import CHECKS
from grpo_dashboard.launch.local.job import build_command, metrics_path, start
from grpo_dashboard.launch.local.policy import SPACE_POLICY
from grpo_dashboard.launch.local.process import group_alive, is_alive, is_ours, pid_reused, signal_group
from grpo_dashboard.launch.logs import last_error_line, log_path
from grpo_dashboard.spec.run_spec import LOCAL, BackendSpec, RunSpec
from grpo_dashboard.store.db import TERMINAL, Run, RunStatus, Store
from grpo_dashboard.store.ingest import ingest_file

CANCEL_GRACE_S = 10.0
STALLED = "stalled"
LINGER_S = 30.0  # a job that reported its end but has not exited by then is killed
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")  # a checkpoint folder TRL writes in the output directory


class LocalBackend:
    """Runs jobs on this machine; holds the processes it started (the `Backend` protocol, launch/interface.py)."""

    KIND: ClassVar[str] = LOCAL
    RESUMABLE: ClassVar[bool] = True
    SPACE: ClassVar[SpacePolicy] = SPACE_POLICY
    CHECKS: ClassVar[tuple[Check, ...]] = CHECKS

    def __init__(self) -> None:
        self._children: dict[str, subprocess.Popen | None] = {}
        self._children_lock = threading.Lock()
        self._stall_limits: dict[str, float | None] = {}
        # Runs whose job this backend saw alive (as the very process that was started) at its latest check: when
        # such a job's leader has vanished, what is left of its process group is still the run's (`signal_group`).
        self._seen_alive: set[str] = set()

    def status_markdown(self, run: Run, store: Store | None = None) -> str:
        """Nothing: a local job's state is the run's own, shown above."""
        return ""

    def checkpoints(self, run: Run, reported: dict[int, str]) -> dict[int, str]:
        """The reported checkpoints still on disk, and the `checkpoint-N` folders of the run's output directory."""
        found = {s: p for s, p in reported.items() if Path(p).is_dir()}
        out = Path(run.output_dir or "")
        if out.is_dir():
            for d in out.iterdir():
                m = CHECKPOINT_DIR.match(d.name)
                if m and d.is_dir():
                    found.setdefault(int(m.group(1)), str(d))
        return found

    def checkpoint_path(self, step: int, path: str) -> str:
        """The checkpoint where it is: the job runs on this machine."""
        return path

    def resubmit_fields(self, store: Store, run: Run) -> dict[str, object]:
        """Nothing more: the job appends to the same metrics file."""
        return {}

    def command_preview(self, spec: RunSpec) -> tuple[str, str] | None:
        """The job command of this spec, with placeholder run-directory paths."""
        command = build_command(spec, Path("<run_dir>/run.yaml"), Path("<run_dir>/metrics.jsonl"))
        return "What the local backend runs (paths inside the run directory):", shlex.join(command)

    def probe(self) -> str | None:
        """Always reachable: this machine."""
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """Nothing to stop: local jobs outlive the dashboard and are found again by pid and start time."""

    def launch_token(self, token: str | None = None) -> str | None:
        """The token a local job gets as its HF_TOKEN: the launching user's, else the saved login (None: no token)."""
        return token or saved_token()

    def submit(self, store: Store, run: Run, spec: RunSpec, token: str | None, base_dir: Path | None = None) -> Run:
        """Start the job of a queued run from its run.yaml (`spec` is its resolved spec; `base_dir` is not needed).

        A job that cannot be started is a failed run.
        """
        run_dir = Path(run.run_dir)
        try:
            proc = start(spec, run_dir, run_dir / "run.yaml", metrics_path(run), token=token)
        except OSError as exc:
            store.finish_run(run.id, RunStatus.FAILED, error=f"could not start the job: {exc}")
            return store.get_run(run.id)
        with self._children_lock:
            self._children[run.id] = proc.popen
            self._seen_alive.add(run.id)
        store.update_run(run.id, pid=proc.pid, pid_start=proc.start_time)
        return store.get_run(run.id)

    def refresh(self, store: Store, run: Run) -> Run:
        """Ingest new records of an active run and settle its status if its process has ended."""
        if run.status in TERMINAL:
            return self._reap(store, run)
        ingest_file(store, run.id, metrics_path(run))
        run = store.get_run(run.id)
        if run.status in TERMINAL:
            return self._reap(store, run)
        exit_code, alive = self._poll(run)
        if alive:
            if run.cancel_requested_at and time.time() - run.cancel_requested_at > CANCEL_GRACE_S and run.pid:
                signal_group(run.pid, run.pid_start, signal.SIGKILL)
            elif not run.cancel_requested_at:
                self._kill_if_stalled(store, run)
            return run
        self._kill_leftovers(run)  # leader gone, workers left: no orphans
        ingest_file(store, run.id, metrics_path(run))
        run = store.get_run(run.id)
        if run.status in TERMINAL:
            if exit_code is not None:
                store.update_run(run.id, exit_code=exit_code)
            return store.get_run(run.id)
        if run.cancel_requested_at and run.error and run.error.startswith(STALLED):
            store.finish_run(run.id, RunStatus.FAILED, exit_code=exit_code)
        elif run.cancel_requested_at:
            store.finish_run(
                run.id, RunStatus.CANCELED, error="canceled by user (process killed)", exit_code=exit_code
            )
        elif run.pid is None:
            return run
        else:
            store.finish_run(run.id, RunStatus.FAILED, error=self._vanished(run, exit_code), exit_code=exit_code)
        return store.get_run(run.id)

    def _vanished(self, run: Run, exit_code: int | None) -> str:
        """Why a job that never reported its end is gone, with the last line of its log."""
        if exit_code is not None and exit_code < 0:
            reason = f"job was killed by {signal.Signals(-exit_code).name} (signal {-exit_code})"
        elif exit_code is not None:
            reason = f"job exited with code {exit_code}"
        else:
            reason = f"job process {run.pid} vanished"
        reason += " without reporting an end"
        if pid_reused(run.pid, run.pid_start):
            reason += f" (pid {run.pid} now belongs to another process, which was not signalled)"
        last = last_error_line(log_path(run))
        return f"{reason}. Last log line: {last}" if last else reason

    def stall_timeout(self, run: Run) -> float | None:
        """The run's `backend.stall_timeout_s` (None: never), read once from its spec."""
        if run.id not in self._stall_limits:
            try:
                self._stall_limits[run.id] = RunSpec.from_yaml(run.spec_yaml).backend.stall_timeout_s
            except Exception:  # a run without a readable spec keeps the default
                self._stall_limits[run.id] = BackendSpec().stall_timeout_s
        return self._stall_limits[run.id]

    def _kill_if_stalled(self, store: Store, run: Run) -> None:
        """A job silent (no log, no record) for longer than its stall timeout is hung: kill its group, mark it
        failed."""
        limit = self.stall_timeout(run)
        if not limit or not run.pid:
            return
        last = max(
            [run.started_at or run.created_at]
            + [p.stat().st_mtime for p in (log_path(run), metrics_path(run)) if p.exists()]
        )
        silent = time.time() - last
        if silent <= limit:
            return
        if not is_ours(run.pid, run.pid_start):
            return  # not provably the job (a reused pid is found vanished by the next refresh): never signalled
        reason = (
            f"{STALLED}: no output for {silent:.0f} s (backend.stall_timeout_s = {limit:g}); the job was "
            f"killed. Last log line: {last_error_line(log_path(run)) or '(none)'}"
        )
        store.update_run(run.id, error=reason, cancel_requested_at=time.time())
        signal_group(run.pid, run.pid_start, signal.SIGKILL)

    def _poll(self, run: Run) -> tuple[int | None, bool]:
        with self._children_lock:
            popen = self._children.get(run.id)
        if popen is not None:
            code = popen.poll()
            alive = code is None
        else:
            code, alive = None, is_alive(run.pid, run.pid_start)
        if alive:
            with self._children_lock:
                self._seen_alive.add(run.id)
        return code, alive

    def _kill_leftovers(self, run: Run) -> None:
        """SIGKILL what is left of the group of a job whose leader has exited, if the group is provably still the
        run's.

        It is when this backend saw the leader alive at its previous check (`_seen_alive`); a dashboard that finds
        the leader long gone leaves the group alone, as its pid may since belong to an unrelated process group.
        """
        with self._children_lock:
            seen = run.id in self._seen_alive
            self._seen_alive.discard(run.id)
        if run.pid and group_alive(run.pid, run.pid_start):
            signal_group(run.pid, run.pid_start, signal.SIGKILL, leftovers=seen)

    def _reap(self, store: Store, run: Run) -> Run:
        """After the job reported its end: record the exit code once the process is gone, never blocking."""
        with self._children_lock:
            popen = self._children.get(run.id)
        if popen is None:
            return run
        code = popen.poll()
        if code is None:
            with self._children_lock:
                self._seen_alive.add(run.id)
            if run.ended_at and time.time() - run.ended_at > LINGER_S and run.pid:
                signal_group(run.pid, run.pid_start, signal.SIGKILL)  # reported its end but hangs in teardown
            return run
        with self._children_lock:
            self._children.pop(run.id, None)
        # per live run only: a dashboard that runs for months must not keep them all
        self._stall_limits.pop(run.id, None)
        self._kill_leftovers(run)
        if run.exit_code is None:
            store.update_run(run.id, exit_code=code)
        return store.get_run(run.id)

    def reap(self, store: Store) -> None:
        """Record the exit codes of jobs this process started whose runs have ended (they are not refreshed again)."""
        with self._children_lock:
            ids = list(self._children)
        for run_id in ids:
            try:
                run = store.get_run(run_id)
            except RunNotFound:  # a child launched against another store (another data dir) in this process
                continue
            if run.status in TERMINAL:
                self._reap(store, run)

    def await_exit(self, store: Store, run: Run) -> Run:
        """Give a job that reported its end a moment to exit, so its exit code is recorded."""
        deadline = time.monotonic() + LINGER_S + 5
        while time.monotonic() < deadline:
            with self._children_lock:
                if run.id not in self._children:
                    return store.get_run(run.id)
            time.sleep(0.1)
            run = self.refresh(store, store.get_run(run.id))
        return run

    def cancel(
        self, store: Store, run: Run, wait: bool = False, token: str | None = None, grace_s: float | None = None
    ) -> Run:
        """Ask a run to stop: SIGTERM to its process group, SIGKILL after `grace_s` (default CANCEL_GRACE_S) seconds.

        `token` is not needed. With `wait`, return once the job has stopped and the run is settled.
        """
        if run.status in TERMINAL:
            return run
        store.update_run(run.id, cancel_requested_at=time.time())
        alive = is_alive(run.pid, run.pid_start)
        if not (alive and signal_group(run.pid, run.pid_start, signal.SIGTERM)):
            error = "canceled by user"
            if pid_reused(run.pid, run.pid_start):
                error += f" (its job had already ended; pid {run.pid} now belongs to another process, not signalled)"
            elif alive:
                error += f" (process {run.pid} could not be verified as the job's start, so it was not signalled)"
            store.finish_run(run.id, RunStatus.CANCELED, error=error)
            return store.get_run(run.id)
        if not wait:
            return store.get_run(run.id)
        deadline = time.monotonic() + (CANCEL_GRACE_S if grace_s is None else grace_s)
        while time.monotonic() < deadline:
            run = self.refresh(store, store.get_run(run.id))
            if run.status in TERMINAL and not group_alive(run.pid or 0, run.pid_start):
                return self.await_exit(store, run)
            time.sleep(0.2)
        signal_group(run.pid, run.pid_start, signal.SIGKILL, leftovers=True)
        for _ in range(50):
            run = self.refresh(store, store.get_run(run.id))
            if run.status in TERMINAL:
                break
            time.sleep(0.1)
        return run

    def resume(self, store: Store, run: Run, token: str | None) -> bool:
        """Nothing to resume after a restart: `refresh` finds a local job's process again by its pid and start time."""
        return False

    def reattach(
        self, store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None
    ) -> list[Run]:
        """Nothing to find after a restart: every local run is in the store, and `refresh` follows it again."""
        return []

    def job_summary(self, run: Run) -> str | None:
        """Nothing beyond the run itself: a local job runs here, its files are in the run directory."""
        return None
