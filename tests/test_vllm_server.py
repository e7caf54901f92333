"""vLLM server mode, orchestrated. vLLM cannot run here (no GPU, no vllm package), so the server is a stand-in HTTP
server answering /health/ (tests/vllm_standin.py) and the training a short real process; the supervisor
(grpo_dashboard/launch/vllm_server.py) is the real one, run by its path as a job's leader process. Also the checks
that refuse a bad generation section and the estimate that counts the server's GPUs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.checks import cluster_checks, hardware
from grpo_dashboard.checks.model_shape import KNOWN
from grpo_dashboard.launch import runs, vllm_server
from grpo_dashboard.launch.local import checks as local_checks
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.spec.vllm_serve import training_gpus, trl_command

from .conftest import SMOKE_DATA, free_port, processes_with, smoke_dict, wait_for

STANDIN = Path(__file__).with_name("vllm_standin.py")


def plan_for(
    tmp_path: Path, *server_args: str, train_s: float = 1.0, train_code: int = 0, health_timeout_s: float = 20.0
) -> tuple[Path, vllm_server.Plan, int]:
    """A plan: the stand-in server on a free port, and a training that reads its served config and sleeps."""
    port = free_port()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"name": "x", "training": {"learning_rate": 0.1}}))
    train = [
        sys.executable,
        "-c",
        "import sys, time, yaml; t = yaml.safe_load(open(sys.argv[1]))['training']; "
        "print('train: server', t['vllm_server_host'], t['vllm_server_port'], t['vllm_mode'], flush=True); "
        f"time.sleep({train_s}); print('train: done', flush=True); sys.exit({train_code})",
        str(tmp_path / vllm_server.SERVED_CONFIG),
        f"--tag={tmp_path}",
    ]
    plan = vllm_server.Plan(
        [sys.executable, str(STANDIN), "--port", str(port), f"--tag={tmp_path}", *server_args],
        train,
        port,
        health_timeout_s,
        str(tmp_path / vllm_server.SERVER_LOG),
        str(tmp_path / "run.yaml"),
        str(tmp_path / vllm_server.SERVED_CONFIG),
        str(tmp_path / "metrics.jsonl"),
    )
    path = tmp_path / vllm_server.PLAN
    plan.write(path)
    return path, plan, port


def supervise(path: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(vllm_server.supervisor_command(path), stdout=out, stderr=subprocess.STDOUT)


def failures(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("event") == "failed"]


def test_server_starts_is_waited_for_then_training_runs_and_both_stop_together(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, "--healthy-after", "1.5")
    proc = supervise(path, tmp_path / "job.log")
    assert proc.wait(timeout=60) == 0
    job = (tmp_path / "job.log").read_text()
    assert f"train: server 127.0.0.1 {port} server" in job  # training started against the healthy server
    assert "train: done" in job and "vLLM server stopped" in job
    server_log = (tmp_path / vllm_server.SERVER_LOG).read_text()  # kept, with the health polls before it was ready
    assert "standin: GET /health/ -> 503" in server_log and "standin: GET /health/ -> 200" in server_log
    assert processes_with(str(tmp_path)) == []
    assert failures(tmp_path) == []


def test_a_server_that_never_gets_healthy_times_out_and_training_never_starts(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, "--never-healthy", health_timeout_s=2.0)
    proc = supervise(path, tmp_path / "job.log")
    assert proc.wait(timeout=60) == vllm_server.EXIT_SERVER_FAILED
    assert "train:" not in (tmp_path / "job.log").read_text()
    (failed,) = failures(tmp_path)
    assert "did not answer" in failed["message"] and "within 2 s" in failed["message"]
    assert "generation.health_timeout_s" in failed["message"]
    assert processes_with(str(tmp_path)) == []


def test_a_server_that_dies_before_health_fails_with_its_exit_code(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, "--never-healthy", "--die-after", "0.5")
    proc = supervise(path, tmp_path / "job.log")
    assert proc.wait(timeout=60) == vllm_server.EXIT_SERVER_FAILED
    (failed,) = failures(tmp_path)
    assert "exited with code 7 before answering /health/" in failed["message"]
    assert "standin: dying" in failed["message"]  # the last line of the server's log


def test_a_server_that_dies_during_training_stops_the_training(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, "--die-after", "2.0", train_s=60)
    proc = supervise(path, tmp_path / "job.log")
    t0 = time.monotonic()
    assert proc.wait(timeout=60) == vllm_server.EXIT_SERVER_FAILED
    assert time.monotonic() - t0 < 30  # well before the training's own 60 s
    (failed,) = failures(tmp_path)
    assert "exited with code 7 during training; training was stopped" in failed["message"]
    assert "train: done" not in (tmp_path / "job.log").read_text()
    assert processes_with(str(tmp_path)) == []


def test_training_failing_stops_the_server_and_keeps_its_exit_code(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, train_code=5)
    proc = supervise(path, tmp_path / "job.log")
    assert proc.wait(timeout=60) == 5
    assert processes_with(str(tmp_path)) == []


def test_cancel_stops_both(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, train_s=60)
    proc = supervise(path, tmp_path / "job.log")
    wait_for(lambda: "train: server" in (tmp_path / "job.log").read_text(), timeout=30)
    proc.send_signal(signal.SIGTERM)  # what the local backend's cancel and Slurm's scancel send
    assert proc.wait(timeout=30) != 0
    assert processes_with(str(tmp_path)) == []
    assert failures(tmp_path) == []  # a cancel is not a server failure


def test_cancel_while_the_server_starts_stops_it_at_once(tmp_path: Path) -> None:
    path, plan, port = plan_for(tmp_path, "--never-healthy", health_timeout_s=300)
    proc = supervise(path, tmp_path / "job.log")
    log = tmp_path / vllm_server.SERVER_LOG
    wait_for(lambda: log.exists() and "GET /health/" in log.read_text(), timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert processes_with(str(tmp_path)) == [] and failures(tmp_path) == []


def test_local_plan_splits_the_gpus_and_runs_trl_vllm_serve(tmp_path: Path) -> None:
    spec = server_spec(gpus=[0, 1], server_gpus=[2, 3], tensor_parallel_size=2)
    plan = vllm_server.local_plan(spec, tmp_path, ["train"], tmp_path / "metrics.jsonl", visible=4)
    assert plan.server_env == {"CUDA_VISIBLE_DEVICES": "2,3"} and plan.train_env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert plan.server == [
        trl_command(),
        "vllm-serve",
        "--model",
        "Qwen/Qwen2.5-0.5B",
        "--tensor_parallel_size",
        "2",
        "--data_parallel_size",
        "1",
        "--gpu_memory_utilization",
        "0.9",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    unlisted = server_spec(gpus=None, server_gpus=[0], num_processes=3)
    assert training_gpus(unlisted, visible=4) == [1, 2, 3]


# --- the checks ---------------------------------------------------------------------------------------------------
def server_spec(gpus: list[int] | None = None, num_processes: int | None = None, **generation: Any) -> RunSpec:
    data = smoke_dict(Path("m"))
    data["model"] = {"name_or_path": "Qwen/Qwen2.5-0.5B"}
    data["training"].pop("use_cpu")
    data["backend"] = {"kind": "local", "gpus": gpus, "num_processes": num_processes or len(gpus or [0])}
    data["generation"] = generation
    return RunSpec.from_dict(data)


def errors(spec: RunSpec, monkeypatch: pytest.MonkeyPatch, visible: int | None = 8) -> dict[str, str]:
    monkeypatch.setattr(local_checks, "gpu_count", lambda: visible)
    return {e.field: e.message for e in runs.validate(spec, SMOKE_DATA.parent).errors}


def test_server_gpus_overlapping_training_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = errors(server_spec(gpus=[0, 1, 2], server_gpus=[2]), monkeypatch)["generation.server_gpus"]
    assert "overlaps backend.gpus [0, 1, 2] on GPU(s) [2]" in msg and "backend.gpus: [0, 1]" in msg


def test_tensor_parallel_size_not_dividing_the_server_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = errors(server_spec(gpus=[0], server_gpus=[1, 2, 3], tensor_parallel_size=2), monkeypatch)[
        "generation.tensor_parallel_size"
    ]
    assert "does not divide the 3 server GPU(s)" in msg and "[1, 3]" in msg


def test_a_good_server_section_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert errors(server_spec(gpus=[0, 1], server_gpus=[2, 3], tensor_parallel_size=2), monkeypatch) == {}


def test_server_mode_without_anything_to_start_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = server_spec(gpus=[0])
    spec.generation = None
    spec.training.update(use_vllm=True, vllm_mode="server")
    msg = errors(spec, monkeypatch)["training.vllm_mode"]
    assert "nothing starts one" in msg and "generation:" in msg and "vllm_server_base_url" in msg


def test_more_processes_than_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = server_spec(num_processes=4)
    spec.generation = None
    msg = errors(spec, monkeypatch, visible=2)["backend.num_processes"]
    assert "needs 4 GPU(s)" in msg and "shows 2 GPU(s)" in msg and "at most 2" in msg


def test_server_gpus_beyond_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = errors(server_spec(gpus=[0], server_gpus=[1]), monkeypatch, visible=1)["generation.server_gpus"]
    assert "needs 2 GPUs in all (1 for the server, 1 for training)" in msg and "shows 1" in msg


@pytest.mark.skipif(cluster_checks._importable("deepspeed"), reason="deepspeed is installed here")
def test_a_deepspeed_preset_without_deepspeed_is_an_error_locally_and_on_slurm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = server_spec(gpus=[0, 1], num_processes=2)
    spec.generation = None
    spec.backend.accelerate_config = "zero3"
    msg = errors(spec, monkeypatch)["backend.accelerate_config"]
    assert "'deepspeed' package" in msg and "pip install deepspeed" in msg
    spec.backend.kind, spec.backend.gpus, spec.backend.partition, spec.backend.gpus_per_node = "slurm", None, "x", 2
    msg = errors(spec, monkeypatch)["backend.accelerate_config"]
    assert "'deepspeed' package" in msg and "on the cluster's nodes" in msg


def test_the_estimate_says_needs_n_plus_one_gpus_not_does_not_fit() -> None:
    spec = server_spec(gpus=[0], server_gpus=[1])
    spec.backend.kind, spec.backend.gpus, spec.backend.flavor, spec.backend.namespace = "hf_jobs", None, "h200", "me"
    spec.generation = None
    spec.training.update(use_vllm=True, vllm_mode="server")  # TRL's default server address: on the job's machine
    report = hardware.estimate(spec, shape=KNOWN["qwen2.5-1.5b"])
    text = report.to_text()
    assert "needs 1+1 GPUs (1 training + 1 for the vLLM server); h200 has 1" in text
    assert "does not fit" not in text and "does NOT fit" not in text
    assert report.recommended is not None and report.recommended.fits
    # A server of the user's own elsewhere (issue 26) takes no GPU of the job: one H200 is enough.
    spec.training["vllm_server_base_url"] = "http://x:8000"
    external = hardware.estimate(spec, shape=KNOWN["qwen2.5-1.5b"])
    assert external.chosen is not None and external.chosen.fits and "1+1" not in external.to_text()


@pytest.mark.training
def test_a_local_server_mode_run_starts_trl_vllm_serve_and_fails_with_its_reason(tiny_model: Path) -> None:
    """The local backend runs the supervisor as the job: the real `trl vllm-serve` starts and exits at once here (no
    vllm package), so training never starts and the run fails with the server's own last log line. (Validation
    refuses this spec on a machine without GPUs; the run is stored and submitted directly to reach the job.)"""
    from grpo_dashboard.launch import backends, runs
    from grpo_dashboard.store.db import Run, Store, data_dir

    data = smoke_dict(tiny_model, max_steps=2)
    data["backend"] = {"kind": "local", "gpus": [0]}
    data["generation"] = {"server_gpus": [1], "health_timeout_s": 120}
    spec = RunSpec.from_dict(data)
    store = Store()
    run_dir = data_dir() / "runs" / "served-1"
    run_dir.mkdir(parents=True)
    resolved = runs.resolve_paths(spec, SMOKE_DATA.parent.parent, run_dir)
    (run_dir / "run.yaml").write_text(resolved.to_job_yaml())
    run = Run(
        id="served-1",
        name="served",
        spec_yaml=resolved.to_yaml(),
        backend="local",
        status="queued",
        created_at=time.time(),
        run_dir=str(run_dir),
    )
    store.insert_run(run)
    final = runs.wait(store, backends.shared().local.submit(store, run, resolved, None), poll_s=0.3)
    assert final.status == "failed"
    assert "the vLLM server exited with code" in final.error and "before answering /health/" in final.error
    assert "vllm" in final.error  # trl's own complaint, from the kept vllm.log
    assert "vllm-serve" in (run_dir / "vllm.log").read_text() or (run_dir / "vllm.log").stat().st_size > 0
    plan = vllm_server.Plan.read(run_dir / vllm_server.PLAN)
    assert plan.server_env == {"CUDA_VISIBLE_DEVICES": "1"} and plan.train_env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert processes_with(str(run_dir)) == []


def test_a_real_model_on_a_machine_without_a_gpu_is_warned_before_it_trains_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No GPU and no use_cpu: the job would train a 0.5B model on the CPU; said as a warning naming the fix. A test
    model, use_cpu: true, or a machine with GPUs says nothing."""
    data = smoke_dict(Path("m"))
    data["model"] = {"name_or_path": "Qwen/Qwen2.5-0.5B"}
    data["training"].pop("use_cpu")

    def warned(spec: dict[str, Any], visible: int | None) -> list[str]:
        monkeypatch.setattr(local_checks, "gpu_count", lambda: visible)
        report = runs.validate(RunSpec.from_dict(spec), SMOKE_DATA.parent)
        return [w.message for w in report.warnings if w.field == "training.use_cpu"]

    (message,) = warned(data, 0)
    assert "shows no GPU" in message and "'Qwen/Qwen2.5-0.5B' on its CPU" in message and "use_cpu: true" in message
    assert warned(data, 2) == [] and warned(data, None) == []
    assert warned({**data, "training": {**data["training"], "use_cpu": True}}, 0) == []
    assert warned({**data, "model": {"name_or_path": "m", "build_tiny": True}}, 0) == []
