"""Launching and supervising runs: orchestration (runs) and the backends (local, hf_jobs) as siblings."""
