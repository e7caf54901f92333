"""The `sbatch` options of a Slurm run, from its spec: one list shared by the batch script and the pre-flight check.

Every option is one argument (`--partition=gpu`), never a shell string; the batch script writes them as `#SBATCH`
lines and the check passes them to `sbatch --test-only` as an argument list.
"""

from __future__ import annotations

import re

from grpo_dashboard.spec.run_spec import RunSpec

# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
TIME = re.compile(r"^(\d+)$|^(\d+):(\d{1,2})$|^(\d+):(\d{1,2}):(\d{1,2})$|^(\d+)-(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def time_seconds(value: str | int | None) -> int | None:
    """Seconds of a Slurm time limit (None: unset or "UNLIMITED"); ValueError naming the formats for anything else."""
    if value is None:
        return None
    text = str(value).strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = TIME.match(text)
    if not m:
        raise ValueError(
            f"{text!r} is not a Slurm time: use minutes (30), MM:SS, HH:MM:SS (2:00:00) or D-HH:MM:SS (1-00:00:00)"
        )
    g = m.groups()
    if g[0] is not None:
        return int(g[0]) * 60
    if g[1] is not None:
        return int(g[1]) * 60 + int(g[2])
    if g[3] is not None:
        return int(g[3]) * 3600 + int(g[4]) * 60 + int(g[5])
    return int(g[6]) * 86400 + int(g[7]) * 3600 + int(g[8] or 0) * 60 + int(g[9] or 0)


def sbatch_options(spec: RunSpec, run_id: str | None = None) -> list[str]:
    """The job's sbatch options: resources from `backend`, plus its name and the run label when `run_id` is given."""
    b = spec.backend
    opts = [f"--nodes={b.nodes}", "--ntasks-per-node=1"]
    for name, value in (
        ("partition", b.partition),
        ("account", b.account),
        ("qos", b.qos),
        ("time", b.time),
        ("cpus-per-task", b.cpus_per_task),
        ("constraint", b.constraint),
    ):
        if value is not None and str(value) != "":
            opts.append(f"--{name}={value}")
    if b.gpus_per_node:
        opts.append(f"--gpus-per-node={b.gpus_per_node}")
    if run_id is not None:
        name = re.sub(r"[^\w.-]+", "-", spec.name).strip("-")[:100] or "run"
        opts += [f"--job-name=grpo-{name}", f"--comment=grpo-dashboard-run={run_id}"]
    extra = list(b.extra_sbatch or [])
    if not any(o.startswith("--requeue") for o in extra):
        # A requeued job starts training again from the start, appending to the same metrics stream.
        opts.append("--no-requeue")
    return [*opts, *extra]
