"""The local backend's options: the `backend:` fields a run on this machine reads (help shown in form, CLI, docs).

Imports only the standard library: the spec assembles `BackendSpec` from these fields (see launch/kinds.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KIND = "local"  # this backend's `backend.kind`


@dataclass
class Options:
    """`local`: this machine, optionally on chosen GPUs and several processes; a job silent (no log line, no record)
    for `stall_timeout_s` is killed and marked failed (null: never)."""

    gpus: list[int] | None = field(
        default=None, metadata={"help": "GPU indices to use, comma-separated (sets CUDA_VISIBLE_DEVICES)."}
    )
    num_processes: int = field(default=1, metadata={"help": "Processes (one per GPU) started by accelerate."})
    accelerate_config: str | None = field(
        default=None, metadata={"help": "TRL accelerate preset (zero2, fsdp2, ...) or a config file path."}
    )
    stall_timeout_s: float | None = field(
        default=1800.0,
        metadata={"help": "local: kill a job silent for this many seconds and mark it failed (empty: never)."},
    )
