"""The Hub calls of a Hugging Face Jobs submission: retries with backoff, the job's secrets, timeout and volume,
and a job created at most once however the Hub answers. Stateless: the live state is the `HfJobsBackend`'s."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import BackendError
from grpo_dashboard.launch.hf_jobs.payload import BUCKET_NAME, LABEL_RUN, MOUNT, job_secrets
from grpo_dashboard.launch.hf_jobs.stream import http_status, retry_after_s, retry_text
from grpo_dashboard.launch.hub_client import describe_error, endpoint_url
from grpo_dashboard.settings import on_space
from grpo_dashboard.spec.run_spec import RunSpec

SUBMIT_ATTEMPTS = 3
RETRY_BASE_S = 1.0

log = logging.getLogger(__name__)


# --- errors and retries ---------------------------------------------------------------------------------------
def _network_error(exc: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(exc, (HfHubHTTPError, OfflineModeIsEnabled)):
        return False
    import httpx2

    return isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError))


def _retry_wait(exc: BaseException, attempt: int) -> float:
    """The pause before retry number attempt + 1: exponential backoff, or longer if the Hub asked (Retry-After)."""
    return max(RETRY_BASE_S * 2**attempt, retry_after_s(exc) or 0.0)


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


def create_bucket(api: Any, bucket: str, namespace: str) -> None:
    """Create the artifacts bucket (`_retry`); a 404 in a namespace the token's account has is a Hub without the
    Storage Buckets API (an older or private deployment), which the message says instead of "namespace not found"."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        _retry(
            lambda: api.create_bucket(bucket, private=True, exist_ok=True), "create the artifacts bucket", namespace
        )
    except BackendError as exc:
        cause = exc.__cause__
        if not (
            isinstance(cause, HfHubHTTPError) and cause.response is not None and cause.response.status_code == 404
        ):
            raise
        try:
            me = api.whoami()
        except Exception:
            raise exc from cause  # cannot tell: the namespace message stands
        names = {me.get("name"), *(o.get("name") for o in me.get("orgs") or [])}
        if namespace not in names:
            raise
        raise BackendError(
            f"This Hub ({api.endpoint}) has no Storage Buckets API: creating the bucket {bucket} answered 404, "
            f"though namespace {namespace!r} exists. The Jobs backend keeps each job's files and checkpoints in a "
            "bucket, so it needs a Hub with buckets (huggingface.co has them): point HF_ENDPOINT at one, or run "
            "on the local or Slurm backend."
        ) from cause


def _secrets(spec: RunSpec, token: str) -> dict[str, str]:
    """HF_TOKEN and the spec's named secrets from the launching environment (never a Space's: those are the
    owner's); BackendError naming what is missing."""
    if spec.backend.secrets and on_space():
        raise BackendError(
            f"backend.secrets ({', '.join(spec.backend.secrets)}) cannot be sent from a shared "
            "dashboard: its environment is the Space owner's. Launch from your own machine."
        )
    try:
        return job_secrets(spec, token, dict(os.environ))
    except ValueError as exc:
        raise BackendError(str(exc)) from exc


def job_timeout(
    spec: RunSpec, base_dir: Path | None = None, token: str | None = None, endpoint: str | None = None
) -> tuple[int, str]:
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
        jobs = _retry(
            lambda: list(api.list_jobs(labels={LABEL_RUN: run_id}, namespace=namespace)),
            "look up the submitted job",
            namespace,
            attempts=5,
        )
    except BackendError as exc:
        raise BackendError(
            f"{exc} The submission may have gone through: look for a job labelled "
            f"{LABEL_RUN}={run_id} at https://huggingface.co/jobs/{namespace} before launching "
            f"again."
        ) from exc
    return jobs[0] if jobs else None
