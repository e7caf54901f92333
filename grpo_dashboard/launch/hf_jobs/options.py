"""The Hugging Face Jobs backend's options: the `backend:` fields a Jobs run reads (help shown in form, CLI, docs).

Imports only the standard library: the spec assembles `BackendSpec` from these fields (see launch/kinds.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KIND = "hf_jobs"  # this backend's `backend.kind`


@dataclass
class Options:
    """`hf_jobs`: a Hugging Face Jobs container of `flavor` in `namespace`, killed after `timeout` ("90m", "2h",
    seconds; unset: the estimated run time × 1.5, see hardware.py). The token is never part of the spec."""

    num_processes: int = field(default=1, metadata={"help": "Processes (one per GPU) started by accelerate."})
    accelerate_config: str | None = field(
        default=None, metadata={"help": "TRL accelerate preset (zero2, fsdp2, ...) or a config file path."}
    )
    flavor: str | None = field(
        default=None, metadata={"help": "hf_jobs: the Hugging Face Jobs hardware flavor (e.g. a10g-large, h200)."}
    )
    timeout: str | int | None = field(
        default=None,
        metadata={"help": "hf_jobs: kill the job after this long (90m, 2h or seconds); empty: estimated time × 1.5."},
    )
    namespace: str | None = field(
        default=None, metadata={"help": "hf_jobs: user or organisation the job runs under (empty: you)."}
    )
