"""What a Hugging Face Jobs job of this dashboard gets: its files, its container-side spec, its command and labels.

The job script, its reward module, the container-side run spec and the run's local data / reward / accelerate files
(and the health package when the spec runs the health guard in the job) go to the bucket folder mounted at /data;
paths in the spec are rewritten to it; the model is written to /data/output, which stays in the bucket.
"""

from __future__ import annotations

import ast
import copy
import re
import shlex
from pathlib import Path

from grpo_dashboard.launch.hub_client import APP
from grpo_dashboard.spec import agent_spec
from grpo_dashboard.spec.job_deps import job_deps
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT, job_files
from grpo_dashboard.spec.run_spec import RunSpec

LABEL_APP, LABEL_RUN = "app", "grpo-dashboard-run"
MOUNT = "/data"
BUCKET_NAME = "jobs-artifacts"
JOB_TMP = "/tmp/grpo-dashboard"
JOB_METRICS = "/tmp/grpo_dashboard_metrics.jsonl"  # in an existing directory: the job does not create its parent
IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"


def script_dependencies(script: Path = JOB_SCRIPT) -> list[str]:
    """The PEP 723 `dependencies` of the job script (the single source of the job's requirements)."""
    match = re.search(r"^# /// script\s*$(.*?)^# ///\s*$", script.read_text(encoding="utf-8"), re.S | re.M)
    body = "\n".join(line.lstrip("#") for line in match.group(1).splitlines()) if match else ""
    deps = re.search(r"dependencies\s*=\s*(\[.*?\])", body, re.S)
    return [str(d) for d in ast.literal_eval(deps.group(1))] if deps else []


def container_spec(spec: RunSpec) -> tuple[RunSpec, dict[str, Path]]:
    """The run spec as the container sees it (paths under /data) and the local files to upload, by bucket name."""
    s = copy.deepcopy(spec)
    files: dict[str, Path] = {path.name: path for path in job_files()}
    if getattr(s.health, "in_job", False):  # the job imports the health package from beside its run.yaml
        from grpo_dashboard.health.ship import package_files

        files.update(package_files())

    def ship(local: str, folder: str) -> str:
        path = Path(local)
        name, i = f"{folder}/{path.name}", 1
        while name in files and files[name] != path:
            name, i = f"{folder}/{i}-{path.name}", i + 1
        files[name] = path
        return f"{MOUNT}/{name}"

    if s.model.build_tiny:
        s.model.name_or_path = f"{JOB_TMP}/tiny-model"
    d = s.dataset
    if d.data_files:
        d.data_files = (
            ship(d.data_files, "data") if isinstance(d.data_files, str) else [ship(f, "data") for f in d.data_files]
        )
    if d.eval_data_files:
        d.eval_data_files = (
            ship(d.eval_data_files, "data")
            if isinstance(d.eval_data_files, str)
            else [ship(f, "data") for f in d.eval_data_files]
        )
    for r in s.rewards:
        if r.function and ":" in r.function and r.function.rsplit(":", 1)[0].endswith(".py"):
            target, attr = r.function.rsplit(":", 1)
            r.function = f"{ship(target, 'rewards')}:{attr}"
    agent_spec.map_files(s.agent, lambda path: ship(path, "agent"))
    b = s.backend
    if b.accelerate_config:
        from grpo_dashboard.launch.local.job import accelerate_config_path

        b.accelerate_config = ship(accelerate_config_path(b.accelerate_config), "accelerate")
    s.output_dir = f"{MOUNT}/output"
    return s, files


def job_command(spec: RunSpec) -> list[str]:
    """The container command: `uv run` of the script (PEP 723), or `accelerate launch` for several processes."""
    t = spec.training
    extras = [e for e, on in (("peft", spec.model.lora is not None), ("vllm", bool(t.get("use_vllm")))) if on]
    args = [f"{MOUNT}/grpo_job.py", "--config", f"{MOUNT}/run.yaml", "--metrics", JOB_METRICS]
    trl = next((d for d in script_dependencies() if d.startswith("trl")), "trl>=1.16,<2")
    with_trl = [f"trl[{','.join(extras)}]{trl[3:]}"] if extras else []
    # What the spec turns on beyond the script's own dependencies (peft and vllm come as trl extras, pinned by it).
    own = {d.split(">")[0].split("<")[0].split("=")[0].strip() for d in script_dependencies()}
    with_trl += [d.pip for d in job_deps(spec) if d.pip not in ("peft", "vllm") and d.pip not in own]
    b = spec.backend
    if b.num_processes <= 1 and not b.accelerate_config:
        return ["uv", "run", *[x for d in with_trl for x in ("--with", d)], *args]
    deps = [d for d in script_dependencies() if not d.startswith("trl")] + (with_trl if extras else [trl, *with_trl])
    launch = ["accelerate", "launch", "--num_processes", str(b.num_processes)]
    if b.accelerate_config:
        launch += ["--config_file", b.accelerate_config]
    return ["uv", "run", *[x for d in deps for x in ("--with", d)], *launch, *args]


def labels(run_id: str) -> dict[str, str]:
    """The labels every job of this dashboard carries."""
    return {LABEL_APP: APP, LABEL_RUN: run_id}


def job_name(name: str) -> str:
    """The job's name (its `name` label): the spec's name in the characters the Hub allows."""
    return re.sub(r"[^a-zA-Z0-9_-]", "-", name)[:60] or "grpo-run"


def equivalent_command(spec: RunSpec, run_id: str, timeout_s: int) -> str:
    """The `hf jobs run` command line (huggingface_hub's CLI) that submits the same job as the dashboard: image,
    command, environment, secret names (values read from the environment), labels, name, timeout and the read-write
    bucket volume at /data. export-trl prints it after the upload of the job's files; a test runs it."""
    b = spec.backend
    inner, _ = container_spec(spec)
    volume = f"hf://buckets/{b.namespace}/{BUCKET_NAME}/{run_id}:{MOUNT}:rw"
    secrets = "".join(f" --secrets {shlex.quote(n)}" for n in ["HF_TOKEN", *b.secrets])
    env = "".join(f" --env {shlex.quote(f'{k}={v}')}" for k, v in job_env(spec).items())
    label_args = "".join(f" --label {shlex.quote(f'{k}={v}')}" for k, v in labels(run_id).items())
    return (
        f"hf jobs run --detach --namespace {shlex.quote(str(b.namespace))} --flavor {shlex.quote(str(b.flavor))} "
        f"--timeout {timeout_s}s --name {shlex.quote(job_name(spec.name))}{secrets}{env}{label_args} "
        f"-v {volume} {IMAGE} {shlex.join(job_command(inner))}"
    )


def job_env(spec: RunSpec) -> dict[str, str]:
    """The job's plain environment: unbuffered output, samples on stdout (they travel back), no GPU sampling of its
    own (the dashboard samples the Jobs metrics stream: one source per series), the spec's `env`."""
    return {
        "PYTHONUNBUFFERED": "1",
        "GRPO_JOB_SAMPLES_STDOUT": "1",
        "GRPO_JOB_SYSTEM_GPUS": "0",
        **{str(k): str(v) for k, v in spec.backend.env.items()},
    }


def job_secrets(spec: RunSpec, token: str, environ: dict[str, str]) -> dict[str, str]:
    """The job's secrets: the token as HF_TOKEN and each name in `backend.secrets` with its value from `environ`
    (the launching environment); ValueError naming the ones that are not set there."""
    missing = [n for n in spec.backend.secrets if not environ.get(n)]
    if missing:
        raise ValueError(
            f"backend.secrets names {', '.join(missing)}, which the launching environment does not "
            f"set; `export {missing[0]}=...` and launch again (the values are sent as job secrets and "
            "never stored)."
        )
    return {"HF_TOKEN": token, **{n: environ[n] for n in spec.backend.secrets}}
