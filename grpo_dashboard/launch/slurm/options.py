"""The Slurm backend's options: the `backend:` fields a batch job reads (help shown in form, CLI, docs).

Imports only the standard library: the spec assembles `BackendSpec` from these fields (see launch/kinds.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KIND = "slurm"  # this backend's `backend.kind`


@dataclass
class Options:
    """`slurm`: a batch job (`sbatch`) in `partition` under `account` / `qos`, with Slurm's `time` limit ("30"
    minutes, "2:00:00", "1-00:00:00"), on `nodes` nodes of `gpus_per_node` GPUs each (unset: CPU-only nodes, one
    process per node), `cpus_per_task` CPUs per node's launcher, a node `constraint`, and `extra_sbatch` options
    passed as they are (e.g. ["--exclusive", "--mem=0"]). One launcher per node; the world size is nodes × processes
    per node."""

    accelerate_config: str | None = field(
        default=None, metadata={"help": "TRL accelerate preset (zero2, fsdp2, ...) or a config file path."}
    )
    partition: str | None = field(
        default=None, metadata={"help": "slurm: the partition (sinfo lists them; empty: the cluster's default)."}
    )
    account: str | None = field(
        default=None, metadata={"help": "slurm: the account the job is charged to (sacctmgr show assoc user=$USER)."}
    )
    qos: str | None = field(
        default=None, metadata={"help": "slurm: the quality of service (empty: the account's default)."}
    )
    time: str | int | None = field(
        default=None,
        metadata={
            "help": "slurm: the job's time limit (30 = minutes, 2:00:00, 1-00:00:00); Slurm kills the job then."
        },
    )
    nodes: int = field(
        default=1,
        metadata={
            "help": "slurm: nodes to allocate; one launcher per node (with a generation section, the first serves)."
        },
    )
    gpus_per_node: int | None = field(
        default=None, metadata={"help": "slurm: GPUs per node, one training process each (empty: CPU-only nodes)."}
    )
    cpus_per_task: int | None = field(default=None, metadata={"help": "slurm: CPUs for each node's launcher."})
    constraint: str | None = field(
        default=None,
        metadata={"help": "slurm: node feature constraint, e.g. h100 (also names the GPU for the estimate)."},
    )
    extra_sbatch: list[str] | None = field(
        default=None, metadata={"help": "slurm: further sbatch options, comma-separated (e.g. --exclusive, --mem=0)."}
    )
