"""The Slurm backend: one unit. `options` (its `backend:` fields and their help; `KIND`), `script` (the batch
script, pure), `commands` (talking to Slurm, statelessly), `text` (what the dashboard says about a job), `runner`
(`SlurmBackend`, the `Backend` protocol with its cache of Slurm's answers).

Importing the package imports nothing: the spec reads `options` (through launch/kinds.py) before any launch code
exists, so callers import the submodule they use.
"""
