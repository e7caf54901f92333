"""`export-trl`'s Hugging Face Jobs commands run the job without the dashboard: the printed `hf` commands (the
installed huggingface_hub CLI, for real) against the fake Hub upload the job folder and submit a job that trains, and
that job is the one the dashboard itself submits for the same spec."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_dashboard.launch.hf_jobs import text as hf_jobs_text
from grpo_dashboard.launch.runs import launch
from grpo_dashboard.store.db import Store

from .conftest import REPO, wait_for
from .fake_hub import FakeHub, Plan
from .hf_jobs_helpers import MARK, TOKEN, hf_spec, protocol_lines

pytestmark = pytest.mark.training
SECRET = "GRPO_EXPORT_TEST_SECRET"


def _printed_commands(stderr: str) -> dict[str, str]:
    out: dict[str, str] = {}
    after = stderr.split("On Hugging Face Jobs without the dashboard", 1)[1]
    for line in after.splitlines()[1:]:
        kind, _, command = line.strip().partition(": ")
        if kind in ("bucket", "upload", "hf_jobs"):
            out[kind] = command
    return out


def _folder_files(hub: FakeHub, bucket: str, folder: str) -> dict[str, bytes]:
    return {
        p[len(folder) + 1 :]: hub.bucket_file(bucket, p) for p in hub.buckets[bucket] if p.startswith(folder + "/")
    }


def test_exported_hf_commands_upload_and_run_the_job_the_dashboard_would_submit(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_file = hf_spec(tmp_path, secrets=[SECRET], env={"GRPO_EXPORT_NOTE": "from export"})
    spec = yaml.safe_load(spec_file.read_text())
    spec["name"] = "exported-smoke"
    spec_file.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out" / "recipe.yaml"
    # A user's own shell: not the dashboard process's HF_HUB_DISABLE_IMPLICIT_TOKEN (set once a Space-mode client has
    # run in this test process), under which the CLI would not send HF_TOKEN.
    shell = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_IMPLICIT_TOKEN"}
    env = {
        **shell,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": TOKEN,
        "HF_HUB_OFFLINE": "0",
        SECRET: "s3cret",
        "HF_HOME": str(tmp_path / "hf-home"),
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "export-trl", str(spec_file), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    commands = _printed_commands(proc.stderr)
    assert list(commands) == ["bucket", "upload", "hf_jobs"], proc.stderr
    folder = out.parent / "recipe_hf_job"
    assert (folder / "run.yaml").is_file() and (folder / "grpo_job.py").is_file()
    assert f"/data/data/{Path(spec['dataset']['data_files']).name}" in (folder / "run.yaml").read_text()

    hf = shutil.which("hf")
    assert hf, "the huggingface_hub CLI (`hf`) is installed with huggingface_hub"
    for kind, command in commands.items():  # the printed commands, for real, with the user's shell
        ran = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=300, env=env, cwd=out.parent
        )
        assert ran.returncode == 0, (kind, command, ran.stdout[-2000:], ran.stderr[-2000:])
    exported = hub.only_job()
    wait_for(lambda: exported.stage in ("COMPLETED", "ERROR", "CANCELED"), timeout=600, interval=0.5)
    assert exported.stage == "COMPLETED", exported.printed[-20:]
    assert any(line.startswith(MARK) and '"event": "finished"' in line for line in exported.printed)
    assert exported.workdir is not None and (exported.workdir / "data" / "output" / "model.safetensors").is_file()

    # The dashboard's own submission of the same spec (a scripted job: only what is submitted is compared).
    hub.plans.append(Plan(lines=protocol_lines(2)))
    monkeypatch.setenv(SECRET, "s3cret")
    run = launch(spec_file, Store(), base_dir=REPO, token=TOKEN)
    ours = next(j for j in hub.jobs.values() if j is not exported)
    a, b = dict(exported.spec), dict(ours.spec)
    assert a.pop("labels") | {"grpo-dashboard-run": run.id} == b.pop("labels")
    (va,), (vb,) = a.pop("volumes"), b.pop("volumes")
    assert va.pop("path") == "exported-smoke" and vb.pop("path") == run.id and va == vb
    assert a == b  # image, command, environment, secrets (the named one included), flavor, timeout
    assert b["secrets"] == {"HF_TOKEN": TOKEN, SECRET: "s3cret"}
    bucket = vb["source"]
    assert _folder_files(hub, bucket, "exported-smoke") == _folder_files(hub, bucket, run.id)
    # Run detail's equivalent command is the same builder: the printed one with this run's folder and label.
    shown = hf_jobs_text.job_details(run)["equivalent_command"]
    assert shown == commands["hf_jobs"].replace("jobs-artifacts/exported-smoke:", f"jobs-artifacts/{run.id}:").replace(
        "grpo-dashboard-run=exported-smoke", f"grpo-dashboard-run={run.id}"
    )
