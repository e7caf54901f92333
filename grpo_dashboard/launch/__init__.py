"""Launching and supervising runs: orchestration (`runs`) over backends that all implement one interface.

Each backend is one package: `local/`, `hf_jobs/`, `slurm/`, each with its runner class implementing the
`Backend` protocol (`interface.py`, which lists the methods and their contracts) and holding its live state.
`backends.py` is the table: the one place a `backend.kind` picks code, and the `Backends` holder of one instance of
each (the app's, or the process's `backends.shared()`). Beside them: `logs` (a job's log, for every backend),
`hub_client` (whose token, which endpoint, the Hub client every backend and the Space use), `resume` and
`vllm_server` (the job-side supervisor of vLLM server mode, used by local and slurm).
"""
