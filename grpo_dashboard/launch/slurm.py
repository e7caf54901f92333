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

import json
import os
import re
import shlex
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.launch import vllm_server
from grpo_dashboard.launch.hub_client import saved_token
from grpo_dashboard.launch.local import job_environment
from grpo_dashboard.launch.logs import last_error_line, log_path
from grpo_dashboard.launch.slurm_script import (  # noqa: F401 - re-exported for callers and tests
    BATCH_SCRIPT,
    batch_files,
    batch_script,
    launcher_command,
    shell_line,
)
from grpo_dashboard.spec.run_spec import SLURM, RunSpec, world_size
from grpo_dashboard.store.db import TERMINAL, Run, RunStatus, Store, data_dir
from grpo_dashboard.store.ingest import ingest_file

KIND = SLURM
JOB_INFO = "slurm_job.json"
STATE_FILE = "slurm_state.json"
LABEL = "grpo-dashboard-run="
POLL_S = 2.0
UNREACHABLE = "Slurm could not be asked"
COMMAND_TIMEOUT_S = 30.0
CANCEL_WAIT_S = 60.0
# Slurm job states after which nothing of the job runs any more.
KILLED = frozenset({"TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})
WHY_ENDED = {"TIMEOUT": "its time limit was reached", "PREEMPTED": "it was preempted", "NODE_FAIL": "a node failed",
             "OUT_OF_MEMORY": "it ran out of memory", "BOOT_FAIL": "a node failed to boot",
             "DEADLINE": "its deadline passed", "CANCELLED": "it was cancelled outside the dashboard",
             "FAILED": "a step failed", "REVOKED": "it was revoked", "SPECIAL_EXIT": "it was held after a failure"}
_lock = threading.Lock()
_polled: dict[str, tuple[float, JobState | None]] = {}


class SlurmError(RuntimeError):
    """A Slurm command failed; the message holds the command and Slurm's own text."""


@dataclass
class JobState:
    """What Slurm says about one job."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: str = ""
    nodes: str = ""
    time_limit: str = ""
    elapsed: str = ""
    source: str = "squeue"

    @property
    def ended(self) -> bool:
        """True when nothing of the job runs any more."""
        return self.state in ENDED

    def describe(self) -> str:
        """One line: state, and why it waits or ended."""
        text = f"Slurm job {self.job_id}: {self.state}"
        if self.state == "PENDING" and self.reason and self.reason != "None":
            text = f"Slurm job {self.job_id}: Pending: {self.reason}"
        elif self.reason and self.reason != "None":
            text += f" (reason {self.reason})"
        if self.nodes and self.state != "PENDING":
            text += f" on {self.nodes}"
        if self.time_limit:
            text += f", time limit {self.time_limit}"
        return text


# --- talking to Slurm -----------------------------------------------------------------------------------------
def _slurm(args: list[str], input_text: str | None = None, env: dict[str, str] | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command (an argument list); SlurmError with its own output when it fails and `check`."""
    try:
        done = subprocess.run(args, input=input_text, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              env=env)
    except FileNotFoundError as exc:
        raise SlurmError(f"{args[0]} is not on PATH: run the dashboard on a login node of the cluster") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{shlex.join(args)} did not answer within {COMMAND_TIMEOUT_S:.0f} s") from exc
    if check and done.returncode != 0:
        text = " ".join(line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip())
        raise SlurmError(f"{args[0]} refused (exit {done.returncode}): {text or 'no message'}")
    return done


def _unknown_or_raise(done: subprocess.CompletedProcess[str], what: str) -> None:
    """Nothing to do when Slurm answered (or said it does not know the job); SlurmError when it did not answer, so
    a busy controller never makes a live job look vanished."""
    text = (done.stderr or done.stdout).strip()
    if done.returncode != 0 and "Invalid job id" not in text:
        raise SlurmError(f"{what} failed (exit {done.returncode}): {text or 'no message'}")


def job_state(job_id: str) -> JobState | None:
    """The job's state from squeue, else `scontrol show job`, else sacct; None when Slurm no longer knows it.
    SlurmError when the controller does not answer."""
    done = _slurm(["squeue", "--noheader", f"--jobs={job_id}", "--states=all", "--format=%i|%T|%r|%N|%l|%M"],
                  check=False)
    _unknown_or_raise(done, "squeue")
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0] == job_id:
            return JobState(job_id, parts[1], parts[2], "", parts[3], parts[4], parts[5], "squeue")
    done = _slurm(["scontrol", "show", "job", "--oneliner", job_id], check=False)
    _unknown_or_raise(done, "scontrol show job")
    if done.returncode == 0 and "JobState=" in done.stdout:
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        return JobState(job_id, fields.get("JobState", "UNKNOWN"), fields.get("Reason", ""),
                        fields.get("ExitCode", ""), fields.get("NodeList", ""), fields.get("TimeLimit", ""),
                        fields.get("RunTime", ""), "scontrol")
    try:
        done = _slurm(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
                       "--format=JobID,State,ExitCode,NodeList,Timelimit,Elapsed"], check=False)
    except SlurmError:  # no sacct: accounting is not part of this installation
        return None
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0] == job_id:
            state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 0"
            return JobState(job_id, state, "", parts[2], parts[3], parts[4], parts[5], "sacct")
    return None


def _cached_state(run: Run, max_age_s: float = POLL_S) -> JobState | None:
    """The job's state, asked of Slurm at most every `max_age_s` seconds per run (many viewers, one squeue)."""
    now = time.monotonic()
    with _lock:
        hit = _polled.get(run.id)
    if hit is not None and now - hit[0] < max_age_s:
        return hit[1]
    try:
        state = job_state(str(run.external_id))
    except SlurmError:
        with _lock:  # not asked again for POLL_S: a controller that does not answer must not stall every pass
            _polled[run.id] = (now, hit[1] if hit is not None else JobState(str(run.external_id), "UNKNOWN"))
        raise
    with _lock:
        _polled[run.id] = (now, state)
    if state is not None:
        _write_json(Path(run.run_dir) / STATE_FILE, {**asdict(state), "checked_at": time.time(),
                                                       "summary": state.describe()})
    return state


def equivalent_command(run: Run) -> str:
    """The command that submits the run's batch script again."""
    return shlex.join(["sbatch", str(Path(run.run_dir) / BATCH_SCRIPT)])


# --- the backend interface (launch/__init__.py) ---------------------------------------------------------------
def launch_token(token: str | None = None) -> str | None:
    """The token the job gets as HF_TOKEN: the launching user's, else the saved login (None: no token)."""
    return token or saved_token()


def _job_env(spec: RunSpec, token: str | None) -> dict[str, str]:
    """The job's environment: the local job's allow-list (no dashboard secrets), plus what Slurm's commands need."""
    env = job_environment(spec, token)
    env.update({k: v for k, v in os.environ.items() if k == "SLURM_CONF" or k.startswith("SBATCH_")})
    return env


def submit(store: Store, run: Run, spec: RunSpec, token: str | None, base_dir: Path | None = None) -> Run:
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
    info = {"job_id": job_id, "script": str(script), "command": equivalent_command(run), "nodes": spec.backend.nodes,
            "world_size": world_size(spec), "partition": spec.backend.partition, "submitted_at": time.time()}
    _write_json(run_dir / JOB_INFO, info)
    store.update_run(run.id, external_id=job_id)
    return store.get_run(run.id)


def metrics_path(run: Run) -> Path:
    """Where the job writes its records (on the shared filesystem)."""
    return Path(run.run_dir) / "metrics.jsonl"


def refresh(store: Store, run: Run) -> Run:
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
        run = _find_by_label(store, run)
        if not run.external_id:
            return run
    try:
        state = _cached_state(run)
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


def _find_by_label(store: Store, run: Run) -> Run:
    """A submitted run without a job id (the dashboard stopped between sbatch and storing it): its job, found by
    its run label, asked of Slurm at most every POLL_S seconds."""
    if not (Path(run.run_dir) / BATCH_SCRIPT).exists():
        return run
    key = f"label:{run.id}"
    now = time.monotonic()
    with _lock:
        hit = _polled.get(key)
        if hit is not None and now - hit[0] < POLL_S:
            return run
        _polled[key] = (now, None)
    try:
        job_id = labelled_jobs().get(run.id)
    except SlurmError:
        return run
    if job_id:
        store.update_run(run.id, external_id=job_id)
    return store.get_run(run.id)


def _killed_by_slurm(store: Store, run: Run) -> Run:
    """A job that stopped on a SIGTERM nobody here sent: Slurm's own kill (time limit, preemption, node failure)
    is a failed run with Slurm's reason, not a cancellation. Slurm sets the job's state before it signals."""
    try:
        state = job_state(str(run.external_id))
    except SlurmError:
        return run
    if state is None:
        return run
    if state.state in KILLED or (state.state == "COMPLETING" and state.reason not in ("", "None")):
        store.update_run(run.id, status=RunStatus.FAILED.value, error=_reason(run, state))
    elif state.state in ("CANCELLED", "COMPLETING"):
        store.update_run(run.id, error=f"canceled outside the dashboard ({state.describe()}; scancel by a user or "
                                       f"an administrator)")
    return store.get_run(run.id)


def _reason(run: Run, state: JobState | None) -> str:
    """Why Slurm ended the job, in Slurm's words: state, reason, time limit, exit code, and its log line."""
    if state is None:
        reason = (f"Slurm no longer knows job {run.external_id} and the job never reported its end (accounting is "
                  f"off, so sacct cannot say why)")
    else:
        shown = "TIMEOUT" if state.reason == "TimeLimit" and state.state == "COMPLETING" else state.state
        why = WHY_ENDED.get(shown, "")
        reason = f"Slurm ended job {state.job_id}: {shown}" + (f" ({why})" if why else "")
        if state.reason and state.reason not in ("None", ""):
            reason += f", reason {state.reason}"
        if state.time_limit and shown == "TIMEOUT":
            reason += f", time limit {state.time_limit}"
        if state.exit_code and state.exit_code != "0:0":
            reason += f", exit code {state.exit_code}"
    said = _slurm_said(log_path(run))
    last = last_error_line(log_path(run))
    if said:
        reason += f". Slurm: {said}"
    elif last:
        reason += f". Last log line: {last}"
    return reason


def _settle(store: Store, run: Run, state: JobState | None) -> None:
    """The job ended without reporting its end: a canceled or failed run, with Slurm's state and reason."""
    code = _exit_code(state)
    if run.cancel_requested_at:
        store.finish_run(run.id, RunStatus.CANCELED, error="canceled by user (scancel)", exit_code=code)
        return
    store.finish_run(run.id, RunStatus.FAILED, error=_reason(run, state), exit_code=code)


def _add_slurms_word(store: Store, run: Run) -> None:
    """A run Slurm killed that settled before slurmstepd wrote its `*** JOB ... ***` line (or srun its error): the
    line, once it is in the log, replaces the last log line, or srun's line, in the error."""
    said = _slurm_said(log_path(run))
    error = run.error or ""
    if run.status != RunStatus.FAILED.value or not said or not error.startswith("Slurm ended job") or said in error:
        return
    head = error.split(". Last log line: ")[0].split(". Slurm: ")[0]
    store.update_run(run.id, error=f"{head}. Slurm: {said}")


def _slurm_said(path: Path) -> str | None:
    """Slurm's own last word in the job log (`*** JOB 12 ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***`)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[-65536:]
    except OSError:
        return None
    found = re.findall(r"\*\*\* (?:JOB|STEP) [^*]+\*\*\*", text)
    if found:
        return found[-1]
    # srun's own report of what Slurm did to the step; it comes before srun's "Job step aborted: waiting ..."
    # line, which says nothing about why.
    said = re.findall(r"^srun: error: (?:Node failure on|.*(?:CANCELLED|TIME LIMIT|PREEMPT|NODE FAIL)).*$", text,
                      flags=re.MULTILINE)
    return said[-1].strip() if said else None


def _exit_code(state: JobState | None) -> int | None:
    if state is None or not state.exit_code:
        return None
    first = state.exit_code.split(":")[0]
    return int(first) if first.isdigit() else None


def reap(store: Store) -> None:
    """Nothing beyond the active runs: Slurm keeps the state of every job the store follows."""
    with _lock:
        active = {r.id for r in store.list_runs(status=[RunStatus.QUEUED.value, RunStatus.RUNNING.value])}
        for key in [k for k in _polled if k.removeprefix("label:") not in active]:
            _polled.pop(key, None)


def await_exit(store: Store, run: Run) -> Run:
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


def cancel(store: Store, run: Run, wait: bool = False, token: str | None = None, grace_s: float | None = None
           ) -> Run:
    """`scancel` the job (Slurm sends SIGTERM to every step on every node, SIGKILL after its KillWait); with `wait`,
    return once the job has left Slurm's nodes and the run is settled, or after `grace_s` (default 60) seconds."""
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
            with _lock:
                _polled.pop(run.id, None)
            run = refresh(store, store.get_run(run.id))
            if run.status not in TERMINAL:
                _settle(store, run, state)
            return store.get_run(run.id)
        time.sleep(0.5)
    return refresh(store, store.get_run(run.id))


def resume(store: Store, run: Run, token: str | None) -> bool:
    """Nothing to resume: `refresh` follows the job by its id in the store."""
    return False


def labelled_jobs() -> dict[str, str]:
    """This user's Slurm jobs that carry a run label: {run id: job id}; SlurmError when Slurm does not answer."""
    done = _slurm(["squeue", "--noheader", "--me", "--format=%i|%k"])
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        job_id, _, comment = line.strip().partition("|")
        if comment.startswith(LABEL):
            out[comment[len(LABEL):]] = job_id
    return out


def reattach(store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None
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


def _recreate(store: Store, run_id: str, owner: str | None) -> Run | None:
    run_dir = (data_dir() / "runs" / run_id).resolve()
    config = run_dir / "run.yaml"
    if not re.fullmatch(r"[\w.-]+", run_id) or not config.is_file():
        return None
    try:
        spec = RunSpec.from_yaml(config.read_text(encoding="utf-8"))
    except Exception:  # not a run this dashboard can read
        return None
    run = Run(id=run_id, name=spec.name, spec_yaml=spec.to_yaml(), backend=KIND, status=RunStatus.QUEUED.value,
              created_at=config.stat().st_mtime, run_dir=str(run_dir), output_dir=spec.output_dir, owner=owner)
    store.insert_run(run)
    return store.get_run(run_id)


def job_summary(run: Run) -> str | None:
    """Where the job went and what Slurm last said (why it waits, where it runs), from the run directory."""
    info = _read_json(Path(run.run_dir) / JOB_INFO)
    if not info:
        return None
    state = _read_json(Path(run.run_dir) / STATE_FILE)
    where = f"partition {info['partition']}, " if info.get("partition") else ""
    text = (state or {}).get("summary") or f"Slurm job {info['job_id']}"
    return f"{text} ({where}{info.get('nodes', 1)} node(s), {info.get('world_size', 1)} process(es)); " \
           f"script {info.get('script')}"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
