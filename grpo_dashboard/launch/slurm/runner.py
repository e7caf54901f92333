"""Slurm backend: a run is a batch job, submitted with `sbatch --parsable`, followed with `squeue` / `scontrol show
job` (and `sacct` where accounting keeps ended jobs), canceled with `scancel`.

The dashboard writes the batch script into the run directory (`job.sbatch`: reproducible, `sbatch job.sbatch` submits
it again) and Slurm writes the job's output to `job.log` there; the job writes its records to `metrics.jsonl` beside
it. The run directory must be on a filesystem the nodes share (the data directory, GRPO_DASHBOARD_DATA_DIR). One
launcher per node (`srun --ntasks-per-node=1`): on one node the same command as a local run; on several, accelerate
(GPUs) or torchrun (CPU-only nodes) with the node's rank from SLURM_PROCID, the first training node's address and a
free port. With a `generation` section the first node(s) serve vLLM (`vllm_server.py` supervises both steps).

Slurm is only ever called with argument lists, never through a shell. The job id is kept as the run's external_id and
in `slurm_job.json`, and every job carries `--comment=grpo-dashboard-run=<run id>`, so a restarted dashboard follows
its jobs from the store and finds a job whose id was never stored by that label. A job Slurm ends (time limit,
preemption, node failure, out of memory) before the job reported its end is a failed run with Slurm's state and reason.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar

from grpo_dashboard.checks.named import Check
from grpo_dashboard.launch import vllm_server
from grpo_dashboard.launch.hub_client import saved_token
from grpo_dashboard.launch.interface import SpacePolicy
from grpo_dashboard.launch.slurm.checks import CHECKS
from grpo_dashboard.launch.slurm.commands import (
    CANCEL_WAIT_S,
    JOB_INFO,
    POLL_S,
    STATE_FILE,
    UNREACHABLE,
    JobState,
    SlurmError,
    _add_slurms_word,
    _exit_code,
    _job_env,
    _killed_by_slurm,
    _recreate,
    _settle,
    _slurm,
    _write_json,
    equivalent_command,
    job_state,
    labelled_jobs,
    metrics_path,
)
from grpo_dashboard.launch.slurm.policy import SPACE_POLICY
from grpo_dashboard.launch.slurm.script import BATCH_SCRIPT, batch_files, batch_script
from grpo_dashboard.launch.slurm.text import job_summary, status_markdown
from grpo_dashboard.spec.run_spec import SLURM, RunSpec, world_size
from grpo_dashboard.store.db import TERMINAL, Run, RunStatus, Store
from grpo_dashboard.store.ingest import ingest_file


class SlurmBackend:
    """Runs jobs as Slurm batch jobs (the `Backend` protocol, launch/interface.py). Holds its cache of Slurm's
    answers (`_polled`), so many viewers of one run ask Slurm once per POLL_S."""

    KIND: ClassVar[str] = SLURM
    RESUMABLE: ClassVar[bool] = False
    SPACE: ClassVar[SpacePolicy] = SPACE_POLICY
    CHECKS: ClassVar[tuple[Check, ...]] = CHECKS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._polled: dict[str, tuple[float, JobState | None]] = {}

    def status_markdown(self, run: Run, store: Store | None = None) -> str:
        """Slurm's last answer about the job, its partition, nodes, processes and batch script."""
        return status_markdown(run)

    def checkpoints(self, run: Run, reported: dict[int, str]) -> dict[int, str]:
        """The checkpoints the job reported (they are where it saved them, not on this machine's disk)."""
        return reported

    def checkpoint_path(self, step: int, path: str) -> str:
        """Not resumable (RESUMABLE is False): the path as it is."""
        return path

    def resubmit_fields(self, store: Store, run: Run) -> dict[str, object]:
        """Not resumable (RESUMABLE is False): nothing."""
        return {}

    def command_preview(self, spec: RunSpec) -> tuple[str, str] | None:
        """The batch script of this spec, with placeholder run-directory paths."""
        run = Run(
            id="<run id>",
            name=spec.name,
            spec_yaml="",
            backend=self.KIND,
            status="queued",
            created_at=0.0,
            run_dir="<run_dir>",
        )
        return (
            "The batch script the Slurm backend writes as <run_dir>/job.sbatch and submits with `sbatch --parsable`:",
            batch_script(spec, run),
        )

    def probe(self) -> str | None:
        """Slurm's refusal when `squeue` does not answer (`reattach` itself finds nothing there, silently)."""
        try:
            labelled_jobs()
        except SlurmError as exc:
            return str(exc)
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """Forget Slurm's cached answers (nothing runs in the dashboard: Slurm keeps the jobs)."""
        with self._lock:
            self._polled.clear()

    def _cached_state(self, run: Run, max_age_s: float = POLL_S) -> JobState | None:
        """The job's state, asked of Slurm at most every `max_age_s` seconds per run (many viewers, one squeue)."""
        now = time.monotonic()
        with self._lock:
            hit = self._polled.get(run.id)
        if hit is not None and now - hit[0] < max_age_s:
            return hit[1]
        try:
            state = job_state(str(run.external_id))
        except SlurmError:
            with self._lock:  # not asked again for POLL_S: a controller that does not answer must not stall every pass
                self._polled[run.id] = (now, hit[1] if hit is not None else JobState(str(run.external_id), "UNKNOWN"))
            raise
        with self._lock:
            self._polled[run.id] = (now, state)
        if state is not None:
            _write_json(
                Path(run.run_dir) / STATE_FILE,
                {**asdict(state), "checked_at": time.time(), "summary": state.describe()},
            )
        return state

    def launch_token(self, token: str | None = None) -> str | None:
        """The token the job gets as HF_TOKEN: the launching user's, else the saved login (None: no token)."""
        return token or saved_token()

    def submit(self, store: Store, run: Run, spec: RunSpec, token: str | None, base_dir: Path | None = None) -> Run:
        """Write the batch script into the run directory and submit it; a refused submission is a failed run with
        Slurm's own refusal text."""
        run_dir = Path(run.run_dir)
        script = run_dir / BATCH_SCRIPT
        try:
            text, plan = batch_files(spec, run)
            if plan is not None:
                plan.write(run_dir / vllm_server.PLAN)
            script.write_text(text, encoding="utf-8")
            done = _slurm(["sbatch", "--parsable", str(script)], env=_job_env(spec, token))
        except (SlurmError, OSError) as exc:
            store.finish_run(run.id, RunStatus.FAILED, error=f"could not submit the Slurm job: {exc}")
            return store.get_run(run.id)
        job_id = done.stdout.strip().split(";")[0]
        info = {
            "job_id": job_id,
            "script": str(script),
            "command": equivalent_command(run),
            "nodes": spec.backend.nodes,
            "world_size": world_size(spec),
            "partition": spec.backend.partition,
            "submitted_at": time.time(),
        }
        _write_json(run_dir / JOB_INFO, info)
        store.update_run(run.id, external_id=job_id)
        return store.get_run(run.id)

    def refresh(self, store: Store, run: Run) -> Run:
        """Ingest new records and settle the run once Slurm says its job ended; never waits for Slurm more than one
        command's timeout, and asks it at most every POLL_S seconds."""
        if run.status in TERMINAL:
            return run
        ingest_file(store, run.id, metrics_path(run))
        run = store.get_run(run.id)
        if run.status == RunStatus.CANCELED.value and not run.cancel_requested_at and run.external_id:
            return _killed_by_slurm(store, run)
        if run.status in TERMINAL:
            return run
        if not run.external_id:
            run = self._find_by_label(store, run)
            if not run.external_id:
                return run
        try:
            state = self._cached_state(run)
        except SlurmError as exc:
            store.update_run(run.id, error=f"{UNREACHABLE} about job {run.external_id}: {exc}")
            return store.get_run(run.id)
        if run.error and run.error.startswith(UNREACHABLE):
            store.update_run(run.id, error=None)  # answered again
            run = store.get_run(run.id)
        if state is not None and not state.ended:
            return run
        ingest_file(store, run.id, metrics_path(run))  # what the job wrote before it ended
        run = store.get_run(run.id)
        if run.status in TERMINAL:
            return run
        _settle(store, run, state)
        return store.get_run(run.id)

    def _find_by_label(self, store: Store, run: Run) -> Run:
        """A submitted run without a job id (the dashboard stopped between sbatch and storing it): its job, found by
        its run label, asked of Slurm at most every POLL_S seconds."""
        if not (Path(run.run_dir) / BATCH_SCRIPT).exists():
            return run
        key = f"label:{run.id}"
        now = time.monotonic()
        with self._lock:
            hit = self._polled.get(key)
            if hit is not None and now - hit[0] < POLL_S:
                return run
            self._polled[key] = (now, None)
        try:
            job_id = labelled_jobs().get(run.id)
        except SlurmError:
            return run
        if job_id:
            store.update_run(run.id, external_id=job_id)
        return store.get_run(run.id)

    def reap(self, store: Store) -> None:
        """Nothing beyond the active runs: Slurm keeps the state of every job the store follows."""
        with self._lock:
            active = {r.id for r in store.list_runs(status=[RunStatus.QUEUED.value, RunStatus.RUNNING.value])}
            for key in [k for k in self._polled if k.removeprefix("label:") not in active]:
                self._polled.pop(key, None)

    def await_exit(self, store: Store, run: Run) -> Run:
        """After the run reported its end, wait (up to CANCEL_WAIT_S) until Slurm says the job has left its nodes."""
        if not run.external_id:
            return run
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            state = job_state(run.external_id)
            if state is None or state.ended:
                if state is not None and run.exit_code is None and _exit_code(state) is not None:
                    store.update_run(run.id, exit_code=_exit_code(state))
                _add_slurms_word(store, store.get_run(run.id))
                return store.get_run(run.id)
            time.sleep(0.5)
        return store.get_run(run.id)

    def cancel(
        self, store: Store, run: Run, wait: bool = False, token: str | None = None, grace_s: float | None = None
    ) -> Run:
        """`scancel` the job (Slurm sends SIGTERM to every step on every node, SIGKILL after its KillWait); with
        `wait`, return once the job has left Slurm's nodes and the run is settled, or after `grace_s` (default 60)
        seconds."""
        if run.status in TERMINAL:
            return run
        store.update_run(run.id, cancel_requested_at=time.time())
        if not run.external_id:
            store.finish_run(run.id, RunStatus.CANCELED, error="canceled by user before Slurm accepted the job")
            return store.get_run(run.id)
        try:
            _slurm(["scancel", run.external_id])
        except SlurmError as exc:
            store.update_run(run.id, error=f"scancel failed: {exc}")
            return store.get_run(run.id)
        if not wait:
            return store.get_run(run.id)
        deadline = time.monotonic() + (CANCEL_WAIT_S if grace_s is None else grace_s)
        while time.monotonic() < deadline:
            state = job_state(run.external_id)
            if state is None or state.ended:
                with self._lock:
                    self._polled.pop(run.id, None)
                run = self.refresh(store, store.get_run(run.id))
                if run.status not in TERMINAL:
                    _settle(store, run, state)
                return store.get_run(run.id)
            time.sleep(0.5)
        return self.refresh(store, store.get_run(run.id))

    def resume(self, store: Store, run: Run, token: str | None) -> bool:
        """Nothing to resume: `refresh` follows the job by its id in the store."""
        return False

    def reattach(
        self, store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None
    ) -> list[Run]:
        """After a restart: the jobs of runs whose job id never reached the store (the dashboard stopped between
        `sbatch` and recording it) are found by their run label, and runs missing from the store are recreated from
        their run directory; every other run is followed from the store by `refresh`."""
        try:
            jobs = labelled_jobs()
        except SlurmError:
            return []
        found: list[Run] = []
        for run_id, job_id in jobs.items():
            try:
                run = store.get_run(run_id)
            except Exception:  # RunNotFound: recreate it from its run directory when it is ours
                recreated = _recreate(store, run_id, owner)
                if recreated is None:
                    continue
                run = recreated
            if run.status in TERMINAL:
                continue
            if run.external_id != job_id:
                store.update_run(run.id, external_id=job_id)
            found.append(store.get_run(run.id))
        return found

    def job_summary(self, run: Run) -> str | None:
        """Where the job went and what Slurm last said (why it waits, where it runs), from the run directory."""
        return job_summary(run)
