"""The local backend's command and environment (multi-GPU itself needs GPUs: see the README's notes)."""

from __future__ import annotations

import sys
from pathlib import Path

import trl

from grpo_dashboard.launch.local import job as local_job
from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT
from grpo_dashboard.spec.run_spec import RunSpec


def spec_with(**backend: object) -> RunSpec:
    return RunSpec.from_dict({"name": "x", "backend": backend})


def test_single_process_runs_the_job_script_directly(tmp_path: Path) -> None:
    cmd = local_job.build_command(spec_with(), tmp_path / "run.yaml", tmp_path / "metrics.jsonl")
    assert cmd == [
        sys.executable,
        str(JOB_SCRIPT),
        "--config",
        str(tmp_path / "run.yaml"),
        "--metrics",
        str(tmp_path / "metrics.jsonl"),
    ]


def test_several_processes_go_through_accelerate_launch(tmp_path: Path) -> None:
    cmd = local_job.build_command(spec_with(num_processes=4, gpus=[0, 1, 2, 3]), tmp_path / "r.yaml", tmp_path / "m")
    assert cmd[:6] == [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "4", "--multi_gpu"]
    assert cmd[6:] == [str(JOB_SCRIPT), "--config", str(tmp_path / "r.yaml"), "--metrics", str(tmp_path / "m")]


def test_accelerate_preset_names_resolve_to_trl_configs(tmp_path: Path) -> None:
    spec = spec_with(num_processes=2, accelerate_config="zero2")
    cmd = local_job.build_command(spec, tmp_path / "r", tmp_path / "m")
    config = Path(cmd[cmd.index("--config_file") + 1])
    assert config == Path(trl.__file__).parent / "accelerate_configs" / "zero2.yaml" and config.is_file()
    assert "--multi_gpu" not in cmd


def test_gpus_become_cuda_visible_devices() -> None:
    assert local_job.job_environment(spec_with(gpus=[2, 5]))["CUDA_VISIBLE_DEVICES"] == "2,5"
    env = local_job.job_environment(spec_with())
    assert env["PYTHONUNBUFFERED"] == "1"


def test_process_identity_includes_start_time() -> None:
    import os

    me = os.getpid()
    start = local_process.process_start_time(me)
    assert start is not None and local_process.is_alive(me, start)
    assert not local_process.is_alive(me, str(int(start) + 1))
