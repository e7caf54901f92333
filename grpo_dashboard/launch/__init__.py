"""Launching and supervising runs: orchestration (`runs`) over backends that all provide one interface.

`runs` finds a run's backend module by its `backend.kind` in the table `backends.BACKENDS` (`backend_for(kind)`), the
only place a kind picks code. Each backend module (`local`, `hf_jobs`, `slurm`) provides:

- `KIND`: the `backend.kind` it runs.
- `launch_token(token=None)`: the Hugging Face token a launch uses, the user's `token` else the saved login;
  BackendError when the backend needs one and there is none. Called before anything is written.
- `submit(store, run, spec, token, base_dir=None)`: start the job of `run` (in the store as queued, its run.yaml
  written) for its resolved `spec`; `base_dir` resolves the spec's relative paths. A refused start is a failed
  run, never an exception. Returns the run.
- `refresh(store, run)`: ingest what the job reported and settle the run if the job ended; never blocks.
- `reap(store)`: settle what the backend tracks beyond the active runs (local: exit codes of ended jobs); called
  before each pass over the active runs.
- `await_exit(store, run)`: after the run reached a terminal status, wait a moment for its job to exit.
- `cancel(store, run, wait=False, token=None, grace_s=None)`: ask the job to stop, with the user's own `token`
  where the backend needs one; with `wait`, return once it is settled or after `grace_s` (None: the backend's own
  default) seconds.
- `resume(store, run, token)`: after a restart, follow an active run again with the user's token; True when
  following started now.
- `reattach(store, token=None, namespace=None, owner=None)`: after a restart, find this dashboard's runs on the
  backend (recreating ones missing from the store for `owner`) and follow them again; returns them.
- `job_summary(run)`: one line saying where the run's job went (URL, hardware, timeout), or None.

A backend may add keyword parameters with defaults (hf_jobs: `endpoint=`). Beside them: `logs` (a job's log, for
every backend), `local_process` (process identity), `hub_client`, `hf_jobs_payload` and `hf_jobs_stream`, and
`vllm_server` (the job-side supervisor of vLLM server mode, used by local and slurm).
"""
