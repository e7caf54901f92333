"""A run spec as a folder and `hf` commands that run it on Hugging Face Jobs without the dashboard (`export-trl`).

The folder holds exactly what the dashboard uploads for the spec (the job script and its modules, the container-side
run.yaml, the run's local data / reward / accelerate files: `container_spec`), and the commands are the ones the
dashboard's own submission amounts to, in the installed `huggingface_hub` CLI: create the artifacts bucket, sync the
folder into the run's bucket folder, then `hf jobs run` the uv image with the same command, environment, secret names,
labels, timeout and read-write volume at /data. The model lands in the bucket folder's `output/`; the dashboard's
`reattach` finds the job by its labels.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_dashboard.launch.hf_jobs.payload import BUCKET_NAME, container_spec, equivalent_command
from grpo_dashboard.spec.run_spec import HF_JOBS, RunSpec

PLACEHOLDER_NAMESPACE = "YOUR_NAMESPACE"
DEFAULT_FLAVOR = "a10g-small"


@dataclass
class JobExport:
    """The folder written, the bucket folder it goes to, and the commands in order (name -> command line)."""

    folder: Path
    bucket_folder: str
    commands: dict[str, str]
    problems: list[str]  # what validation refuses: the dashboard would not launch the spec as it is


def folder_name(spec: RunSpec) -> str:
    """The bucket folder (and run label) of an exported job: the spec's name, as a path segment."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.name).strip("-.") or "grpo-run"


def jobs_spec(spec: RunSpec) -> RunSpec:
    """The spec with an HF Jobs backend: as it is when it has one, else its flavor/namespace or placeholders."""
    s = copy.deepcopy(spec)
    if s.backend.kind != HF_JOBS:
        s.backend.kind = HF_JOBS
    s.backend.flavor = s.backend.flavor or DEFAULT_FLAVOR
    s.backend.namespace = s.backend.namespace or PLACEHOLDER_NAMESPACE
    return s


def write_job_folder(spec: RunSpec, folder: Path) -> dict[str, Path]:
    """Write the files the dashboard uploads for `spec` into `folder` (emptied first); returns them by name."""
    inner, files = container_spec(spec)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    written: dict[str, Path] = {}
    for name, source in files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written[name] = target
    (folder / "run.yaml").write_text(inner.to_job_yaml(), encoding="utf-8")
    written["run.yaml"] = folder / "run.yaml"
    return written


# (spec, base dir) -> (the spec as a launch would run it, its validation report)
Prepare = Callable[[RunSpec, Path], tuple[RunSpec, Any]]


def export_job(
    spec: RunSpec, folder: Path, write: bool = True, base_dir: Path | None = None, *, prepare: Prepare
) -> JobExport:
    """The job folder of `spec` (written when `write`) and the `hf` commands that upload it and run the job.

    The spec goes through what `launch` does first: `prepare(spec, base)` is `launch.runs.prepare` (validation,
    which normalises the training values, and the paths made absolute against `base_dir`, default the current
    directory), passed in by the caller so this package never imports the orchestration above it.
    """
    from grpo_dashboard.launch.hf_jobs.hub_calls import job_timeout

    base = Path(base_dir) if base_dir else Path.cwd()
    s, report = prepare(jobs_spec(spec), base)
    b = s.backend
    run = folder_name(s)
    problems = [str(e) for e in report.errors]
    if write and not problems:  # a refused spec may name files that are not there: nothing half-written
        write_job_folder(s, folder)
    timeout_s, _ = job_timeout(s, base)
    bucket = f"{b.namespace}/{BUCKET_NAME}"
    return JobExport(
        folder,
        run,
        {
            "bucket": f"hf buckets create {bucket} --private --exist-ok",
            "upload": f"hf buckets sync {shlex.quote(str(folder))} hf://buckets/{bucket}/{run}",
            "hf_jobs": equivalent_command(s, run, timeout_s),
        },
        problems,
    )
