"""The Slurm backend without training: the batch script and launcher lines it writes, and bad input refused before
anything is submitted, each error naming the field and the fix, Slurm's own refusal text shown (real cluster)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard import cli
from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch import backends, runs
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.launch.slurm import commands as slurm_commands
from grpo_dashboard.launch.slurm import script as slurm_script
from grpo_dashboard.launch.slurm import text as slurm_text
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.spec.slurm_options import sbatch_options, time_seconds
from grpo_dashboard.spec.vllm_serve import trl_command
from grpo_dashboard.store.db import Run, Store

from .conftest import SMOKE_DATA, smoke_dict


def spec_of(backend_fields: dict[str, Any], model: str = "Qwen/Qwen2.5-0.5B", **extra: Any) -> RunSpec:
    """A spec on the Slurm backend (Hub model, local smoke data)."""
    data = smoke_dict(Path(model))
    data["model"] = {"name_or_path": model}
    data["training"].pop("use_cpu")
    data["backend"] = {"kind": "slurm", **backend_fields}
    data.update(extra)
    return RunSpec.from_dict(data)


def a_run(tmp_path: Path) -> Run:
    return Run(
        id="r-1", name="r", spec_yaml="", backend="slurm", status="queued", created_at=0.0, run_dir=str(tmp_path)
    )


def errors(spec: RunSpec) -> dict[str, str]:
    return {e.field: e.message for e in validate(spec, SMOKE_DATA.parent).errors}


def test_options_are_one_argument_each_and_jobs_are_never_requeued() -> None:
    spec = spec_of(
        {
            "partition": "gpu",
            "account": "proj",
            "qos": "high",
            "time": "1-00:00:00",
            "nodes": 4,
            "gpus_per_node": 8,
            "cpus_per_task": 32,
            "constraint": "h100",
            "extra_sbatch": ["--exclusive", "--mem=0"],
        }
    )
    assert sbatch_options(spec, "run-1") == [
        "--nodes=4",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=proj",
        "--qos=high",
        "--time=1-00:00:00",
        "--cpus-per-task=32",
        "--constraint=h100",
        "--gpus-per-node=8",
        "--job-name=grpo-smoke",
        "--comment=grpo-dashboard-run=run-1",
        "--no-requeue",
        "--exclusive",
        "--mem=0",
    ]
    assert time_seconds("30") == 1800 and time_seconds("2:00:00") == 7200 and time_seconds("1-02") == 93600
    with pytest.raises(ValueError, match="HH:MM:SS"):
        time_seconds("2h")


def test_multi_node_gpu_launcher_is_accelerate_with_the_nodes_rank(tmp_path: Path) -> None:
    spec = spec_of({"nodes": 2, "gpus_per_node": 4, "accelerate_config": "zero3"})
    cmd = slurm_script.launcher_command(spec, tmp_path / "run.yaml", tmp_path / "metrics.jsonl")
    line = slurm_script.shell_line(cmd)
    assert (
        '-m accelerate.commands.launch --num_processes 8 --num_machines 2 --machine_rank "${SLURM_PROCID}" '
        '--main_process_ip "${MAIN_ADDR}" --main_process_port "${MAIN_PORT}" --config_file ' in line
    )
    assert line.split("--config_file ")[1].split()[0].endswith("accelerate_configs/zero3.yaml")
    script = slurm_script.batch_script(spec, a_run(tmp_path))
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in script and "#SBATCH --gpus-per-node=4" in script
    last = script.strip().splitlines()[-1]
    assert last.startswith("exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c ")
    inner = shlex.split(last)[-1]  # what bash -c runs on each node: the launcher, variables left for the node
    assert inner == f"exec {line}"


def test_cpu_nodes_use_torchrun_and_one_node_runs_the_local_command(tmp_path: Path) -> None:
    two = spec_of({"nodes": 2})
    cmd = slurm_script.launcher_command(two, tmp_path / "run.yaml", tmp_path / "m.jsonl")
    assert cmd[1:13] == [
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--node_rank",
        "SLURM_PROCID",
        "--nproc_per_node",
        "1",
        "--master_addr",
        "MAIN_ADDR",
        "--master_port",
        "MAIN_PORT",
    ]
    one = slurm_script.launcher_command(spec_of({}), tmp_path / "run.yaml", tmp_path / "m.jsonl")
    assert one[1].endswith("jobs/grpo_job.py") and len(one) == 6


def test_server_node_serves_and_the_others_train(tmp_path: Path) -> None:
    spec = spec_of({"nodes": 3, "gpus_per_node": 8}, generation={"server_nodes": 1, "tensor_parallel_size": 2})
    script, plan = slurm_script.batch_files(spec, a_run(tmp_path))
    assert 'TRAIN_NODES=$(IFS=,; echo "${NODES[*]:1:2}")' in script
    assert 'MAIN_ADDR=$(node_addr "${NODES[1]}")' in script
    assert f"vllm_server.py --plan {tmp_path / 'generation.json'}" in script.splitlines()[-1]
    assert plan is not None
    assert plan.server[:5] == ["srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--nodelist=@SERVER_NODES@"]
    assert plan.server[5:] == [
        trl_command(),
        "vllm-serve",
        "--model",
        "Qwen/Qwen2.5-0.5B",
        "--tensor_parallel_size",
        "2",
        "--data_parallel_size",
        "4",
        "--gpu_memory_utilization",
        "0.9",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert "--nodelist=@TRAIN_NODES@" in plan.train and "--num_processes 16 --num_machines 2" in plan.train[-1]
    assert plan.served_config.endswith("run.served.yaml") and "run.served.yaml" in plan.train[-1]


# --- bad input: nothing is submitted ----------------------------------------------------------------------------
def refused(spec: RunSpec, field: str, *fragments: str) -> str:
    """Launching fails with a SpecError on `field` holding every fragment; nothing was written or submitted."""
    store = Store()
    with pytest.raises(SpecError) as info:
        runs.launch(spec, store, base_dir=SMOKE_DATA.parent)
    found = {e.field: e.message for e in info.value.errors}
    assert field in found, found
    for fragment in fragments:
        assert fragment in found[field], found[field]
    assert store.list_runs() == []
    return found[field]


def test_sbatch_missing_is_named_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    refused(spec_of({}), "backend.kind", "sbatch is not there", "login node", "backend.kind: local")


def test_unknown_partition_shows_slurms_refusal_and_the_partitions(slurm: Any) -> None:
    refused(spec_of({"partition": "nope"}), "backend.partition", "Invalid partition name specified", "debug", "tiny")


def test_a_partition_slurm_refuses_shows_its_text(slurm: Any) -> None:
    refused(
        spec_of({"partition": "closed"}),
        "backend.partition",
        "refused by Slurm",
        "Required partition not available (inactive or drain)",
    )


def test_more_nodes_than_the_partition_has(slurm: Any) -> None:
    refused(
        spec_of({"partition": "tiny", "nodes": 2}),
        "backend.nodes",
        "1 node(s) of partition tiny",
        "Requested node configuration is not available",
        "at most 1",
    )


def test_time_over_the_partitions_limit(slurm: Any) -> None:
    refused(spec_of({"time": "30"}), "backend.time", "00:10:00", "PartitionTimeLimit")


def test_a_well_formed_spec_passes_the_clusters_own_check(slurm: Any) -> None:
    spec = spec_of({"partition": "debug", "nodes": 2, "time": "5"})
    assert errors(spec) == {}


def test_slurm_errors_are_found_without_asking_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm at all: these are the spec's own faults
    found = errors(spec_of({"nodes": 0, "time": "2h", "gpus": [0], "extra_sbatch": ["exclusive"]}))
    assert "HH:MM:SS" in found["backend.time"] and "≥ 1" in found["backend.nodes"]
    assert "gpus_per_node" in found["backend.gpus"] and "starting with '-'" in found["backend.extra_sbatch"]
    found = errors(spec_of({"nodes": 2, "num_processes": 3}))
    assert "nodes × gpus_per_node = 2" in found["backend.num_processes"]


def test_generation_batch_divisibility_counts_processes_across_nodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    spec = spec_of(
        {"nodes": 3, "gpus_per_node": 1},
        training={**smoke_dict(Path("m"))["training"], "per_device_train_batch_size": 4},
    )
    msg = errors(spec)["training.per_device_train_batch_size"]
    assert "3 training node(s) × 1 process(es) = 3" in msg and "= 12" in msg and "num_generations (8)" in msg


def test_job_summary_says_why_a_job_waits(tmp_path: Path) -> None:
    state = slurm_commands.JobState("7", "PENDING", "QOSMaxJobsPerUserLimit", time_limit="1:00:00")
    assert state.describe() == "Slurm job 7: Pending: QOSMaxJobsPerUserLimit, time limit 1:00:00"
    run = a_run(tmp_path)
    slurm_commands._write_json(
        tmp_path / slurm_commands.JOB_INFO,
        {"job_id": "7", "partition": "gpu", "nodes": 2, "world_size": 16, "script": "/x/job.sbatch"},
    )
    slurm_commands._write_json(tmp_path / slurm_commands.STATE_FILE, {"summary": state.describe()})
    assert slurm_text.job_summary(run) == (
        "Slurm job 7: Pending: QOSMaxJobsPerUserLimit, time limit 1:00:00 "
        "(partition gpu, 2 node(s), 16 process(es)); script /x/job.sbatch"
    )


def test_a_node_failure_names_sruns_line_until_slurmstepds_arrives(tmp_path: Path) -> None:
    # The order of a real job log when its node went down: srun's error, then srun's wait, which says nothing of why;
    # slurmstepd's own line may reach the log after the run has settled.
    log = tmp_path / "job.log"
    log.write_text(
        "{'loss': 0.1}\nsrun: error: Node failure on n2\n"
        "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n",
        encoding="utf-8",
    )
    store = Store(tmp_path / "db.sqlite")
    run = a_run(tmp_path)
    store.insert_run(run)
    state = slurm_commands.JobState("4", "NODE_FAIL", "NodeDown", exit_code="0:0")
    store.finish_run(run.id, "failed", error=slurm_commands._reason(run, state))
    error = store.get_run(run.id).error
    assert error == (
        "Slurm ended job 4: NODE_FAIL (a node failed), reason NodeDown. Slurm: srun: error: Node failure on n2"
    ), error
    with log.open("a", encoding="utf-8") as out:
        out.write("slurmstepd-n2: error: *** JOB 4 ON n2 CANCELLED AT 2026-12-01T17:39:52 DUE TO NODE FAILURE ***\n")
    slurm_commands._add_slurms_word(store, store.get_run(run.id))
    assert store.get_run(run.id).error == (
        "Slurm ended job 4: NODE_FAIL (a node failed), reason NodeDown. Slurm: "
        "*** JOB 4 ON n2 CANCELLED AT 2026-12-01T17:39:52 DUE TO NODE FAILURE ***"
    )


def test_a_pending_job_is_followed_with_slurms_reason(slurm: Any, tmp_path: Path) -> None:
    """A job held by Slurm shows why it waits (here: held by the user, Reason=JobHeldUser) and cancels cleanly."""
    script = tmp_path / "held.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    job_id = slurm.command(
        "sbatch", "--parsable", "--hold", f"--output={tmp_path / 'o.log'}", str(script)
    ).stdout.strip()
    try:
        state = slurm_commands.job_state(job_id)
        assert state is not None and state.state == "PENDING" and state.reason == "JobHeldUser"
        assert state.describe().startswith(f"Slurm job {job_id}: Pending: JobHeldUser")
    finally:
        slurm.command("scancel", job_id)


def test_the_new_run_page_shows_the_batch_script_and_the_run_page_slurms_state(tmp_path: Path) -> None:
    from grpo_dashboard.views import overview, remote_status

    spec = spec_of({"nodes": 2, "partition": "gpu"})
    text = overview.command_text(spec.to_yaml(), overview.command_preview(spec))
    assert "#SBATCH --nodes=2" in text and "#SBATCH --output=<run_dir>/job.log" in text
    assert not (Path("<run_dir>") / "generation.json").exists()
    run = a_run(tmp_path)
    assert remote_status.remote_markdown(run) == ""  # not submitted yet
    slurm_commands._write_json(
        tmp_path / slurm_commands.JOB_INFO,
        {"job_id": "9", "partition": "gpu", "nodes": 2, "world_size": 2, "script": "/x/job.sbatch"},
    )
    slurm_commands._write_json(tmp_path / slurm_commands.STATE_FILE, {"summary": "Slurm job 9: Pending: Resources"})
    assert remote_status.remote_markdown(run).startswith("**Slurm** Slurm job 9: Pending: Resources (partition gpu")


def test_refresh_finds_the_job_of_a_run_whose_id_was_never_stored(slurm: Any, tmp_path: Path, data_dir: Path) -> None:
    store = Store()
    run_id = "lost-20260101-000000-cccccc"
    run_dir = data_dir / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / slurm_script.BATCH_SCRIPT).write_text("#!/bin/bash\ntrue\n")
    store.insert_run(
        Run(
            id=run_id,
            name="lost",
            spec_yaml=spec_of({}).to_yaml(),
            backend="slurm",
            status="queued",
            created_at=0.0,
            run_dir=str(run_dir),
        )
    )
    job_id = slurm.command(
        "sbatch",
        "--parsable",
        "--hold",
        f"--comment={slurm_commands.LABEL}{run_id}",
        f"--output={tmp_path / 'o.log'}",
        str(run_dir / slurm_script.BATCH_SCRIPT),
    ).stdout.strip()
    try:
        assert runs.refresh(store, store.get_run(run_id)).external_id == job_id
        assert (run_dir / slurm_commands.STATE_FILE).exists()  # followed: Slurm's answer kept for the run page
    finally:
        slurm.command("scancel", job_id)


def test_reattach_finds_jobs_by_their_run_label(
    slurm: Any, tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dashboard that stopped between sbatch and storing the job id, and a run missing from the store: both are
    found again by the job's --comment label (held jobs: nothing runs)."""
    store = Store()
    lost_id, gone_id = "lost-20260101-000000-aaaaaa", "gone-20260101-000000-bbbbbb"
    for run_id in (lost_id, gone_id):
        (data_dir / "runs" / run_id).mkdir(parents=True)
        (data_dir / "runs" / run_id / "run.yaml").write_text(spec_of({}).to_job_yaml())
    store.insert_run(
        Run(
            id=lost_id,
            name="lost",
            spec_yaml=spec_of({}).to_yaml(),
            backend="slurm",
            status="queued",
            created_at=0.0,
            run_dir=str(data_dir / "runs" / lost_id),
        )
    )
    script = tmp_path / "held.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    jobs = {
        run_id: slurm.command(
            "sbatch",
            "--parsable",
            "--hold",
            f"--comment={slurm_commands.LABEL}{run_id}",
            f"--output={tmp_path / 'o.log'}",
            str(script),
        ).stdout.strip()
        for run_id in (lost_id, gone_id)
    }
    try:
        found = {r.id: r.external_id for r in backends.shared().slurm.reattach(store)}
        assert found == jobs
        assert store.get_run(gone_id).backend == "slurm" and store.get_run(gone_id).name == "smoke"
        assert runs.refresh(store, store.get_run(lost_id)).status == "queued"  # pending, followed again
        capsys.readouterr()
        assert cli.main(["reattach", "--backend", "slurm"]) == cli.EXIT_OK
        out = capsys.readouterr().out
        assert "slurm: 2 run(s) found again:" in out and all(job_id in out for job_id in jobs.values()), out
    finally:
        for job_id in jobs.values():
            slurm.command("scancel", job_id)


def test_the_form_offers_slurm_and_its_fields_round_trip() -> None:
    from grpo_dashboard.spec import forms

    fields = forms.fields_by_key()
    assert "slurm" in fields["backend.kind"].choices
    for key in (
        "backend.partition",
        "backend.account",
        "backend.qos",
        "backend.time",
        "backend.nodes",
        "backend.gpus_per_node",
        "backend.cpus_per_task",
        "backend.constraint",
        "backend.extra_sbatch",
    ):
        assert key in fields and fields[key].help, key
    spec = spec_of(
        {"partition": "gpu", "nodes": 2, "gpus_per_node": 8, "time": "2:00:00", "extra_sbatch": ["--exclusive"]},
        generation={"server_nodes": 1},
    )
    back = forms.spec_from_values(forms.values_from_spec(spec), base=spec)
    assert back.backend == spec.backend and back.generation == spec.generation
