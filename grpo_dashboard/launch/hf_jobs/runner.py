"""Hugging Face Jobs backend: submit a run as a job, follow it into the store, cancel it, find it after a restart.

Delivery (what `run_uv_job` does for local scripts, made explicit so several files travel together): the job script,
its reward module, the container-side run spec and the run's local data / reward / accelerate files are uploaded to
the private bucket `{namespace}/jobs-artifacts` under `<run id>/`, which the job mounts read-write at /data. The job
runs `uv run /data/grpo_job.py --config /data/run.yaml` in the uv image (PEP 723 dependencies) with
PYTHONUNBUFFERED=1, writes its model to /data/output (kept in the bucket) and prints the line protocol on stdout.
Every job carries the labels `app=grpo-dashboard` and `grpo-dashboard-run=<run id>`.

The token travels only as the job's HF_TOKEN secret and in the Authorization header; it is kept in memory per run,
never in the spec, store, files or messages (`redact`). Every call passes `namespace=` (no whoami round trips).
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from grpo_dashboard.checks.named import Check
from grpo_dashboard.errors import BackendError, RunNotFound
from grpo_dashboard.launch.hf_jobs.checks import CHECKS
from grpo_dashboard.launch.hf_jobs.hub_calls import _create_job, _retry, _secrets, _volume, create_bucket, job_timeout
from grpo_dashboard.launch.hf_jobs.payload import (
    APP,
    BUCKET_NAME,
    IMAGE,
    LABEL_APP,
    LABEL_RUN,
    MOUNT,
    container_spec,
    equivalent_command,
    job_command,
    job_env,
    job_name,
    labels,
)
from grpo_dashboard.launch.hf_jobs.policy import SPACE_POLICY
from grpo_dashboard.launch.hf_jobs.stream import Follower
from grpo_dashboard.launch.hf_jobs.text import JOB_INFO, job_summary, status_markdown
from grpo_dashboard.launch.hub_client import endpoint_url, make_api, require_token, saved_token
from grpo_dashboard.launch.interface import SpacePolicy
from grpo_dashboard.spec.run_spec import HF_JOBS, BackendSpec, RunSpec
from grpo_dashboard.store.db import ACTIVE, TERMINAL, Run, RunStatus, Store, data_dir

KIND = HF_JOBS
CANCEL_WAIT_S = 60.0


def _split_external(run: Run) -> tuple[str, str] | None:
    if not run.external_id or "/" not in run.external_id:
        return None
    ns, job_id = run.external_id.split("/", 1)
    return ns, job_id


# --- for the UI -----------------------------------------------------------------------------------------------
class HfJobsBackend:
    """Runs jobs on Hugging Face Jobs (the `Backend` protocol, launch/interface.py). Holds its live state: one
    follower per followed job, and each run's token and endpoint in memory (never stored) for its follower and its
    cancellation."""

    KIND: ClassVar[str] = HF_JOBS
    RESUMABLE: ClassVar[bool] = True
    SPACE: ClassVar[SpacePolicy] = SPACE_POLICY
    CHECKS: ClassVar[tuple[Check, ...]] = CHECKS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followers: dict[str, Follower] = {}
        self._tokens: dict[str, str] = {}
        self._endpoints: dict[str, str] = {}

    # --- submission -----------------------------------------------------------------------------------------------
    def launch_token(self, token: str | None = None) -> str:
        """The token the job runs with (its HF_TOKEN secret): the launching user's, else the saved login; BackendError
        when there is none."""
        return require_token(token)

    def submit(
        self,
        store: Store,
        run: Run,
        spec: RunSpec,
        token: str | None,
        base_dir: Path | None = None,
        endpoint: str | None = None,
    ) -> Run:
        """Upload the job's files and create the job; the run then follows it. A refused submission is a failed run.
        `token` is what `launch_token` returned (never None for this backend)."""
        assert token is not None, "HF Jobs submits with the token launch_token returned"
        b: BackendSpec = spec.backend
        ns = str(b.namespace)
        run_dir = Path(run.run_dir)
        try:
            timeout_s, timeout_reason = job_timeout(spec, base_dir, token, endpoint)
            inner, files = container_spec(spec)
            job_dir = run_dir / "job"
            job_dir.mkdir(exist_ok=True)
            (job_dir / "run.yaml").write_text(inner.to_job_yaml(), encoding="utf-8")
            files["run.yaml"] = job_dir / "run.yaml"
            api = make_api(token, endpoint)
            bucket = f"{ns}/{BUCKET_NAME}"
            create_bucket(api, bucket, ns)
            add = [(str(path), f"{run.id}/{name}") for name, path in files.items()]
            _retry(lambda: api.batch_bucket_files(bucket, add=add), "upload the job's files", ns)
            command = job_command(inner)
            secrets = _secrets(spec, token)
            job = _create_job(
                api,
                ns,
                run.id,
                dict(
                    image=IMAGE,
                    command=command,
                    env=job_env(spec),
                    secrets=secrets,
                    flavor=b.flavor,
                    timeout=timeout_s,
                    name=job_name(spec.name),
                    labels=labels(run.id),
                    volumes=[_volume(ns, run.id)],
                    namespace=ns,
                ),
                b.flavor,
            )
        except BackendError as exc:
            store.finish_run(run.id, RunStatus.FAILED, error=str(exc))
            return store.get_run(run.id)
        output = f"hf://buckets/{bucket}/{run.id}/output"
        details = {
            "job_id": job.id,
            "namespace": ns,
            "url": f"{endpoint_url(endpoint)}/jobs/{ns}/{job.id}",
            "flavor": b.flavor,
            "timeout_s": timeout_s,
            "timeout_reason": timeout_reason,
            "bucket": bucket,
            "bucket_folder": run.id,
            "output": output,
            "image": IMAGE,
            "command": command,
            "equivalent_command": equivalent_command(spec, run.id, timeout_s),
        }
        (run_dir / JOB_INFO).write_text(json.dumps(details, indent=2), encoding="utf-8")
        store.update_run(run.id, external_id=f"{ns}/{job.id}", output_dir=output)
        with self._lock:
            self._tokens[run.id] = token
            self._endpoints[run.id] = endpoint_url(endpoint)
        return self.refresh(store, store.get_run(run.id))

    def follower(self, run_id: str) -> Follower | None:
        """The live follower of a run, if any."""
        with self._lock:
            return self._followers.get(run_id)

    def ensure_following(
        self, store: Store, run: Run, token: str | None = None, endpoint: str | None = None
    ) -> Follower | None:
        """Start the background follower of an active run unless one runs; never blocks on the network."""
        ids = _split_external(run)
        if ids is None or run.status in TERMINAL:
            return None
        with self._lock:
            current = self._followers.get(run.id)
            if current is not None and current.alive and current.store.path == store.path:
                return current
            if token:
                self._tokens[run.id] = token
            if endpoint:
                self._endpoints[run.id] = endpoint_url(endpoint)
            token = self._tokens.get(run.id)
        if token is None:
            token = saved_token()
            if not token:
                return None
        with self._lock:
            current = self._followers.get(run.id)
            if current is not None and current.alive and current.store.path == store.path:
                return current
            if current is not None:
                current.stop()
            ns, job_id = ids
            api = make_api(token, self._endpoints.get(run.id))
            f = Follower(store, run.id, ns, job_id, api, Path(run.run_dir), on_exit=self._forget)
            self._followers[run.id] = f
        return f.start()

    def _forget(self, f: Follower) -> None:
        with self._lock:
            if self._followers.get(f.run_id) is f:
                del self._followers[f.run_id]
                if f.state.phase == "done":
                    self._tokens.pop(f.run_id, None)
                    self._endpoints.pop(f.run_id, None)

    def refresh(self, store: Store, run: Run, token: str | None = None, endpoint: str | None = None) -> Run:
        """Make sure an active run's job is being followed; returns the run as stored (never waits on the network)."""
        if run.status in ACTIVE:
            self.ensure_following(store, run, token, endpoint)
        return store.get_run(run.id)

    def reap(self, store: Store) -> None:
        """Nothing to do: each run's follower settles the run itself when its job ends."""

    def await_exit(self, store: Store, run: Run) -> Run:
        """The run as stored: its follower settled it after draining the job's log, so nothing is left to wait for."""
        return store.get_run(run.id)

    def resume(self, store: Store, run: Run, token: str | None) -> bool:
        """Follow an active run again with the user's `token` unless it is followed already; True when started now."""
        if self.follower(run.id) is not None:
            return False
        return self.ensure_following(store, run, token=token) is not None

    def status_markdown(self, run: Run, store: Store | None = None) -> str:
        """The job, its log follower's state and, with `store`, the job's hardware now (hf_jobs/text.py)."""
        return status_markdown(run, store, self.follow_state(run.id))

    def checkpoints(self, run: Run, reported: dict[int, str]) -> dict[int, str]:
        """The checkpoints the job reported (they are where it saved them, not on this machine's disk)."""
        return reported

    def checkpoint_path(self, step: int, path: str) -> str:
        """The checkpoint in the run's bucket folder, which the new job mounts at /data again."""
        return f"{MOUNT}/output/checkpoint-{step}"

    def resubmit_fields(self, store: Store, run: Run) -> dict[str, object]:
        """A new job, whose log is read from its first line: the events are shifted, the offset and job id reset."""
        store.shift_events(run.id)
        return {"ingest_offset": 0, "external_id": None}

    def command_preview(self, spec: RunSpec) -> tuple[str, str] | None:
        """The command the job's container runs for this spec (paths in its /data volume)."""
        inner, _ = container_spec(spec)
        return "What the Jobs container runs (paths inside its /data volume):", shlex.join(job_command(inner))

    def probe(self) -> str | None:
        """None: whether the Hub answers shows in the call itself (a BackendError naming what failed)."""
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every follower (app shutdown; tests simulating a dashboard restart)."""
        with self._lock:
            followers = list(self._followers.values())
            self._followers.clear()
            self._tokens.clear()
            self._endpoints.clear()
        for f in followers:
            f.stop()
        for f in followers:
            f.stop(timeout)

    # --- cancel and reattach --------------------------------------------------------------------------------------
    def cancel(
        self,
        store: Store,
        run: Run,
        wait: bool = False,
        token: str | None = None,
        grace_s: float | None = None,
        endpoint: str | None = None,
    ) -> Run:
        """Cancel the run's job with `token` (default: the launching token, else the saved login); with `wait`, return
        once the job has stopped and the run is settled, or after `grace_s` (default CANCEL_WAIT_S) seconds."""
        from huggingface_hub.errors import HfHubHTTPError

        if run.status in TERMINAL:
            return run
        store.update_run(run.id, cancel_requested_at=time.time())
        ids = _split_external(run)
        if ids is None:
            store.finish_run(run.id, RunStatus.CANCELED, error="canceled by user before the job was created")
            return store.get_run(run.id)
        ns, job_id = ids
        with self._lock:
            token = token or self._tokens.get(run.id)
            endpoint = endpoint or self._endpoints.get(run.id)
        api = make_api(require_token(token), endpoint)
        try:
            _retry(lambda: api.cancel_job(job_id=job_id, namespace=ns), "cancel the job", ns)
        except BackendError as exc:
            cause = exc.__cause__
            if isinstance(cause, HfHubHTTPError) and cause.response is not None and cause.response.status_code == 404:
                store.finish_run(
                    run.id,
                    RunStatus.CANCELED,
                    error="canceled by user; the job was no longer found on Hugging Face Jobs",
                )
                return store.get_run(run.id)
            raise
        f = self.ensure_following(store, store.get_run(run.id), token, endpoint)
        if not wait:
            return store.get_run(run.id)
        deadline = time.monotonic() + (CANCEL_WAIT_S if grace_s is None else grace_s)
        while time.monotonic() < deadline:
            current = store.get_run(run.id)
            if current.status in TERMINAL:
                return current
            try:
                info = api.inspect_job(job_id=job_id, namespace=ns)
            except Exception:  # keep waiting; the follower settles it too
                info = None
            if (
                info is not None
                and str(getattr(info.status.stage, "value", info.status.stage))
                in ("CANCELED", "COMPLETED", "ERROR", "DELETED")
                and f is not None
            ):
                f.settle(info)
            time.sleep(0.2)
        return store.get_run(run.id)

    def reattach(
        self,
        store: Store,
        token: str | None = None,
        namespace: str | None = None,
        owner: str | None = None,
        endpoint: str | None = None,
    ) -> list[Run]:
        """After a restart: list this dashboard's jobs in `namespace`, re-follow live ones, backfill finished ones.

        Runs missing from the store (another machine, a lost database) are recreated from the job's labels.
        """
        token = require_token(token)
        api = make_api(token, endpoint)
        if not namespace:
            namespace = _retry(lambda: api.whoami()["name"], "find your username", "?")
        ns = str(namespace)
        jobs = _retry(lambda: list(api.list_jobs(labels={LABEL_APP: APP}, namespace=ns)), "list your jobs", ns)
        out: list[Run] = []
        for job in jobs:
            run_id = (job.labels or {}).get(LABEL_RUN)
            if not run_id:
                continue
            try:
                run = store.get_run(run_id)
            except RunNotFound:
                run = self._recover(store, job, ns, owner, endpoint)
            if run.backend != KIND:
                continue
            if run.external_id is None:  # the dashboard stopped between creating the job and recording it
                store.update_run(run.id, external_id=f"{ns}/{job.id}")
                run = store.get_run(run.id)
            if run.status in ACTIVE:
                self.ensure_following(store, run, token, endpoint)
            out.append(store.get_run(run.id))
        return out

    def _recover(self, store: Store, job: Any, namespace: str, owner: str | None, endpoint: str | None) -> Run:
        run_id = job.labels[LABEL_RUN]
        run_dir = (data_dir() / "runs" / run_id).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        name = (job.labels or {}).get("name") or run_id
        spec = RunSpec(name=name, backend=BackendSpec(kind=KIND, flavor=job.flavor, namespace=namespace))
        note = (
            f"# Recovered from Hugging Face Jobs job {namespace}/{job.id}; the full spec is run.yaml in "
            f"hf://buckets/{namespace}/{BUCKET_NAME}/{run_id}/\n"
        )
        created = job.created_at.timestamp() if job.created_at else time.time()
        store.insert_run(
            Run(
                id=run_id,
                name=name,
                spec_yaml=note + spec.to_yaml(),
                backend=KIND,
                status=RunStatus.QUEUED.value,
                created_at=created,
                run_dir=str(run_dir),
                external_id=f"{namespace}/{job.id}",
                owner=owner,
                output_dir=f"hf://buckets/{namespace}/{BUCKET_NAME}/{run_id}/output",
            )
        )
        details = {
            "job_id": job.id,
            "namespace": namespace,
            "url": f"{endpoint_url(endpoint)}/jobs/{namespace}/{job.id}",
            "flavor": job.flavor,
            "recovered": True,
        }
        (run_dir / JOB_INFO).write_text(json.dumps(details, indent=2), encoding="utf-8")
        return store.get_run(run_id)

    def follow_state(self, run_id: str) -> dict[str, Any] | None:
        """The live connection state of a run's follower (phase, stage, lines, reconnects, last error), or None."""
        f = self.follower(run_id)
        return f.state.to_dict() if f is not None else None

    def job_summary(self, run: Run) -> str | None:
        """Where the run's job went: its URL, flavor, timeout (and why) and outputs; None before it was submitted."""
        return job_summary(run)
