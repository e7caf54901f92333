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
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import BackendError, RunNotFound
from grpo_dashboard.launch.hf_jobs_payload import (  # noqa: F401 - re-exported for callers and tests
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
    job_secrets,
    labels,
    script_dependencies,
)
from grpo_dashboard.launch.hf_jobs_stream import Follower, http_status, retry_after_s, retry_text
from grpo_dashboard.launch.hub_client import (  # re-exported for callers and tests
    describe_error,
    endpoint_url,
    make_api,
    require_token,
    saved_token,
)
from grpo_dashboard.settings import on_space
from grpo_dashboard.spec.run_spec import BackendSpec, RunSpec
from grpo_dashboard.store.db import ACTIVE, TERMINAL, Run, RunStatus, Store, data_dir

KIND = "hf_jobs"
JOB_INFO = "hf_job.json"
SUBMIT_ATTEMPTS = 3
RETRY_BASE_S = 1.0
CANCEL_WAIT_S = 60.0

log = logging.getLogger(__name__)
_lock = threading.Lock()
_followers: dict[str, Follower] = {}
_tokens: dict[str, str] = {}
_endpoints: dict[str, str] = {}


# --- errors and retries ---------------------------------------------------------------------------------------
def _network_error(exc: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(exc, (HfHubHTTPError, OfflineModeIsEnabled)):
        return False
    import httpx2

    return isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError))


def _retry_wait(exc: BaseException, attempt: int) -> float:
    """The pause before retry number attempt + 1: exponential backoff, or longer if the Hub asked (Retry-After)."""
    return max(RETRY_BASE_S * 2 ** attempt, retry_after_s(exc) or 0.0)


def _pause(exc: BaseException, action: str, attempt: int, attempts: int) -> None:
    """Say why a call is retried and when, then wait."""
    wait = _retry_wait(exc, attempt)
    log.warning("%s (attempt %d of %d)", retry_text(exc, f"trying to {action}", wait), attempt + 2, attempts)
    time.sleep(wait)


def _retry(call: Any, action: str, namespace: str, attempts: int = 4) -> Any:
    """Run an idempotent call, retrying timeouts, network errors and HTTP 429/5xx with backoff (Retry-After
    honoured); BackendError naming what failed otherwise, or once the attempts are spent."""
    from huggingface_hub.errors import HfHubHTTPError

    for attempt in range(attempts):
        try:
            return call()
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if (status != 429 and status < 500) or attempt == attempts - 1:
                raise BackendError(describe_error(exc, action, namespace, attempts=attempt + 1)) from exc
            _pause(exc, action, attempt, attempts)
        except Exception as exc:  # only network errors are retried
            if not _network_error(exc) or attempt == attempts - 1:
                raise BackendError(describe_error(exc, action, namespace, attempts=attempt + 1)) from exc
            _pause(exc, action, attempt, attempts)
    raise AssertionError("unreachable")


# --- submission -----------------------------------------------------------------------------------------------
def launch_token(token: str | None = None) -> str:
    """The token the job runs with (its HF_TOKEN secret): the launching user's, else the saved login; BackendError
    when there is none."""
    return require_token(token)


def submit(store: Store, run: Run, spec: RunSpec, token: str, base_dir: Path | None = None,
           endpoint: str | None = None) -> Run:
    """Upload the job's files and create the job; the run then follows it. A refused submission is a failed run."""
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
        _retry(lambda: api.create_bucket(bucket, private=True, exist_ok=True), "create the artifacts bucket", ns)
        add = [(str(path), f"{run.id}/{name}") for name, path in files.items()]
        _retry(lambda: api.batch_bucket_files(bucket, add=add), "upload the job's files", ns)
        command = job_command(inner)
        secrets = _secrets(spec, token)
        job = _create_job(api, ns, run.id, dict(
            image=IMAGE, command=command, env=job_env(spec), secrets=secrets,
            flavor=b.flavor, timeout=timeout_s, name=job_name(spec.name), labels=labels(run.id),
            volumes=[_volume(ns, run.id)], namespace=ns), b.flavor)
    except BackendError as exc:
        store.finish_run(run.id, RunStatus.FAILED, error=str(exc))
        return store.get_run(run.id)
    output = f"hf://buckets/{bucket}/{run.id}/output"
    details = {"job_id": job.id, "namespace": ns, "url": f"{endpoint_url(endpoint)}/jobs/{ns}/{job.id}",
               "flavor": b.flavor, "timeout_s": timeout_s, "timeout_reason": timeout_reason, "bucket": bucket,
               "bucket_folder": run.id, "output": output, "image": IMAGE, "command": command,
               "equivalent_command": equivalent_command(spec, run.id, timeout_s)}
    (run_dir / JOB_INFO).write_text(json.dumps(details, indent=2), encoding="utf-8")
    store.update_run(run.id, external_id=f"{ns}/{job.id}", output_dir=output)
    with _lock:
        _tokens[run.id] = token
        _endpoints[run.id] = endpoint_url(endpoint)
    return refresh(store, store.get_run(run.id))


def _secrets(spec: RunSpec, token: str) -> dict[str, str]:
    """HF_TOKEN and the spec's named secrets from the launching environment (never a Space's: those are the
    owner's); BackendError naming what is missing."""
    if spec.backend.secrets and on_space():
        raise BackendError(f"backend.secrets ({', '.join(spec.backend.secrets)}) cannot be sent from a shared "
                           "dashboard: its environment is the Space owner's. Launch from your own machine.")
    try:
        return job_secrets(spec, token, dict(os.environ))
    except ValueError as exc:
        raise BackendError(str(exc)) from exc


def job_timeout(spec: RunSpec, base_dir: Path | None = None, token: str | None = None,
                endpoint: str | None = None) -> tuple[int, str]:
    """The job's timeout in seconds and why: the spec's, else the estimated run time × buffer (hardware.py)."""
    from grpo_dashboard.checks import hardware

    given = hardware.parse_timeout(spec.backend.timeout)
    if given is not None:
        return given, "set in the spec"
    try:
        report = hardware.estimate_for_spec(spec, base_dir, token, endpoint_url(endpoint))
    except Exception as exc:  # an estimate must never block a launch
        return hardware.UNKNOWN_TIMEOUT_S, f"estimate failed ({type(exc).__name__}); default 2h"
    return report.timeout_s, report.timeout_reason


def _volume(namespace: str, run_id: str) -> Any:
    from huggingface_hub import Volume

    return Volume(type="bucket", source=f"{namespace}/{BUCKET_NAME}", mount_path=MOUNT, path=run_id, read_only=False)


def _create_job(api: Any, namespace: str, run_id: str, kwargs: dict[str, Any], flavor: str | None) -> Any:
    """POST the job at most once per attempt. A 429 is a refusal (nothing was created): wait and post again. After
    an ambiguous failure (timeout, dropped connection, 5xx) the job may exist: wait, then look for it by its run
    label and post again only if it is not there, so a slow or lost answer never launches the run twice."""
    from huggingface_hub.errors import HfHubHTTPError

    action = "submit the job"
    for attempt in range(SUBMIT_ATTEMPTS):
        try:
            return api.run_job(**kwargs)
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if status != 429 and status < 500:
                raise BackendError(describe_error(exc, action, namespace, flavor)) from exc
            last: BaseException = exc
        except Exception as exc:  # network errors: the job may or may not exist now
            if not _network_error(exc):
                raise BackendError(describe_error(exc, action, namespace, flavor)) from exc
            last = exc
        rejected = http_status(last) == 429
        if attempt < SUBMIT_ATTEMPTS - 1:
            _pause(last, action, attempt, SUBMIT_ATTEMPTS)
        if not rejected:
            existing = find_job(api, namespace, run_id)
            if existing is not None:
                log.warning("the job of run %s was created although its submission failed; following it", run_id)
                return existing
    raise BackendError(describe_error(last, action, namespace, flavor, attempts=SUBMIT_ATTEMPTS))


def find_job(api: Any, namespace: str, run_id: str) -> Any | None:
    """The job labelled with this run id, or None; BackendError if the Hub cannot be asked."""
    try:
        jobs = _retry(lambda: list(api.list_jobs(labels={LABEL_RUN: run_id}, namespace=namespace)),
                      "look up the submitted job", namespace, attempts=5)
    except BackendError as exc:
        raise BackendError(f"{exc} The submission may have gone through: look for a job labelled "
                           f"{LABEL_RUN}={run_id} at https://huggingface.co/jobs/{namespace} before launching "
                           f"again.") from exc
    return jobs[0] if jobs else None


# --- following ------------------------------------------------------------------------------------------------
def _split_external(run: Run) -> tuple[str, str] | None:
    if not run.external_id or "/" not in run.external_id:
        return None
    ns, job_id = run.external_id.split("/", 1)
    return ns, job_id


def follower(run_id: str) -> Follower | None:
    """The live follower of a run, if any."""
    with _lock:
        return _followers.get(run_id)


def ensure_following(store: Store, run: Run, token: str | None = None, endpoint: str | None = None
                     ) -> Follower | None:
    """Start the background follower of an active run unless one runs; never blocks on the network."""
    ids = _split_external(run)
    if ids is None or run.status in TERMINAL:
        return None
    with _lock:
        current = _followers.get(run.id)
        if current is not None and current.alive and current.store.path == store.path:
            return current
        if token:
            _tokens[run.id] = token
        if endpoint:
            _endpoints[run.id] = endpoint_url(endpoint)
        token = _tokens.get(run.id)
    if token is None:
        token = saved_token()
        if not token:
            return None
    with _lock:
        current = _followers.get(run.id)
        if current is not None and current.alive and current.store.path == store.path:
            return current
        if current is not None:
            current.stop()
        ns, job_id = ids
        api = make_api(token, _endpoints.get(run.id))
        f = Follower(store, run.id, ns, job_id, api, Path(run.run_dir), on_exit=_forget)
        _followers[run.id] = f
    return f.start()


def _forget(f: Follower) -> None:
    with _lock:
        if _followers.get(f.run_id) is f:
            del _followers[f.run_id]
            if f.state.phase == "done":
                _tokens.pop(f.run_id, None)
                _endpoints.pop(f.run_id, None)


def refresh(store: Store, run: Run, token: str | None = None, endpoint: str | None = None) -> Run:
    """Make sure an active run's job is being followed; returns the run as stored (never waits on the network)."""
    if run.status in ACTIVE:
        ensure_following(store, run, token, endpoint)
    return store.get_run(run.id)


def reap(store: Store) -> None:
    """Nothing to do: each run's follower settles the run itself when its job ends."""


def await_exit(store: Store, run: Run) -> Run:
    """The run as stored: its follower settled it after draining the job's log, so nothing is left to wait for."""
    return store.get_run(run.id)


def resume(store: Store, run: Run, token: str | None) -> bool:
    """Follow an active run again with the user's `token` unless it is followed already; True when started now."""
    if follower(run.id) is not None:
        return False
    return ensure_following(store, run, token=token) is not None


def stop_all(timeout: float = 5.0) -> None:
    """Stop every follower (app shutdown; tests simulating a dashboard restart)."""
    with _lock:
        followers = list(_followers.values())
        _followers.clear()
        _tokens.clear()
        _endpoints.clear()
    for f in followers:
        f.stop()
    for f in followers:
        f.stop(timeout)


# --- cancel and reattach --------------------------------------------------------------------------------------
def cancel(store: Store, run: Run, wait: bool = False, token: str | None = None, grace_s: float | None = None,
           endpoint: str | None = None) -> Run:
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
    with _lock:
        token = token or _tokens.get(run.id)
        endpoint = endpoint or _endpoints.get(run.id)
    api = make_api(require_token(token), endpoint)
    try:
        _retry(lambda: api.cancel_job(job_id=job_id, namespace=ns), "cancel the job", ns)
    except BackendError as exc:
        cause = exc.__cause__
        if isinstance(cause, HfHubHTTPError) and cause.response is not None and cause.response.status_code == 404:
            store.finish_run(run.id, RunStatus.CANCELED, error="canceled by user; the job was no longer found "
                             "on Hugging Face Jobs")
            return store.get_run(run.id)
        raise
    f = ensure_following(store, store.get_run(run.id), token, endpoint)
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
        if info is not None and str(getattr(info.status.stage, "value", info.status.stage)) in (
                "CANCELED", "COMPLETED", "ERROR", "DELETED") and f is not None:
            f.settle(info)
        time.sleep(0.2)
    return store.get_run(run.id)


def reattach(store: Store, token: str | None = None, namespace: str | None = None, owner: str | None = None,
             endpoint: str | None = None) -> list[Run]:
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
            run = _recover(store, job, ns, owner, endpoint)
        if run.backend != KIND:
            continue
        if run.external_id is None:  # the dashboard stopped between creating the job and recording it
            store.update_run(run.id, external_id=f"{ns}/{job.id}")
            run = store.get_run(run.id)
        if run.status in ACTIVE:
            ensure_following(store, run, token, endpoint)
        out.append(store.get_run(run.id))
    return out


def _recover(store: Store, job: Any, namespace: str, owner: str | None, endpoint: str | None) -> Run:
    run_id = job.labels[LABEL_RUN]
    run_dir = (data_dir() / "runs" / run_id).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    name = (job.labels or {}).get("name") or run_id
    spec = RunSpec(name=name, backend=BackendSpec(kind=KIND, flavor=job.flavor, namespace=namespace))
    note = (f"# Recovered from Hugging Face Jobs job {namespace}/{job.id}; the full spec is run.yaml in "
            f"hf://buckets/{namespace}/{BUCKET_NAME}/{run_id}/\n")
    created = job.created_at.timestamp() if job.created_at else time.time()
    store.insert_run(Run(id=run_id, name=name, spec_yaml=note + spec.to_yaml(), backend=KIND,
                         status=RunStatus.QUEUED.value, created_at=created, run_dir=str(run_dir),
                         external_id=f"{namespace}/{job.id}", owner=owner,
                         output_dir=f"hf://buckets/{namespace}/{BUCKET_NAME}/{run_id}/output"))
    details = {"job_id": job.id, "namespace": namespace, "url": f"{endpoint_url(endpoint)}/jobs/{namespace}/{job.id}",
               "flavor": job.flavor, "recovered": True}
    (run_dir / JOB_INFO).write_text(json.dumps(details, indent=2), encoding="utf-8")
    return store.get_run(run_id)


# --- for the UI -----------------------------------------------------------------------------------------------
def job_details(run: Run) -> dict[str, Any]:
    """What was submitted: job id, URL, flavor, timeout (and why), bucket folder, command ({} if not submitted)."""
    try:
        return json.loads((Path(run.run_dir) / JOB_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def job_summary(run: Run) -> str | None:
    """Where the run's job went: its URL, flavor, timeout (and why) and outputs; None before it was submitted."""
    from grpo_dashboard.checks.hardware import format_duration

    d = job_details(run)
    if not d:
        return None
    timeout = format_duration(d["timeout_s"]) if d.get("timeout_s") else "?"
    return (f"job {d.get('url', '?')} on {d.get('flavor', '?')}, timeout {timeout} ({d.get('timeout_reason', '')}); "
            f"outputs in {d.get('output', '?')}")


def follow_state(run_id: str) -> dict[str, Any] | None:
    """The live connection state of a run's follower (phase, stage, lines, reconnects, last error), or None."""
    f = follower(run_id)
    return f.state.to_dict() if f is not None else None
