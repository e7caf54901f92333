"""The local backend: one unit. `options` (its `backend:` fields and their help; `KIND`), `job` (command line,
environment, start), `process` (process identity), `runner` (`LocalBackend`, the `Backend` protocol with the
processes it started).

Importing the package imports nothing: the spec reads `options` (through launch/kinds.py) before any launch code
exists, so callers import the submodule they use.
"""
