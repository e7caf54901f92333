"""The light table of backend kinds: their order and each kind's `Options` (the `backend:` fields it reads).

The spec builds `BackendSpec` from it (the common fields plus the union of every kind's options), so a backend's
fields and their help live in its own package. It imports only the options modules, which import only the standard
library: importing it is cheap and pulls in no launch code (a contract in pyproject.toml keeps it so). The runner
classes are in the heavy table, backends.py, which lists the same kinds in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_dashboard.launch.hf_jobs import options as hf_jobs
from grpo_dashboard.launch.local import options as local
from grpo_dashboard.launch.slurm import options as slurm

LOCAL, HF_JOBS, SLURM = local.KIND, hf_jobs.KIND, slurm.KIND
# Every kind this dashboard runs, in display order, with the dataclass of the fields it reads.
OPTIONS: dict[str, type] = {LOCAL: local.Options, HF_JOBS: hf_jobs.Options, SLURM: slurm.Options}
KINDS: tuple[str, ...] = tuple(OPTIONS)

if TYPE_CHECKING:

    @dataclass
    class AllOptions(local.Options, hf_jobs.Options, slurm.Options):
        """For type checkers only: every kind's fields, typed (the spec assembles the same union at run time)."""
