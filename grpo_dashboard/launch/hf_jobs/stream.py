"""Following one Hugging Face Jobs job: its log stream into the store, its stage, and its system metrics.

One `Follower` per active job runs three daemon threads, so that no UI tick ever waits on the network:
- the reader iterates `fetch_job_logs(follow=True)`. The Hub replays the whole log on every connection, so the i-th
  line of the job's log is record number i: it is applied only when i equals the run's `ingest_offset` (the number
  of lines consumed), and the offset moves to i + 1 in the same transaction as the records. Any reconnect, by the
  client or by us after an error (backoff 1 s doubling to 30 s), skips the lines below the offset: nothing is lost
  or applied twice, across restarts too. Each consumed line is appended (token-redacted) to the run's job.log.
- the watcher polls the stage every few seconds (queued → running; a terminal stage settles the run, after the
  reader has drained the log or, if it is stuck, after a catch-up read of its own).
- the sampler follows the Jobs metrics stream (`fetch_job_metrics(follow=True)`: about one sample a second, no
  history) and stores one sample every GRPO_DASHBOARD_SYSTEM_INTERVAL_S (default 10) as the run's `system` series
  (`job_system_metrics`: the job's CPU % and RAM, each GPU's utilisation and memory), the series the System chart
  draws for every backend.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.launch.hub_client import hub_timeout, is_timeout
from grpo_dashboard.redaction import redact
from grpo_dashboard.spec.jobfiles import job_module
from grpo_dashboard.store.db import TERMINAL, RunStatus, Store
from grpo_dashboard.store.ingest import MARKER, apply_records, parse_line
from grpo_dashboard.store.series import SYSTEM_SPLIT

POLL_ENV = "GRPO_DASHBOARD_HF_POLL_S"
DEFAULT_POLL_S = 10.0
RETRY_AFTER_MAX_S = 120.0  # a Retry-After longer than this is capped (the wait is shown to the user)
MAX_BACKOFF_S = 30.0
SETTLE_GRACE_S = 20.0
DRAIN_RETRIES = 3  # re-reads of a replay that came back empty or short before the log is taken as complete
SYSTEM_INTERVAL_ENV = "GRPO_DASHBOARD_SYSTEM_INTERVAL_S"
DEFAULT_SYSTEM_INTERVAL_S = 10.0
_MARK = MARKER.strip()
SAMPLE_MARKER: str = job_module().grpo_job_setup.SAMPLE_MARKER  # a sample completion printed by a remote job


def poll_interval() -> float:
    """Seconds between stage polls (env GRPO_DASHBOARD_HF_POLL_S, read at call time; default 10)."""
    try:
        return max(0.05, float(os.environ.get(POLL_ENV) or DEFAULT_POLL_S))
    except ValueError:
        return DEFAULT_POLL_S


def system_interval() -> float:
    """Seconds between the system samples kept of a job (env GRPO_DASHBOARD_SYSTEM_INTERVAL_S; default 10)."""
    try:
        return max(0.0, float(os.environ.get(SYSTEM_INTERVAL_ENV) or DEFAULT_SYSTEM_INTERVAL_S))
    except ValueError:
        return DEFAULT_SYSTEM_INTERVAL_S


def job_system_metrics(sample: dict[str, Any]) -> dict[str, float]:
    """One Jobs metrics sample as `system/...` metrics: `cpu/utilization` (the job's cpu_usage_pct),
    `memory/used_gb|total_gb|pct` and, per GPU (numbered in the order of their ids), `gpu<i>/utilization`,
    `memory_used_gb`, `memory_total_gb` and `memory_pct`. Fields the sample lacks are left out."""
    out: dict[str, float] = {}

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def memory(prefix: str, used: Any, total: Any) -> None:
        used, total = num(used), num(total)
        if used is not None:
            out[prefix + "used_gb"] = used / 1e9
        if total:
            out[prefix + "total_gb"] = total / 1e9
            if used is not None:
                out[prefix + "pct"] = 100.0 * used / total

    if num(sample.get("cpu_usage_pct")) is not None:
        out["system/cpu/utilization"] = float(sample["cpu_usage_pct"])
    memory("system/memory/", sample.get("memory_used_bytes"), sample.get("memory_total_bytes"))
    raw_gpus = sample.get("gpus")
    gpus = raw_gpus if isinstance(raw_gpus, dict) else {}
    for i, gid in enumerate(sorted(gpus, key=str)):
        g = gpus[gid] if isinstance(gpus[gid], dict) else {}
        if num(g.get("utilization")) is not None:
            out[f"system/gpu{i}/utilization"] = float(g["utilization"])
        memory(f"system/gpu{i}/memory_", g.get("memory_used_bytes"), g.get("memory_total_bytes"))
    return out


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed Hub call, if it got an answer."""
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def retry_after_s(exc: BaseException) -> float | None:
    """The wait a 429/503 answer asks for (Retry-After seconds, or the `ratelimit` header's reset), capped."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    if value is None and http_status(exc) == 429:
        match = re.search(r";\s*t\s*=\s*(\d+)", headers.get("ratelimit") or "")
        value = match.group(1) if match else None
    try:
        wait = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return min(max(wait, 0.0), RETRY_AFTER_MAX_S) if wait == wait else None


def problem_text(exc: BaseException, action: str) -> str:
    """What went wrong with one Hub call, in words (no token): rate limit, timeout, HTTP status or network error."""
    status = http_status(exc)
    if status == 429:
        return f"rate limited by the Hub (HTTP 429) while {action}"
    if status is not None:
        return _http_error_text(exc) + f" while {action}"
    if is_timeout(exc):
        return f"the Hub did not answer within {hub_timeout():g} s while {action} ({type(exc).__name__})"
    return redact(f"{type(exc).__name__}: {exc}")[:300] + f" while {action}"


def retry_text(exc: BaseException, action: str, wait_s: float) -> str:
    """The status line while a call is retried: `rate limited by the Hub (HTTP 429) while ...; retrying in 2 s`."""
    return f"{problem_text(exc, action)}; retrying in {wait_s:.3g} s"


@dataclass
class FollowState:
    """What the dashboard can show about the connection to one job."""

    run_id: str
    phase: str = "starting"
    stage: str | None = None
    lines: int = 0
    reconnects: int = 0
    last_error: str | None = None
    updated: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


class _Gap(Exception):
    """The stream skipped lines we have not consumed: reconnect and read again from the start."""


class _Stopped(Exception):
    """The follower was asked to stop."""


class Follower:
    """Reader + watcher threads for one job; `settle` records its final status exactly once."""

    def __init__(
        self, store: Store, run_id: str, namespace: str, job_id: str, api: Any, run_dir: Path, on_exit: Any = None
    ) -> None:
        self.store, self.run_id, self.namespace, self.job_id = store, run_id, namespace, job_id
        self.api, self.run_dir = api, Path(run_dir)
        self.state = FollowState(run_id)
        self._on_exit = on_exit
        self._stop = threading.Event()
        self._drained = threading.Event()
        self._lock = threading.RLock()
        self._gaps = 0
        self._seen = 0
        self._threads: list[threading.Thread] = []

    # --- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> Follower:
        """Start the reader, the watcher and the system sampler."""
        for name, target in (("logs", self._logs_loop), ("stage", self._watch_loop), ("system", self._system_loop)):
            t = threading.Thread(target=self._guard, args=(target,), name=f"hf-jobs-{name}-{self.run_id}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def stop(self, timeout: float = 0.0) -> None:
        """Ask both threads to stop (a thread blocked in a read ends when its connection does)."""
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)

    @property
    def alive(self) -> bool:
        """True while either thread runs."""
        return any(t.is_alive() for t in self._threads) and not self._stop.is_set()

    def _guard(self, target: Any) -> None:
        try:
            target()
        except _Stopped:
            pass
        except Exception as exc:  # a bug must not kill the dashboard; it is shown in the state
            self.state.last_error = redact(f"{type(exc).__name__}: {exc}")
        finally:
            if not any(t.is_alive() for t in self._threads if t is not threading.current_thread()):
                self.state.phase = "stopped" if self.state.phase != "done" else "done"
                if self._on_exit is not None:
                    self._on_exit(self)

    # --- the log reader ---------------------------------------------------------------------------------------
    def _logs_loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                info = self.api.inspect_job(job_id=self.job_id, namespace=self.namespace)
                if _stage(info) in _TERMINAL_STAGES:
                    self.state.phase = "backfilling"
                    self.drain()
                else:
                    self.state.phase = "streaming"
                    self._consume(self.api.fetch_job_logs(job_id=self.job_id, namespace=self.namespace, follow=True))
                    self.state.phase = "catching up"
                    self.drain()
                    info = self.api.inspect_job(job_id=self.job_id, namespace=self.namespace)
                if _stage(info) in _TERMINAL_STAGES:
                    self._drained.set()
                    self.settle(info)
                    return
                if self._stop.wait(1.0):  # the stream ended before the job did: follow again
                    return
                continue
            except _Gap:
                continue
            except (_Stopped, KeyboardInterrupt):
                return
            except Exception as exc:  # HTTP and network errors of any kind: back off and reconnect
                wait = max(backoff, retry_after_s(exc) or 0.0)
                self.state.last_error = retry_text(exc, "following the job's logs", wait)
            self.state.reconnects += 1
            self.state.phase = "reconnecting"
            if self._stop.wait(wait):
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _consume(self, lines: Any) -> int:
        applied, self._seen = 0, 0
        for index, line in enumerate(lines):
            if self._stop.is_set():
                raise _Stopped
            applied += self.ingest_line(index, line)
            self._seen = index + 1
        return applied

    def drain(self) -> None:
        """Read the replayed log (no follow) until a read brings nothing new.

        huggingface_hub ends a replay read silently when the Hub is slow to answer (its 5 s wait), so a read that
        brings no line at all, or stops before the lines already consumed, is not the end: it is read again, up to
        DRAIN_RETRIES times, before the log is taken as complete."""
        short = 0
        while True:
            if self._consume(self.api.fetch_job_logs(job_id=self.job_id, namespace=self.namespace)):
                short = 0
                continue
            if self._seen and self._seen >= self.store.get_run(self.run_id).ingest_offset:
                return
            short += 1
            if short > DRAIN_RETRIES:
                return
            self.state.last_error = (
                f"the Hub's replay of the job's log ended early (read {self._seen} lines); reading it again"
            )
            if self._stop.wait(min(MAX_BACKOFF_S, 2.0**short)):
                raise _Stopped

    def ingest_line(self, index: int, line: str) -> bool:
        """Apply log line number `index` if it is the next one to consume; returns True when it was applied."""
        with self._lock:
            with self.store.transaction() as conn:
                run = self.store.get_run(self.run_id)  # this thread's connection: read inside the transaction
                if index < run.ingest_offset:
                    return False
                skipped = run.n_skipped
                if index > run.ingest_offset:
                    self._gaps += 1
                    if self._gaps <= 2:
                        raise _Gap
                    skipped += index - run.ingest_offset  # the log really lacks those lines: count them as lost
                pos = line.find(_MARK)
                record = parse_line(line[pos:]) if pos >= 0 else None
                if pos >= 0 and record is None:
                    skipped += 1
                if record is not None:
                    apply_records(conn, self.run_id, [(index, record)])
                self.store.update_run(self.run_id, conn=conn, ingest_offset=index + 1, n_skipped=skipped)
            self.state.lines = index + 1
            self.state.updated = time.time()
            sample = line.find(SAMPLE_MARKER)
            target, text = ("samples.jsonl", line[sample + len(SAMPLE_MARKER) :]) if sample >= 0 else ("job.log", line)
            try:
                with open(self.run_dir / target, "a", encoding="utf-8") as f:
                    f.write(redact(text).rstrip("\n") + "\n")
            except OSError:
                pass
            return True

    # --- the stage watcher ------------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                info = self.api.inspect_job(job_id=self.job_id, namespace=self.namespace)
                stage = _stage(info)
                self.state.stage = stage
                failures = 0
                if stage == "RUNNING":
                    self._mark_running(info)
                elif stage in _TERMINAL_STAGES:
                    if not self._drained.wait(SETTLE_GRACE_S) and not self._stop.is_set():
                        self.state.phase = "catching up"
                        self.drain()
                        self.settle(info)
                    return
            except _Stopped:
                return
            except _Gap:
                failures += 1
            except Exception as exc:  # HTTP and network errors (429 and timeouts too): poll again later
                failures += 1
                wait = max(_poll_wait(failures), retry_after_s(exc) or 0.0)
                self.state.last_error = retry_text(exc, "checking the job's status", wait)
                self._stop.wait(wait)
                continue
            self._stop.wait(_poll_wait(failures))

    def _mark_running(self, info: Any) -> None:
        started = info.started_at.timestamp() if getattr(info, "started_at", None) else time.time()
        with self._lock, self.store.transaction() as conn:
            run = self.store.get_run(self.run_id)
            if run.status == RunStatus.QUEUED:
                self.store.update_run(
                    self.run_id, conn=conn, status=RunStatus.RUNNING, started_at=run.started_at or started
                )

    # --- the system sampler -----------------------------------------------------------------------------------
    def _system_loop(self) -> None:
        """Follow the metrics stream until the job ends, keeping one sample per system_interval() seconds."""
        kept_at = 0.0
        failures = 0
        while not self._stop.is_set() and self.state.stage not in _TERMINAL_STAGES:
            try:
                for sample in self.api.fetch_job_metrics(job_id=self.job_id, namespace=self.namespace, follow=True):
                    if self._stop.is_set():
                        return
                    now = time.time()
                    if isinstance(sample, dict) and now - kept_at >= system_interval():
                        kept_at = now if self.store_system_sample(sample, now) else kept_at
                    failures = 0
            except Exception:  # the metrics are optional: the log and the stage go on without them
                failures += 1
            if self._stop.wait(_poll_wait(failures)):
                return

    def store_system_sample(self, sample: dict[str, Any], now: float) -> bool:
        """Store one Jobs metrics sample as the run's `system` series at `now` (stepped by ms); True if stored."""
        metrics = job_system_metrics(sample)
        if not metrics:
            return False
        step = int(now * 1000)
        record = {"type": "log", "split": SYSTEM_SPLIT, "step": step, "time": now, "metrics": metrics}
        with self.store.transaction() as conn:
            apply_records(conn, self.run_id, [(step, record)])
        return True

    # --- the end ----------------------------------------------------------------------------------------------
    def settle(self, info: Any) -> None:
        """Record the job's terminal stage as the run's final status (a no-op if the run already ended)."""
        with self._lock:
            run = self.store.get_run(self.run_id)
            self.state.stage = _stage(info)
            self.state.phase = "done"
            if run.status in TERMINAL:
                self._stop.set()
                return
            stage = _stage(info)
            message = redact(getattr(info.status, "message", None)) or None
            if stage == "COMPLETED":
                self.store.finish_run(self.run_id, RunStatus.COMPLETED)
            elif stage == "CANCELED":
                who = "canceled by user" if run.cancel_requested_at else "canceled on Hugging Face Jobs"
                self.store.finish_run(self.run_id, RunStatus.CANCELED, error=who)
            else:
                self.store.finish_run(self.run_id, RunStatus.FAILED, error=failure_text(stage, message, self))
            self._stop.set()

    def last_log_line(self) -> str | None:
        """The most informative last line of the job's log (exception line, else last line)."""
        from grpo_dashboard.launch.logs import last_error_line

        return last_error_line(self.run_dir / "job.log")


_TERMINAL_STAGES = ("COMPLETED", "CANCELED", "ERROR", "DELETED")


def _poll_wait(failures: int) -> float:
    """Seconds until the next stage poll: the poll interval, doubled per consecutive failure (at most ×8, 60 s)."""
    return min(MAX_BACKOFF_S * 2, poll_interval() * (2 ** min(failures, 3)))


def _stage(info: Any) -> str:
    stage = info.status.stage
    return str(getattr(stage, "value", stage))


def failure_text(stage: str, message: str | None, follower: Follower | None = None) -> str:
    """A clear error for a job that ended in ERROR/DELETED: the Hub's message, a timeout hint, the last log line."""
    if stage == "DELETED":
        return "the job was deleted on Hugging Face Jobs"
    text = f"Hugging Face Jobs: the job failed ({message})" if message else "Hugging Face Jobs: the job failed"
    if message and re.search(r"time ?out|timed out|deadline", message, re.I):
        text += ". It ran out of time: raise backend.timeout (or leave it unset to use the estimated run time)"
    last = follower.last_log_line() if follower is not None else None
    if last:
        text += f". Last log line: {last}"
    return redact(text)


def _http_error_text(exc: Any) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    hint = {
        401: " (token rejected: sign in again)",
        403: " (not allowed for this token)",
        404: " (job not found: deleted, or the token belongs to another account)",
    }.get(status or 0, "")
    return redact(f"HTTP {status}{hint}: {getattr(exc, 'server_message', None) or exc}")[:500]
