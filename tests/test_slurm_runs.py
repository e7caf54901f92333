"""The smoke preset through the Slurm backend on a real Slurm cluster (tests/slurm_cluster.py): it trains and ends
completed with every record stored, across a dashboard restart; two Slurm nodes train one 2-rank job (torchrun per
node, gloo over 127.0.0.1); canceling a two-node job leaves no process on either node; a job Slurm kills at its time
limit ends failed with Slurm's reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.launch import runs
from grpo_dashboard.launch.slurm import commands as slurm_commands
from grpo_dashboard.launch.slurm import script as slurm_script
from grpo_dashboard.store.db import TERMINAL, Store

from .conftest import REPO, jsonl_records, processes_with, same_values, smoke_dict, store_records, wait_for

pytestmark = pytest.mark.training


def slurm_spec(model: Path, nodes: int = 1, time_limit: str = "5", **training: Any) -> dict[str, Any]:
    """The smoke preset on the Slurm backend."""
    spec = smoke_dict(model, **training)
    spec["backend"] = {"kind": "slurm", "nodes": nodes, "time": time_limit}
    return spec


def watcher() -> subprocess.Popen[bytes]:
    """The dashboard's monitor as its own process (`python -m grpo_dashboard watch`), on this test's data dir."""
    return subprocess.Popen(
        [sys.executable, "-m", "grpo_dashboard", "watch", "--interval", "0.3", "--until-idle"],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def events(store: Store, run_id: str) -> list[str]:
    """The run's stored event names in order."""
    return [e["event"] for e in store.events(run_id)]


def test_smoke_on_slurm_completes_with_every_record_across_a_dashboard_restart(slurm: Any, tiny_model: Path) -> None:
    store = Store()
    run = runs.launch(slurm_spec(tiny_model, max_steps=30), store)
    assert run.status == "queued" and run.external_id, run.error
    script = (Path(run.run_dir) / slurm_script.BATCH_SCRIPT).read_text()
    assert f"#SBATCH --comment=grpo-dashboard-run={run.id}" in script and "#SBATCH --time=5" in script
    first = watcher()
    try:
        wait_for(lambda: store.get_run(run.id).n_records >= 3, timeout=240)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    before = store.get_run(run.id)
    assert before.status == "running", "the run ended before the dashboard was killed; nothing was tested"
    time.sleep(2.0)  # the job keeps writing while no dashboard watches
    second = watcher()
    try:
        assert second.wait(timeout=300) == 0
    finally:
        if second.poll() is None:
            second.kill()
    final = store.get_run(run.id)
    assert final.status == "completed", final.error
    assert final.n_records == 31 and final.n_skipped == 0  # 30 steps + the trainer's summary record
    assert same_values(jsonl_records(Path(final.run_dir) / "metrics.jsonl"), store_records(store, run.id))
    state = wait_for(
        lambda: (s := slurm_commands.job_state(str(final.external_id))) is not None and s.ended and s, timeout=60
    )
    assert state.state == "COMPLETED"
    wait_for(lambda: processes_with(run.id) == [], timeout=30)


def test_two_slurm_nodes_train_one_two_rank_job(slurm: Any, tiny_model: Path) -> None:
    store = Store()
    run = runs.launch(slurm_spec(tiny_model, nodes=2, max_steps=4), store)
    script = (Path(run.run_dir) / slurm_script.BATCH_SCRIPT).read_text()
    assert "#SBATCH --nodes=2" in script and '--node_rank "${SLURM_PROCID}"' in script
    final = runs.wait(store, run, poll_s=0.3)
    assert final.status == "completed", final.error
    assert final.n_records == 5 and final.n_skipped == 0
    assert same_values(jsonl_records(Path(final.run_dir) / "metrics.jsonl"), store_records(store, run.id))
    started = [e for e in store.events(run.id) if e["event"] == "started"]
    assert len(started) == 1 and started[0]["world_size"] == 2  # one stream, written by rank 0 only
    tokens = [v for _, v, _ in store.series(run.id, "num_tokens")]
    assert len(tokens) == 4
    log = (Path(final.run_dir) / "job.log").read_text()
    assert "training on n1,n2 (2 process(es))" in log


def test_cancel_of_a_two_node_job_ends_canceled_with_no_process_left_on_any_node(slurm: Any, tiny_model: Path) -> None:
    store = Store()
    run = runs.launch(slurm_spec(tiny_model, nodes=2, max_steps=500), store)
    wait_for(lambda: runs.refresh(store, store.get_run(run.id)).n_records >= 1, timeout=240)
    final = runs.cancel(store, store.get_run(run.id), wait=True, grace_s=60)
    assert final.status == "canceled", final.error
    state = slurm_commands.job_state(str(final.external_id))
    assert state is None or state.state == "CANCELLED", state
    wait_for(lambda: processes_with(run.id) == [], timeout=30)
    assert "canceled" in events(store, run.id)


@pytest.mark.slow
def test_a_job_killed_at_its_time_limit_fails_with_slurms_reason(slurm: Any, tiny_model: Path) -> None:
    store = Store()
    # Slurm counts time limits in minutes and checks them every 30 s: a 1-minute job is killed within ~90 s.
    run = runs.launch(slurm_spec(tiny_model, time_limit="1", max_steps=100000), store)
    final = runs.wait(store, run, poll_s=0.5)
    assert final.status == "failed"
    assert "TIMEOUT" in final.error and "TimeLimit" in final.error, final.error
    assert "DUE TO TIME LIMIT" in final.error, final.error  # Slurm's own line from the job log
    assert final.n_records >= 1
    wait_for(lambda: processes_with(run.id) == [], timeout=60)
    info = json.loads((Path(final.run_dir) / slurm_commands.STATE_FILE).read_text())
    assert info["job_id"] == final.external_id


# Last in the session's use of the cluster: Slurm keeps part of n2 allocated for a while after the node failure.
def test_a_job_on_a_node_that_goes_down_fails_with_slurms_reason(slurm: Any, tiny_model: Path) -> None:
    store = Store()
    spec = slurm_spec(tiny_model, max_steps=100000)
    spec["backend"]["extra_sbatch"] = ["--nodelist=n2"]
    run = runs.launch(spec, store)
    wait_for(lambda: runs.refresh(store, store.get_run(run.id)).n_records >= 1, timeout=240)
    try:
        done = slurm.command("scontrol", "update", "NodeName=n2", "State=DOWN", "Reason=grpo-test")
        assert done.returncode == 0, done.stderr
        final = runs.wait(store, store.get_run(run.id), poll_s=0.5)
    finally:  # the node's slurmd still answers, so Slurm returns it to service (ReturnToService=2)
        wait_for(lambda: "down" not in slurm.command("sinfo", "-h", "-n", "n2", "-o", "%T").stdout, timeout=60)
    assert final.status == "failed", final.error
    assert "NODE_FAIL" in final.error and "a node failed" in final.error and "NodeDown" in final.error, final.error
    # Slurm's own line from the job log: slurmstepd's "*** JOB … DUE TO NODE FAILURE ***", or srun's error when
    # slurmstepd's line had not reached the log by the time the run settled.
    assert "DUE TO NODE FAILURE" in final.error or "srun: error: Node failure on" in final.error
    wait_for(lambda: processes_with(run.id) == [], timeout=60)


def _rank_of(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"grpo_job.py" not in cmdline or b"accelerate" in cmdline:
        return None
    found = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"RANK=")]
    return found[0] if found else None


def test_a_stop_signalled_to_one_rank_stops_every_rank_at_the_same_step(slurm: Any, tiny_model: Path) -> None:
    """Cancel reaches the nodes at different moments (scancel, a preempted node): the rank told first must not stop
    alone, which leaves the other in its next collective ("Connection reset by peer") and ended the run failed.
    Here only rank 1 is signalled; both stop together and the run ends canceled."""
    store = Store()
    run = runs.launch(slurm_spec(tiny_model, nodes=2, max_steps=500), store)
    wait_for(lambda: runs.refresh(store, store.get_run(run.id)).n_records >= 2, timeout=240)
    ranks = {r: pid for pid in processes_with(run.id) if (r := _rank_of(pid)) is not None}
    assert set(ranks) == {"0", "1"}, ranks
    os.kill(ranks["1"], signal.SIGTERM)
    final = wait_for(lambda: (r := runs.refresh(store, store.get_run(run.id))).status in TERMINAL and r, timeout=120)
    assert final.status == "canceled", final.error
    assert final.n_records < 500
    wait_for(lambda: processes_with(run.id) == [], timeout=60)
