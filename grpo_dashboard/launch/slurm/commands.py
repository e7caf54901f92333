"""Talking to Slurm, statelessly: its commands (argument lists, never a shell), a job's state, the run label, and
what a job's end means for its run (canceled, or failed with Slurm's own state and reason). The `SlurmBackend`
(runner.py) keeps the one piece of live state, its cache of Slurm's answers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.launch.local.job import job_environment
from grpo_dashboard.launch.logs import last_error_line, log_path
from grpo_dashboard.launch.slurm.script import BATCH_SCRIPT
from grpo_dashboard.spec.run_spec import SLURM, RunSpec
from grpo_dashboard.store.db import Run, RunStatus, Store, data_dir

JOB_INFO = "slurm_job.json"
STATE_FILE = "slurm_state.json"
LABEL = "grpo-dashboard-run="
POLL_S = 2.0
UNREACHABLE = "Slurm could not be asked"
COMMAND_TIMEOUT_S = 30.0
CANCEL_WAIT_S = 60.0
# Slurm job states after which nothing of the job runs any more.
KILLED = frozenset({"TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
ENDED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
WHY_ENDED = {
    "TIMEOUT": "its time limit was reached",
    "PREEMPTED": "it was preempted",
    "NODE_FAIL": "a node failed",
    "OUT_OF_MEMORY": "it ran out of memory",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "its deadline passed",
    "CANCELLED": "it was cancelled outside the dashboard",
    "FAILED": "a step failed",
    "REVOKED": "it was revoked",
    "SPECIAL_EXIT": "it was held after a failure",
}


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


def _slurm(
    args: list[str], input_text: str | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command (an argument list); SlurmError with its own output when it fails and `check`."""
    try:
        done = subprocess.run(
            args, input=input_text, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env
        )
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
    done = _slurm(
        ["squeue", "--noheader", f"--jobs={job_id}", "--states=all", "--format=%i|%T|%r|%N|%l|%M"], check=False
    )
    _unknown_or_raise(done, "squeue")
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0] == job_id:
            return JobState(job_id, parts[1], parts[2], "", parts[3], parts[4], parts[5], "squeue")
    done = _slurm(["scontrol", "show", "job", "--oneliner", job_id], check=False)
    _unknown_or_raise(done, "scontrol show job")
    if done.returncode == 0 and "JobState=" in done.stdout:
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        return JobState(
            job_id,
            fields.get("JobState", "UNKNOWN"),
            fields.get("Reason", ""),
            fields.get("ExitCode", ""),
            fields.get("NodeList", ""),
            fields.get("TimeLimit", ""),
            fields.get("RunTime", ""),
            "scontrol",
        )
    try:
        done = _slurm(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "--allocations",
                f"--jobs={job_id}",
                "--format=JobID,State,ExitCode,NodeList,Timelimit,Elapsed",
            ],
            check=False,
        )
    except SlurmError:  # no sacct: accounting is not part of this installation
        return None
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0] == job_id:
            state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 0"
            return JobState(job_id, state, "", parts[2], parts[3], parts[4], parts[5], "sacct")
    return None


def equivalent_command(run: Run) -> str:
    """The command that submits the run's batch script again."""
    return shlex.join(["sbatch", str(Path(run.run_dir) / BATCH_SCRIPT)])


def labelled_jobs() -> dict[str, str]:
    """This user's Slurm jobs that carry a run label: {run id: job id}; SlurmError when Slurm does not answer."""
    done = _slurm(["squeue", "--noheader", "--me", "--format=%i|%k"])
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        job_id, _, comment = line.strip().partition("|")
        if comment.startswith(LABEL):
            out[comment[len(LABEL) :]] = job_id
    return out


def _job_env(spec: RunSpec, token: str | None) -> dict[str, str]:
    """The job's environment: the local job's allow-list (no dashboard secrets), plus what Slurm's commands need."""
    env = job_environment(spec, token)
    env.update({k: v for k, v in os.environ.items() if k == "SLURM_CONF" or k.startswith("SBATCH_")})
    return env


def metrics_path(run: Run) -> Path:
    """Where the job writes its records (on the shared filesystem)."""
    return Path(run.run_dir) / "metrics.jsonl"


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
        store.update_run(
            run.id, error=f"canceled outside the dashboard ({state.describe()}; scancel by a user or an administrator)"
        )
    return store.get_run(run.id)


def _reason(run: Run, state: JobState | None) -> str:
    """Why Slurm ended the job, in Slurm's words: state, reason, time limit, exit code, and its log line."""
    if state is None:
        reason = (
            f"Slurm no longer knows job {run.external_id} and the job never reported its end (accounting is "
            f"off, so sacct cannot say why)"
        )
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
    said = re.findall(
        r"^srun: error: (?:Node failure on|.*(?:CANCELLED|TIME LIMIT|PREEMPT|NODE FAIL)).*$", text, flags=re.MULTILINE
    )
    return said[-1].strip() if said else None


def _exit_code(state: JobState | None) -> int | None:
    if state is None or not state.exit_code:
        return None
    first = state.exit_code.split(":")[0]
    return int(first) if first.isdigit() else None


def _recreate(store: Store, run_id: str, owner: str | None) -> Run | None:
    run_dir = (data_dir() / "runs" / run_id).resolve()
    config = run_dir / "run.yaml"
    if not re.fullmatch(r"[\w.-]+", run_id) or not config.is_file():
        return None
    try:
        spec = RunSpec.from_yaml(config.read_text(encoding="utf-8"))
    except Exception:  # not a run this dashboard can read
        return None
    run = Run(
        id=run_id,
        name=spec.name,
        spec_yaml=spec.to_yaml(),
        backend=SLURM,
        status=RunStatus.QUEUED.value,
        created_at=config.stat().st_mtime,
        run_dir=str(run_dir),
        output_dir=spec.output_dir,
        owner=owner,
    )
    store.insert_run(run)
    return store.get_run(run_id)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
