"""The Hugging Face Jobs backend: one unit. `options` (its `backend:` fields and their help; `KIND`), `payload` (what
a job gets: files, container spec, command, labels), `hub_calls` (retried Hub calls of a submission), `stream` (one
job's `Follower`), `text` (what the dashboard says about a job), `runner` (`HfJobsBackend`, the `Backend` protocol
with its followers and in-memory tokens) and `export` (`export-trl`: the same job without the dashboard; imported on
its own, as it uses the orchestration).

Importing the package imports nothing: the spec reads `options` (through launch/kinds.py) before any launch code
exists, so callers import the submodule they use.
"""
