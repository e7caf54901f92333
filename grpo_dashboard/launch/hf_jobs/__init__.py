"""The Hugging Face Jobs backend: one unit. `payload` (what a job gets: files, container spec, command, labels),
`hub_calls` (retried Hub calls of a submission), `stream` (one job's `Follower`), `text` (what the dashboard says
about a job), `runner` (`HfJobsBackend`, the `Backend` protocol with its followers and in-memory tokens) and `export`
(`export-trl`: the same job without the dashboard; imported on its own, as it uses the orchestration)."""

from grpo_dashboard.launch.hf_jobs.hub_calls import SUBMIT_ATTEMPTS, find_job, job_timeout
from grpo_dashboard.launch.hf_jobs.payload import (
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
from grpo_dashboard.launch.hf_jobs.runner import CANCEL_WAIT_S, HfJobsBackend
from grpo_dashboard.launch.hf_jobs.text import JOB_INFO, job_details, job_summary
from grpo_dashboard.launch.hub_client import APP, describe_error, endpoint_url, make_api, require_token, saved_token
from grpo_dashboard.spec.run_spec import HF_JOBS as KIND

__all__ = [
    "APP", "BUCKET_NAME", "CANCEL_WAIT_S", "IMAGE", "JOB_INFO", "KIND", "LABEL_APP", "LABEL_RUN", "MOUNT",
    "SUBMIT_ATTEMPTS", "HfJobsBackend", "container_spec", "describe_error", "endpoint_url", "equivalent_command",
    "find_job", "job_command", "job_details", "job_env", "job_name", "job_secrets", "job_summary", "job_timeout",
    "labels", "make_api", "require_token", "saved_token", "script_dependencies",
]
